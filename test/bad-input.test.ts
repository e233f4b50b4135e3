import { fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { expect } from "chai";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { postRpc, type ConnectErrorBody } from "./support/raw-rpc.js";


describe("bad input on the Connect endpoint", () => {
  let server: TestServer;
  let user: SignedIn;
  before(async () => {
    server = await startTestServer();
    user = await signInWithCode(server);
    await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: "Intact" });
  });
  after(async () => server.dispose());

  async function post(path: string, body: string | Uint8Array, contentType = "application/json", token: string | null = user.accessToken) {
    const answer = await postRpc(server, path, body, { contentType, token });
    return { status: answer.status, body: answer.error() };
  }

  function expectDetail(body: ConnectErrorBody, code: string, errorName: string) {
    expect(body.code).to.equal(code);
    expect(body.details).to.have.length(1);
    const [only] = body.details!;
    expect(only.type).to.equal("shared.v1.ErrorDetail");
    const detail = fromBinary(ErrorDetailSchema, base64Decode(only.value));
    expect(detail.errorName).to.equal(errorName);
    expect(only.debug.errorName).to.equal(errorName);
    expect(only.debug.errorCode).to.equal(detail.errorCode);
  }

  it("answers invalid_argument (400) with an ErrorDetail for malformed JSON", async () => {
    const { status, body } = await post("/api.v1.UserService/UpdateProfile", "{nickname:");
    expect(status).to.equal(400);
    expectDetail(body, "invalid_argument", "MALFORMED_REQUEST");
  });

  it("answers invalid_argument for a field of the wrong type", async () => {
    const { body } = await post("/api.v1.UserService/BatchGetUserInfo", JSON.stringify({ userIds: ["abc"] }));
    expectDetail(body, "invalid_argument", "MALFORMED_REQUEST");
  });

  it("answers invalid_argument for an unknown enum name in JSON and an unknown enum number in binary", async () => {
    const json = await post("/api.v1.AuthService/RequestVerifyCode", JSON.stringify({ identityType: "IDENTITY_TYPE_PIGEON", identityValue: "a@b.co" }));
    expectDetail(json.body, "invalid_argument", "MALFORMED_REQUEST");
    // field 1 (identity_type) varint 9, field 2 (identity_value) "a@b.co"
    const binary = await post("/api.v1.AuthService/RequestVerifyCode", new Uint8Array([0x08, 0x09, 0x12, 0x06, ...new TextEncoder().encode("a@b.co")]), "application/proto");
    expectDetail(binary.body, "invalid_argument", "INVALID_ARGUMENT");
  });

  it("answers an error with an ErrorDetail for garbage protobuf", async () => {
    const { status, body } = await post("/api.v1.UserService/GetProfile", new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0xff]), "application/proto");
    expect(status).to.equal(400);
    expectDetail(body, "invalid_argument", "MALFORMED_REQUEST");
  });

  it("answers resource_exhausted for a body over the size limit, before reading it whole", async () => {
    const huge = JSON.stringify({ nickname: "x".repeat(9 * 1024 * 1024) });
    const { body } = await post("/api.v1.UserService/UpdateProfile", huge);
    expectDetail(body, "resource_exhausted", "REQUEST_TOO_LARGE");
  });

  it("answers unimplemented for an unknown procedure or service", async () => {
    const unknown = await post("/api.v1.UserService/DropAllTables", "{}");
    expect(unknown.status).to.equal(404);
    expectDetail(unknown.body, "unimplemented", "UNIMPLEMENTED");
    const unknownService = await post("/api.v1.ForwardService/ForwardMessage", "{}");
    expect(unknownService.status).to.equal(404);
    expectDetail(unknownService.body, "unimplemented", "UNIMPLEMENTED");
  });

  it("answers unauthenticated with an ErrorDetail for a missing or garbage token", async () => {
    expectDetail((await post("/api.v1.UserService/GetProfile", "{}", "application/json", null)).body, "unauthenticated", "INVALID_TOKEN");
    expectDetail((await post("/api.v1.UserService/GetProfile", "{}", "application/json", "garbage!@#$%^")).body, "unauthenticated", "INVALID_TOKEN");
  });

  it("answers unknown JSON fields as invalid_argument rather than ignoring them silently", async () => {
    const { body } = await post("/api.v1.UserService/UpdateProfile", JSON.stringify({ nickName: "typo" }));
    expectDetail(body, "invalid_argument", "MALFORMED_REQUEST");
  });

  it("kept the process alive and the data intact through all of the above", async () => {
    const { profile } = await client(server, UserService, "json", user.accessToken).getProfile({});
    expect(profile?.nickname).to.equal("Intact");
    const health = await fetch(server.url + "/healthz");
    expect(health.status).to.equal(200);
  });
});
