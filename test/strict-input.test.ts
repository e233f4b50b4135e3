import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MediaPurpose } from "../shared/gen/shared/v1/media_pb.js";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType } from "../shared/gen/shared/v1/message_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import { device, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer, type WireMode } from "./support/harness.js";
import { postRpc, type ConnectErrorBody } from "./support/raw-rpc.js";

/** The rule a call was refused by, or undefined when it was not refused for a rule. */
async function refusedRule(call: Promise<unknown>): Promise<{ rule: string; field: string } | undefined> {
  try {
    await call;
    return undefined;
  } catch (err) {
    if (!(err instanceof ConnectError) || err.code !== Code.InvalidArgument) return undefined;
    const metadata = err.findDetails(ErrorDetailSchema)[0]?.metadata ?? {};
    return metadata.rule ? { rule: metadata.rule, field: metadata.field } : undefined;
  }
}

// C0 (NUL, BEL, TAB, LF), DEL and C1 (NEL, APC).
const controlCharacters = ["\u0000", "\u0007", "\t", "\n", "\u007f", "\u0085", "\u009f"];

describe("names refuse control characters", () => {
  let server: TestServer;
  let user: SignedIn;
  before(async () => {
    server = await startTestServer();
    user = await signInWithCode(server);
  });
  after(async () => server.dispose());

  let counter = 0;
  const unique = (prefix: string) => `${prefix}${process.pid % 1000}x${++counter}`;

  /** Every name field a client sets, each reached through an RPC that takes it. */
  const cases: { field: string; call: (mode: WireMode, name: string) => Promise<unknown> }[] = [
    { field: "nickname", call: (mode, name) => client(server, UserService, mode, user.accessToken).updateProfile({ nickname: name }) },
    { field: "username", call: (mode, name) => client(server, UserService, mode, user.accessToken).setUsername({ username: name }) },
    { field: "username", call: (mode, name) => client(server, UserService, mode, user.accessToken).resolveUsername({ username: name }) },
    { field: "username", call: (mode, name) => client(server, AgentService, mode, user.accessToken).createAgent({ username: name, name: "Agent" }) },
    { field: "name", call: (mode, name) => client(server, AgentService, mode, user.accessToken).createAgent({ username: unique("agent_"), name }) },
    {
      field: "commands.items.command",
      call: (mode, name) =>
        client(server, AgentService, mode, user.accessToken).setAgentConfig({ agentUserId: 1, commands: { items: [{ command: name, description: "d" }] } }),
    },
    { field: "name", call: (mode, name) => client(server, GroupService, mode, user.accessToken).createGroup({ name, memberIds: [1, 2] }) },
    { field: "name", call: (mode, name) => client(server, GroupService, mode, user.accessToken).updateGroupName({ groupId: 1, name }) },
    { field: "alias", call: (mode, name) => client(server, ContactService, mode, user.accessToken).updateContactAlias({ contactUserId: 1, alias: name }) },
    {
      field: "device_info.device_name",
      call: (mode, name) => client(server, AuthService, mode).verifyCode({ verifyToken: "nxv_x", code: "123456", deviceInfo: device(undefined, { deviceName: name }) }),
    },
    {
      field: "file_name",
      call: (mode, name) => client(server, MediaService, mode, user.accessToken).initUpload({ fileName: name, contentType: "text/plain", size: 1n }),
    },
    {
      field: "file_name",
      call: (mode, name) =>
        client(server, MediaService, mode, user.accessToken).uploadFile({ fileName: name, contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: new Uint8Array([1]) }),
    },
    {
      field: "body.file.filename",
      call: (mode, name) =>
        client(server, MessageService, mode, user.accessToken).sendMessage({
          clientMessageId: 1n,
          conversationId: 1n,
          body: { type: MessageType.FILE, content: { case: "file", value: { fileId: "f", filename: name } } },
        }),
    },
  ];

  for (const mode of wireModes) {
    it(`answers INVALID_ARGUMENT naming the field for C0, DEL and C1 characters in every name (${mode})`, async () => {
      for (const { field, call } of cases) {
        for (const control of controlCharacters) {
          const refused = await refusedRule(call(mode, unique(`ab${control}cd`)));
          expect(refused, `${field} with U+${control.codePointAt(0)!.toString(16).padStart(4, "0")}`).to.deep.equal({ rule: "string.no_control_characters", field });
        }
      }
    });

    it(`lets names with other characters through that rule: accents, emoji, no-break space (${mode})`, async () => {
      for (const { field, call } of cases) {
        // Lowercase ASCII first, so usernames meet their own pattern.
        const refused = await refusedRule(call(mode, unique("zoe_\u00e9\u00a0\u{1f600}")));
        expect(refused?.rule, field).to.not.equal("string.no_control_characters");
      }
    });
  }

  it("carries the refusal as INVALID_ARGUMENT with one ErrorDetail, and stores nothing", async () => {
    const users = client(server, UserService, "json", user.accessToken);
    await users.updateProfile({ nickname: "Clean" });
    const detail = await expectError(users.updateProfile({ nickname: "Evil\u0000Twin" }), Errors.invalidArgument);
    expect(detail.metadata).to.include({ field: "nickname", rule: "string.no_control_characters" });
    const { profile } = await users.getProfile({});
    expect(profile?.nickname).to.equal("Clean");
  });
});


describe("JSON request bodies are decoded strictly", () => {
  let server: TestServer;
  let user: SignedIn;
  before(async () => {
    server = await startTestServer();
    user = await signInWithCode(server);
    await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: "Intact" });
  });
  after(async () => server.dispose());

  const post = (path: string, body: Uint8Array | string, contentType = "application/json") => postRpc(server, path, body, { contentType, token: user.accessToken });
  async function postJson(path: string, body: Uint8Array | string) {
    const answer = await post(path, body);
    return { status: answer.status, body: answer.error() };
  }
  const nickname = async () => (await client(server, UserService, "json", user.accessToken).getProfile({})).profile?.nickname;
  const bytes = (...parts: (string | number[])[]) => Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p))));

  describe("UTF-8", () => {
    const invalid: [string, number[]][] = [
      ["a byte that never starts a character", [0xff]],
      ["a lone continuation byte", [0x80]],
      ["an overlong encoding of /", [0xc0, 0xaf]],
      ["an encoded UTF-16 surrogate", [0xed, 0xa0, 0x80]],
      ["a sequence cut short", [0xe2, 0x82]],
    ];
    for (const [what, sequence] of invalid) {
      it(`answers INVALID_ARGUMENT (MALFORMED_REQUEST) for ${what} in a string, and stores nothing`, async () => {
        const { status, body } = await postJson("/api.v1.UserService/UpdateProfile", bytes('{"nickname":"Ev', sequence, 'il"}'));
        expect(status).to.equal(400);
        expect(body.code).to.equal("invalid_argument");
        expect(body.details?.map((d) => d.debug.errorName)).to.deep.equal(["MALFORMED_REQUEST"]);
        expect(await nickname()).to.equal("Intact");
      });
    }

    it("answers INVALID_ARGUMENT for invalid UTF-8 outside strings too (in a key)", async () => {
      const { status, body } = await postJson("/api.v1.UserService/UpdateProfile", bytes('{"nick', [0xff], 'name":"x"}'));
      expect(status).to.equal(400);
      expect(body.details?.map((d) => d.debug.errorName)).to.deep.equal(["MALFORMED_REQUEST"]);
    });

    it("keeps valid multi-byte text exactly as sent", async () => {
      const text = "Zo\u00eb \u4e2d\u6587 \u{1f600}";
      const { status } = await post("/api.v1.UserService/UpdateProfile", Buffer.from(JSON.stringify({ nickname: text }), "utf8"));
      expect(status).to.equal(200);
      expect(await nickname()).to.equal(text);
      await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: "Intact" });
    });

    it("answers INVALID_ARGUMENT for invalid UTF-8 in a binary protobuf string field", async () => {
      // UpdateProfileRequest field 1 (nickname), length 4: "E", 0xff, 0xfe, "l"
      const { status, bytes: answer } = await post("/api.v1.UserService/UpdateProfile", new Uint8Array([0x0a, 0x04, 0x45, 0xff, 0xfe, 0x6c]), "application/proto");
      expect(status).to.equal(400);
      const body = JSON.parse(new TextDecoder().decode(answer)) as ConnectErrorBody;
      expect(body.code).to.equal("invalid_argument");
      expect(body.details?.map((d) => d.debug.errorName)).to.deep.equal(["MALFORMED_REQUEST"]);
      expect(await nickname()).to.equal("Intact");
    });

    it("applies to gRPC-web JSON requests as well", async () => {
      const json = bytes('{"nickname":"Ev', [0xff], 'il"}');
      const frame = Buffer.alloc(5 + json.length);
      frame.writeUInt32BE(json.length, 1);
      json.copy(frame, 5);
      const { status, bytes: answer } = await post("/api.v1.UserService/UpdateProfile", frame, "application/grpc-web+json");
      expect(status).to.equal(200); // gRPC-web reports the status in its trailer frame
      expect(Buffer.from(answer).toString("latin1")).to.match(/grpc-status: ?3\r\n/);
      expect(await nickname()).to.equal("Intact");
    });
  });

  describe("int64 values", () => {
    const getMessage = (conversationId: unknown, key = "conversationId") => postJson("/api.v1.MessageService/GetMessage", JSON.stringify({ [key]: conversationId, messageId: "1" }));

    for (const value of ["0x10", " 12", "12 ", "\n12", "1e3", "+5", "", "0b11", "0o7", "1.0", "1_000", "\u0661\u0662"]) {
      it(`answers INVALID_ARGUMENT (MALFORMED_REQUEST) for the string ${JSON.stringify(value)}`, async () => {
        const { status, body } = await getMessage(value);
        expect(status).to.equal(400);
        expect(body.code).to.equal("invalid_argument");
        expect(body.details?.map((d) => d.debug.errorName)).to.deep.equal(["MALFORMED_REQUEST"]);
        expect(body.message).to.contain("conversationId");
      });
    }

    it("answers INVALID_ARGUMENT for a number that JSON cannot carry exactly (2^53 and beyond)", async () => {
      const { status, body } = await postJson("/api.v1.MessageService/GetMessage", '{"conversationId": 9007199254740993, "messageId": "1"}');
      expect(status).to.equal(400);
      expect(body.details?.map((d) => d.debug.errorName)).to.deep.equal(["MALFORMED_REQUEST"]);
    });

    it("checks fields given under their proto name, in lists and in nested messages", async () => {
      expect((await getMessage("0x10", "conversation_id")).status).to.equal(400);
      const list = await postJson("/api.v1.MessageService/DeleteMessages", JSON.stringify({ conversationId: "5", messageIds: ["1", " 2"] }));
      expect(list.status).to.equal(400);
      expect(list.body.message).to.contain("messageIds[1]");
      const nested = await postJson(
        "/api.v1.MessageService/SendMessage",
        JSON.stringify({ clientMessageId: "1", conversationId: "5", body: { type: "MESSAGE_TYPE_FILE", file: { fileId: "f", filename: "a", sizeBytes: "0x10" } } }),
      );
      expect(nested.status).to.equal(400);
      expect(nested.body.message).to.contain("sizeBytes");
    });

    for (const value of ["12", "0012", "9223372036854775807", 12, 9007199254740991]) {
      it(`reads ${JSON.stringify(value)} as proto3 JSON allows (the request reaches the engine)`, async () => {
        const { status, body } = await getMessage(value);
        expect(status, body.message).to.equal(404);
        expect(body.code).to.equal("not_found");
      });
    }
  });
});
