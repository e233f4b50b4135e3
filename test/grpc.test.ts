// gRPC and gRPC-Web, as clients generated from shared/proto see them. The gRPC client is
// @grpc/grpc-js with @grpc/proto-loader reading the repository's .proto files: nothing of this
// server's code or generated code is on its side. gRPC goes to GRPC_PORT (cleartext HTTP/2; in the
// cluster's shape, nginx's gRPC listener in front of both api nodes); gRPC-Web goes to the main
// port over HTTP/1.1 (and to GRPC_PORT over HTTP/2). Errors are read as upstream gRPC clients read
// them: the status code, and the ErrorDetail inside the google.rpc.Status of grpc-status-details-bin.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import net from "node:net";
import { join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import protobuf from "protobufjs";
import { buildProtoset } from "../scripts/protoset.js";
import { defaultGrpcPort, loadConfig } from "../shared/config.js";
import { Errors } from "../shared/errors.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { freshEmail, lastCode, startNodes, startTestServer, testTopology, type TestServer } from "./support/harness.js";
import { nextClientMessageId } from "./support/messaging.js";
import { startTestFront, type TestFront } from "./support/nginx.js";
import { befriend } from "./support/social.js";

const protoRoot = resolve(import.meta.dirname, "../shared/proto");

/**
 * The repository's .proto files as a gRPC client in another language gets them: compiled by a
 * protobuf compiler (buf, as scripts/protoset.ts does for grpcurl), the descriptors loaded by
 * @grpc/proto-loader. (Its own .proto parser, protobufjs, stops at the protovalidate rule syntax
 * `{[api.v1.no_control_characters]: true}` that protoc accepts.)
 */
function loadServices(): Record<string, grpc.ServiceClientConstructor> {
  const definition = protoLoader.loadFileDescriptorSetFromBuffer(buildProtoset(), { longs: String, enums: String, defaults: true, oneofs: true });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as { api: { v1: Record<string, grpc.ServiceClientConstructor> } };
  return loaded.api.v1;
}

// What a gRPC client decodes grpc-status-details-bin with: google.rpc.Status (its wire shape; Any
// written out beside it) and the ErrorDetail of shared/proto.
const statusType = protobuf
  .parse(`syntax = "proto3"; package google.rpc; message Any { string type_url = 1; bytes value = 2; } message Status { int32 code = 1; string message = 2; repeated Any details = 3; }`)
  .root.lookupType("google.rpc.Status");
const errorDetailType = protobuf.parse(readFileSync(join(protoRoot, "shared/v1/error.proto"), "utf8")).root.lookupType("shared.v1.ErrorDetail");

interface DecodedErrorDetail {
  errorCode: number;
  errorName: string;
  metadata: Record<string, string>;
}

/** The one ErrorDetail in a google.rpc.Status in bytes, as an upstream gRPC client reads it. */
function errorDetailOfStatus(statusBytes: Uint8Array, expectedCode: grpc.status): DecodedErrorDetail {
  const status = statusType.toObject(statusType.decode(statusBytes), { defaults: true }) as { code: number; details: { typeUrl: string; value: Uint8Array }[] };
  expect(status.code, "google.rpc.Status.code").to.equal(expectedCode);
  expect(status.details.map((detail) => detail.typeUrl)).to.deep.equal(["type.googleapis.com/shared.v1.ErrorDetail"]);
  return errorDetailType.toObject(errorDetailType.decode(status.details[0].value), { defaults: true }) as DecodedErrorDetail;
}

type UnaryMethod = (request: object, metadata: grpc.Metadata, callback: (error: grpc.ServiceError | null, response: unknown) => void) => grpc.ClientUnaryCall;

/** One unary call through a generated grpc-js client, with the bearer token as metadata when given. */
function call<T>(client: grpc.Client, method: string, request: object, token?: string): Promise<T> {
  const metadata = new grpc.Metadata();
  if (token) metadata.set("authorization", `Bearer ${token}`);
  const unary = (client as unknown as Record<string, UnaryMethod>)[method];
  return new Promise((resolve, reject) => unary.call(client, request, metadata, (error, response) => (error ? reject(error) : resolve(response as T))));
}

/** The failure of a call, with its status code and the ErrorDetail of its trailers. */
async function failureOf(pending: Promise<unknown>, expectedCode: grpc.status): Promise<{ error: grpc.ServiceError; detail: DecodedErrorDetail }> {
  const error = await pending.then(
    () => expect.fail("the call should have failed"),
    (err: unknown) => err as grpc.ServiceError,
  );
  expect(grpc.status[error.code], `status (details: ${error.details})`).to.equal(grpc.status[expectedCode]);
  const statusBytes = error.metadata.get("grpc-status-details-bin");
  expect(statusBytes, "one grpc-status-details-bin trailer").to.have.length(1);
  return { error, detail: errorDetailOfStatus(statusBytes[0] as Buffer, expectedCode) };
}

/** An unary call whose request bytes are exactly `body`, on any path: what no generated client would send. */
function rawCall(client: grpc.Client, path: string, body: Uint8Array): Promise<unknown> {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(
      path,
      () => Buffer.from(body),
      (bytes: Buffer) => bytes,
      {},
      new grpc.Metadata(),
      (error, response) => (error ? reject(error) : resolve(response)),
    ),
  );
}

const bearer = (token: string): Interceptor => (next) => async (req) => {
  req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

// Field names as the descriptors have them: proto-loader keeps them when loading compiled descriptors.
interface Envelope {
  message_id: string;
  sender_id: number;
  body: { type: string; text?: { text: string } };
}

describe("gRPC and gRPC-Web (GRPC_PORT)", function () {
  this.timeout(60_000);
  const services = loadServices();
  let server: TestServer;
  let grpcAddress: string;
  const clients: grpc.Client[] = [];
  const grpcClient = (service: string, address = grpcAddress) => {
    const made = new services[service](address, grpc.credentials.createInsecure());
    clients.push(made);
    return made;
  };

  before(async function () {
    this.timeout(120_000);
    server = await startTestServer();
    expect(server.grpcPort, "a server with the api role serves gRPC").to.be.a("number");
    grpcAddress = `127.0.0.1:${server.grpcPort}`;
  });

  after(async () => {
    for (const made of clients) made.close();
    await server?.dispose();
  });

  describe("configuration", () => {
    it("listens on 8081 unless GRPC_PORT says otherwise; 0 takes any free port, off serves none", () => {
      expect(defaultGrpcPort).to.equal(8081);
      expect(loadConfig({}).grpcPort).to.equal(8081);
      expect(loadConfig({ GRPC_PORT: "9090" }).grpcPort).to.equal(9090);
      expect(loadConfig({ GRPC_PORT: "0" }).grpcPort).to.equal(0);
      expect(loadConfig({ GRPC_PORT: "off" }).grpcPort).to.equal(undefined);
      for (const bad of ["-1", "65536", "x", "8081.5", "OFF"]) expect(() => loadConfig({ GRPC_PORT: bad }), bad).to.throw(/GRPC_PORT must be 0\.\.65535, or off/);
    });
  });

  describe("gRPC over HTTP/2 with a generated grpc-js client", () => {
    let alice: SignedIn;
    let bob: SignedIn;
    let conversationId: bigint;

    it("signs in with an emailed code and calls authenticated RPCs with the token as metadata", async () => {
      const auth = grpcClient("AuthService");
      const email = freshEmail("grpc");
      const { verify_token: verifyToken } = await call<{ verify_token: string }>(auth, "RequestVerifyCode", { identity_type: "IDENTITY_TYPE_EMAIL", identity_value: email });
      expect(verifyToken).to.match(/^nxv_/);
      const signed = await call<{ user_id: number; access_token: string; is_new_user: boolean }>(auth, "VerifyCode", {
        verify_token: verifyToken,
        code: lastCode(server, email),
        device_info: { device_id: randomUUID(), device_type: "DEVICE_TYPE_CLI", device_name: "grpc-js" },
      });
      expect(signed.is_new_user).to.equal(true);
      expect(signed.access_token).to.match(/^nxs_/);
      const { profile } = await call<{ profile: { user_id: number } }>(grpcClient("UserService"), "GetProfile", {}, signed.access_token);
      expect(profile.user_id).to.equal(signed.user_id);
    });

    it("sends a message and reads it back, with int64 ids intact", async () => {
      alice = await signInWithCode(server);
      bob = await signInWithCode(server);
      conversationId = await befriend(server, alice, bob);
      const messages = grpcClient("MessageService");
      const text = `over gRPC ${randomUUID()}`;
      const sent = await call<{ message_id: string }>(
        messages,
        "SendMessage",
        { client_message_id: String(nextClientMessageId()), conversation_id: String(conversationId), body: { type: "MESSAGE_TYPE_TEXT", text: { text } } },
        alice.accessToken,
      );
      expect(BigInt(sent.message_id) > 0n).to.equal(true);
      const { message } = await call<{ message: Envelope }>(messages, "GetMessage", { conversation_id: String(conversationId), message_id: sent.message_id }, bob.accessToken);
      expect(message.sender_id).to.equal(alice.userId);
      expect(message.body.text?.text).to.equal(text);
      const history = await call<{ messages: Envelope[] }>(messages, "GetMessageHistory", { conversation_id: String(conversationId), limit: 10 }, bob.accessToken);
      expect(history.messages.map((envelope) => envelope.message_id)).to.include(sent.message_id);
    });

    it("answers a business error with its status code and the ErrorDetail in grpc-status-details-bin", async () => {
      const { error, detail } = await failureOf(
        call(grpcClient("MessageService"), "GetMessage", { conversation_id: String(conversationId), message_id: "999999" }, alice.accessToken),
        grpc.status.NOT_FOUND,
      );
      expect(detail).to.deep.include({ errorCode: Errors.messageNotFound.errorCode, errorName: Errors.messageNotFound.errorName });
      expect(error.details).to.equal(Errors.messageNotFound.message);
    });

    it("validates requests against the .proto bounds, naming the field", async () => {
      const { detail } = await failureOf(
        call(grpcClient("MessageService"), "SendMessage", { client_message_id: "0", conversation_id: String(conversationId), body: { type: "MESSAGE_TYPE_TEXT", text: { text: "x" } } }, alice.accessToken),
        grpc.status.INVALID_ARGUMENT,
      );
      expect(detail.errorName).to.equal(Errors.invalidArgument.errorName);
      expect(detail.metadata.field).to.equal("client_message_id");
    });

    it("refuses a call without a token, or with an unknown one, as UNAUTHENTICATED", async () => {
      const users = grpcClient("UserService");
      const missing = await failureOf(call(users, "GetProfile", {}), grpc.status.UNAUTHENTICATED);
      expect(missing.detail).to.deep.include({ errorCode: Errors.unauthenticated.errorCode, errorName: Errors.unauthenticated.errorName });
      const unknown = await failureOf(call(users, "GetProfile", {}, `nxs_${"x".repeat(43)}`), grpc.status.UNAUTHENTICATED);
      expect(unknown.detail.errorName).to.equal(Errors.unauthenticated.errorName);
    });

    it("answers a body that is not the request's protobuf with INVALID_ARGUMENT MALFORMED_REQUEST, changing nothing", async () => {
      // UpdateProfileRequest field 1 (nickname), 4 bytes that are not UTF-8.
      const notUtf8 = new Uint8Array([0x0a, 0x04, 0x45, 0xff, 0xfe, 0x6c]);
      const { detail } = await failureOf(rawCall(grpcClient("UserService"), "/api.v1.UserService/UpdateProfile", notUtf8), grpc.status.INVALID_ARGUMENT);
      expect(detail.errorName).to.equal(Errors.malformedRequest.errorName);
    });

    it("refuses a request over the 8 MiB body limit with RESOURCE_EXHAUSTED REQUEST_TOO_LARGE", async () => {
      const { detail } = await failureOf(rawCall(grpcClient("UserService"), "/api.v1.MediaService/UploadFile", new Uint8Array(8 * 1024 * 1024 + 1)), grpc.status.RESOURCE_EXHAUSTED);
      expect(detail.errorName).to.equal(Errors.requestTooLarge.errorName);
    });

    it("answers a method no service has with UNIMPLEMENTED and its ErrorDetail", async () => {
      const { detail } = await failureOf(rawCall(grpcClient("UserService"), "/api.v1.UserService/NoSuchMethod", new Uint8Array()), grpc.status.UNIMPLEMENTED);
      expect(detail.errorName).to.equal(Errors.unimplemented.errorName);
    });

    it("hands out URLs of the main HTTP port, which serves /ws and media, not of the gRPC port", async () => {
      const config = await call<{ gateway: { ws_url: string } }>(grpcClient("AuthService"), "GetClientConfig", {});
      expect(config.gateway.ws_url).to.equal(`ws://127.0.0.1:${server.port}/ws`);
    });
  });

  describe("gRPC-Web", () => {
    let alice: SignedIn;
    before(async () => {
      alice = await signInWithCode(server);
    });

    it("serves a generated gRPC-Web client over HTTP/1.1 on the main port", async () => {
      const transport = createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [bearer(alice.accessToken)] });
      const { profile } = await createClient(UserService, transport).getProfile({});
      expect(profile?.userId).to.equal(alice.userId);
      const detail = await expectError(createClient(MessageService, transport).getMessage({ conversationId: 1n, messageId: 1n }), Code.NotFound);
      expect(detail.errorName).to.match(/_NOT_FOUND$/);
    });

    it("serves gRPC-Web over HTTP/2 on the gRPC port too", async () => {
      const transport = createGrpcWebTransport({ baseUrl: `http://${grpcAddress}`, httpVersion: "2", interceptors: [bearer(alice.accessToken)] });
      const { profile } = await createClient(UserService, transport).getProfile({});
      expect(profile?.userId).to.equal(alice.userId);
      await expectError(createClient(UserService, createGrpcWebTransport({ baseUrl: `http://${grpcAddress}`, httpVersion: "2" })).getProfile({}), Errors.unauthenticated);
    });

    it("puts the ErrorDetail into the trailer frame of a hand-built request, even for a body Connect-ES cannot decode", async () => {
      const notUtf8 = Buffer.from([0x0a, 0x04, 0x45, 0xff, 0xfe, 0x6c]);
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, notUtf8.length]), notUtf8]);
      const answer = await fetch(`${server.url}/api.v1.UserService/UpdateProfile`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", authorization: `Bearer ${alice.accessToken}` },
        body: frame,
      });
      expect(answer.status).to.equal(200);
      const body = Buffer.from(await answer.arrayBuffer());
      // One frame: the trailers (flag 0x80), "name: value" lines.
      expect(body[0]).to.equal(0x80);
      expect(body.readUInt32BE(1)).to.equal(body.length - 5);
      const trailers = Object.fromEntries(
        body
          .subarray(5)
          .toString("latin1")
          .split("\r\n")
          .filter(Boolean)
          .map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
      );
      expect(trailers["grpc-status"]).to.equal(String(grpc.status.INVALID_ARGUMENT));
      const detail = errorDetailOfStatus(Buffer.from(trailers["grpc-status-details-bin"], "base64"), grpc.status.INVALID_ARGUMENT);
      expect(detail.errorName).to.equal(Errors.malformedRequest.errorName);
    });
  });

  describe("behind the nginx front (its HTTP/2 gRPC listener)", () => {
    // In the cluster's shape every test above already goes through it; alone, a front is put in
    // front of the one process here.
    let front: Pick<TestFront, "port" | "grpcPort"> & { stop?: () => Promise<void> };
    let frontAddress: string;
    before(async function () {
      this.timeout(60_000);
      front = testTopology === "cluster" ? server : await startTestFront({ api: [`127.0.0.1:${server.port}`], grpc: [`127.0.0.1:${server.grpcPort}`] });
      frontAddress = `127.0.0.1:${front.grpcPort}`;
    });
    after(async () => {
      if (front !== server) await front?.stop?.();
    });

    it("passes calls and their errors through, and the URLs handed out name the front's HTTP listener", async () => {
      const alice = await signInWithCode(server);
      const users = grpcClient("UserService", frontAddress);
      const { profile } = await call<{ profile: { user_id: number } }>(users, "GetProfile", {}, alice.accessToken);
      expect(profile.user_id).to.equal(alice.userId);
      const { detail } = await failureOf(call(users, "GetProfile", {}), grpc.status.UNAUTHENTICATED);
      expect(detail.errorName).to.equal(Errors.unauthenticated.errorName);
      const config = await call<{ gateway: { ws_url: string } }>(grpcClient("AuthService", frontAddress), "GetClientConfig", {});
      expect(config.gateway.ws_url).to.equal(`ws://127.0.0.1:${front.port}/ws`);
    });

    it("refuses a body past its limit itself, as a gRPC status carrying the ErrorDetail an api node gives", async () => {
      const { detail } = await failureOf(rawCall(grpcClient("UserService", frontAddress), "/api.v1.MediaService/UploadFile", new Uint8Array(10 * 1024 * 1024)), grpc.status.RESOURCE_EXHAUSTED);
      expect(detail.errorName).to.equal(Errors.requestTooLarge.errorName);
    });
  });

  describe("a gRPC port another process holds", () => {
    /** Holds `port` on 127.0.0.1 if it is free; a port someone else holds is taken all the same. */
    async function holdPort(port: number): Promise<net.Server | undefined> {
      const holder = net.createServer();
      return new Promise((resolve) => {
        holder.once("error", () => resolve(undefined));
        holder.listen(port, "127.0.0.1", () => resolve(holder));
      });
    }

    it("with GRPC_PORT unset, the server starts without gRPC rather than failing (two servers on one machine, told apart by PORT)", async function () {
      if (testTopology === "cluster") this.skip(); // one process's start; the cluster's nodes get their ports
      const holder = await holdPort(defaultGrpcPort);
      const second = await startTestServer({ topology: "single", env: { GRPC_PORT: "" } });
      try {
        expect(second.grpcPort).to.equal(undefined);
        expect((await fetch(`${second.url}/healthz`)).status).to.equal(200);
      } finally {
        await second.dispose();
        holder?.close();
      }
    });

    it("a GRPC_PORT set explicitly and taken fails the start, naming the port", async function () {
      if (testTopology === "cluster") this.skip();
      const holder = await holdPort(0);
      const taken = (holder!.address() as net.AddressInfo).port;
      try {
        const failed = await startTestServer({ topology: "single", env: { GRPC_PORT: String(taken) } }).then(
          async (started) => {
            await started.dispose();
            return undefined;
          },
          (err: Error) => err,
        );
        expect(failed?.message).to.match(new RegExp(`EADDRINUSE.*${taken}`));
      } finally {
        holder!.close();
      }
    });
  });

  describe("in every process that serves the API", () => {
    it("an api-only node serves gRPC; an engine node opens no gRPC port", async function () {
      this.timeout(120_000);
      const dataDir = mkdtempSync(join(tmpdir(), "parley-grpc-roles-"));
      const { nodes } = await startNodes(dataDir, `grpc-roles-${process.pid}`, { engine: ["engine", "webhooks", "gateway"], api: ["api"] });
      const auth = new services.AuthService(`127.0.0.1:${nodes.api.grpcPort}`, grpc.credentials.createInsecure());
      try {
        expect(nodes.engine.grpcPort).to.equal(undefined);
        const config = await call<{ login: { email_enabled: boolean }; gateway: { ws_url: string } }>(auth, "GetClientConfig", {});
        expect(config.login.email_enabled).to.equal(true);
        expect(config.gateway.ws_url).to.equal(`ws://127.0.0.1:${nodes.api.port}/ws`);
      } finally {
        auth.close();
        await Promise.all([nodes.api.stop(), nodes.engine.stop()]);
        rmSync(dataDir, { recursive: true, force: true });
      }
    });
  });

  describe("stopping", () => {
    it("sends connected gRPC clients away (GOAWAY) instead of waiting out the drain for them, and refuses calls after", async function () {
      // One process: the drain of a node's own port is the subject, not nginx's.
      const stopping = await startTestServer({ topology: "single", env: { DRAIN_TIMEOUT_MS: "20000" } });
      const auth = new services.AuthService(`127.0.0.1:${stopping.grpcPort}`, grpc.credentials.createInsecure());
      try {
        await call(auth, "GetClientConfig", {});
        // Answered before their bodies were read: their streams must not stay open either.
        await failureOf(rawCall(auth, "/api.v1.MediaService/UploadFile", new Uint8Array(9 * 1024 * 1024)), grpc.status.RESOURCE_EXHAUSTED);
        await failureOf(rawCall(auth, "/api.v1.AuthService/NoSuchMethod", new Uint8Array(1024 * 1024)), grpc.status.UNIMPLEMENTED);
        const startedAt = performance.now();
        await stopping.stop();
        // The channel stays connected between calls; without GOAWAY the drain would wait 20 s for it.
        expect(performance.now() - startedAt).to.be.below(10_000);
        const refused = await call(auth, "GetClientConfig", {}).then(
          () => expect.fail("a stopped server answered"),
          (err: unknown) => err as grpc.ServiceError,
        );
        expect(grpc.status[refused.code]).to.equal("UNAVAILABLE");
      } finally {
        auth.close();
        await stopping.dispose();
      }
    });
  });
});
