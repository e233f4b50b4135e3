// The lean Connect unary path (api/lean-unary.ts) must answer exactly as Connect-ES does. Two API
// nodes share one engine: one serves Connect unary requests on the lean path, the other sends
// every RPC through Connect-ES. Each request of a corpus of raw HTTP requests, good and bad, goes
// to both; the answers must be the same bytes (status line, headers in order, body), the Date
// header aside.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { AdjustableClock } from "../shared/clock.js";
import type { Store } from "../ports/store/store.js";
import { meshTransporter } from "../moleculer.config.js";
import { startParley, type Parley } from "../server.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService, RequestVerifyCodeRequestSchema } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { GetMessageHistoryRequestSchema, GetMessageRequestSchema, MessageService } from "../shared/gen/api/v1/message_pb.js";
import { BatchGetUserInfoRequestSchema, UserService } from "../shared/gen/api/v1/user_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, freePort, testConfig } from "./support/harness.js";
import { nextClientMessageId, textBody } from "./support/messaging.js";
import { exchange, openRaw, type RawAnswer } from "./support/raw-http.js";
import { befriend } from "./support/social.js";

interface Cluster {
  engine: Parley;
  /** Connect unary on the lean path (the default). */
  lean: Parley;
  /** Every RPC through Connect-ES. */
  connectEs: Parley;
  /** The lean path behind the uWS front. */
  uwsLean: Parley;
  codesFile: string;
  dataDir: string;
}

/** Store reads that fail on demand, for an engine error nobody expected. */
class FailingContacts {
  failing = false;
  wrap = (store: Store): Store => ({
    ...store,
    contacts: {
      ...store.contacts,
      getContact: async (...args) => {
        if (this.failing) throw new Error("injected failure: contact read");
        return store.contacts.getContact(...args);
      },
    },
  });
}

async function startCluster(faults: FailingContacts): Promise<Cluster> {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-lean-wire-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const names = ["engine", "lean", "connect-es", "uws-lean"].map((role) => `lean-wire-${process.pid}-${role}`);
  const ports = [await freePort(), await freePort(), await freePort(), await freePort()];
  const urls = names.map((name, i) => `127.0.0.1:${ports[i]}/${name}`);
  const transporter = (port: number) => meshTransporter(port, urls);
  // The byte-for-byte comparison runs on the node:http front, where Connect-ES ran before; the
  // uWS front is compared by status, content type and body (its framing headers differ).
  const config = await testConfig(dataDir, { LOG_LEVEL: "error", SOCKET_DRIVER: "ws" });
  const uwsConfig = { ...config, socketDriver: "uws" as const };
  const clock = new AdjustableClock();
  // A connection left with a request it will never finish ends soon, so a test can watch it end.
  const http = { headersTimeoutMs: 3_000, requestTimeoutMs: 3_000 };
  const [engine, lean, connectEs, uwsLean] = await Promise.all([
    startParley({ config, clock, roles: ["engine", "webhooks"], broker: { nodeID: names[0], transporter: transporter(ports[0]) }, adapters: { store: faults.wrap } }),
    startParley({ config, clock, http, roles: ["api", "gateway"], broker: { nodeID: names[1], transporter: transporter(ports[1]) } }),
    startParley({ config, clock, http, roles: ["api", "gateway"], broker: { nodeID: names[2], transporter: transporter(ports[2]) }, api: { leanUnary: false } }),
    startParley({ config: uwsConfig, clock, http, roles: ["api", "gateway"], broker: { nodeID: names[3], transporter: transporter(ports[3]) } }),
  ]);
  return { engine, lean, connectEs, uwsLean, codesFile, dataDir };
}

/** The answer with its Date header blanked: the one part two answers a moment apart may differ in. */
const comparable = (answer: RawAnswer) => answer.text.replace(/\r\nDate: [^\r]*\r\n/, "\r\nDate: -\r\n");

type HeaderValue = string | null;

/**
 * A raw POST: Host, a JSON content type and a Content-Length unless `headers` says otherwise
 * (null drops a header; a header written twice is given as an array).
 */
function request(path: string, body: string | Uint8Array, headers: Record<string, HeaderValue | string[]> = {}, method = "POST"): Buffer {
  const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const all: Record<string, HeaderValue | string[]> = { Host: "localhost", "Content-Type": "application/json", "Content-Length": String(bytes.byteLength), ...headers };
  const lines = [`${method} ${path} HTTP/1.1`];
  for (const [name, value] of Object.entries(all)) {
    if (value === null) continue;
    for (const one of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${one}`);
  }
  return Buffer.concat([Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1"), bytes]);
}

function binary<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Uint8Array {
  return toBinary(schema, create(schema, init));
}

/** A chunked body of `size` bytes of "x" inside a JSON string, in chunks of 64 KiB. */
function chunkedRequest(path: string, size: number, token: string, connection?: string): Buffer {
  const head = `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer ${token}\r\nTransfer-Encoding: chunked\r\n${connection ? `Connection: ${connection}\r\n` : ""}\r\n`;
  const parts: Buffer[] = [Buffer.from(head, "latin1")];
  const payload = Buffer.from(`{"nickname":"${"x".repeat(Math.max(0, size - 16))}"}`);
  for (let offset = 0; offset < payload.byteLength; offset += 65536) {
    const chunk = payload.subarray(offset, offset + 65536);
    parts.push(Buffer.from(`${chunk.byteLength.toString(16)}\r\n`), chunk, Buffer.from("\r\n"));
  }
  parts.push(Buffer.from("0\r\n\r\n"));
  return Buffer.concat(parts);
}

/** Sends bytes on one connection and reads until `answers` status lines came (or 10 s passed), then hangs up. */
async function untilAnswered(port: number, bytes: Buffer, answers: number): Promise<string> {
  const connection = await openRaw(port);
  connection.socket.write(bytes);
  const deadline = Date.now() + 10_000;
  while ((connection.received().match(/HTTP\/1\.1 \d{3}/g) ?? []).length < answers && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  connection.socket.destroy();
  return connection.received();
}

describe("the lean Connect unary path", function () {
  this.timeout(60_000);
  const faults = new FailingContacts();
  let cluster: Cluster;
  let alice: SignedIn;
  let bob: SignedIn;
  let agentToken: string;
  let conversationId: bigint;
  const clientMessageId = nextClientMessageId();

  before(async () => {
    cluster = await startCluster(faults);
    const server = { url: cluster.lean.url, codesFile: cluster.codesFile };
    alice = await signInWithCode(server);
    bob = await signInWithCode(server);
    conversationId = await befriend(server, alice, bob);
    await client(server, MessageService, "json", alice.accessToken).sendMessage({ conversationId, clientMessageId, body: textBody("hello") });
    await client(server, UserService, "json", bob.accessToken).setUsername({ username: `bob_${process.pid}` });
    const created = await client(server, AgentService, "json", alice.accessToken).createAgent({ username: `lean_wire_${process.pid}`.slice(0, 32), name: "Wire" });
    agentToken = created.token;
  });

  after(async () => {
    await Promise.all([cluster.lean.stop(), cluster.connectEs.stop(), cluster.uwsLean.stop()]);
    await cluster.engine.stop();
    rmSync(cluster.dataDir, { recursive: true, force: true });
  });

  async function bothAnswer(bytes: Buffer): Promise<[RawAnswer, RawAnswer]> {
    const lean = await exchange(cluster.lean.port, bytes);
    const connectEs = await exchange(cluster.connectEs.port, bytes);
    return [lean, connectEs];
  }

  async function expectSameAnswer(bytes: Buffer): Promise<RawAnswer> {
    const [lean, connectEs] = await bothAnswer(bytes);
    expect(lean.status, lean.text.slice(0, 300)).to.be.a("number");
    expect(comparable(lean)).to.equal(comparable(connectEs));
    return lean;
  }

  describe("answers each request of the corpus as Connect-ES does", () => {
    const auth = () => ({ Authorization: `Bearer ${alice.accessToken}` });
    const profile = "/api.v1.UserService/GetProfile";
    const cases: [string, () => Buffer, number][] = [
      // content types
      ...[
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=utf-8",
        "application/json; charset=UTF-8",
        "application/json; charset=utf8",
        "APPLICATION/JSON",
        "Application/Json; Charset=Utf-8",
      ].map((type): [string, () => Buffer, number] => [`JSON as ${type}`, () => request(profile, "{}", { ...auth(), "Content-Type": type }), 200]),
      ...["application/proto", "APPLICATION/PROTO", "Application/Proto"].map((type): [string, () => Buffer, number] => [
        `binary as ${type}`,
        () => request(profile, new Uint8Array(), { ...auth(), "Content-Type": type }),
        200,
      ]),
      ...[
        "application/json; charset=latin1",
        "application/json ; charset=utf-8",
        "application/json;  charset=utf-8",
        "application/protobuf",
        "application/x-protobuf",
        "text/plain",
        "application/connect+json",
        "application/connect+proto",
        "",
        "multipart/form-data; boundary=x",
      ].map((type): [string, () => Buffer, number] => [`refuses content type ${JSON.stringify(type)}`, () => request(profile, "{}", { ...auth(), "Content-Type": type }), 415]),
      ["no content type", () => request(profile, "{}", { ...auth(), "Content-Type": null }), 415],
      // methods
      ...["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"].map((method): [string, () => Buffer, number] => [`refuses ${method}`, () => request(profile, "", auth(), method), 405]),
      ["GET with a Connect query", () => request(`${profile}?connect=v1&encoding=json&message=%7B%7D`, "", auth(), "GET"), 405],
      ["HTTP/1.0 without a Host", () => Buffer.from("POST /api.v1.AuthService/GetClientConfig HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), 200],
      ["HTTP/1.0 keeping the connection alive", () => Buffer.from(`POST ${profile} HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\nAuthorization: Bearer ${alice.accessToken}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`), 200],
      // paths
      ["an unknown method", () => request("/api.v1.UserService/DropAllTables", "{}", auth()), 404],
      ["an unknown service", () => request("/api.v1.ForwardService/ForwardMessage", "{}", auth()), 404],
      ["an unknown path with another method", () => request("/api.v1.UserService/Nope", "", {}, "GET"), 404],
      ["a known path with a trailing slash", () => request(`${profile}/`, "{}", auth()), 404],
      ["a known path with a query", () => request(`${profile}?x=1&encoding=proto`, "{}", auth()), 200],
      ["the bare prefix", () => request("/api.v1.", "{}", auth()), 404],
      // Connect headers
      ...["1000", "0", "1", "2147483647"].map((value): [string, () => Buffer, number] => [`connect-timeout-ms ${value}`, () => request(profile, "{}", { ...auth(), "Connect-Timeout-Ms": value }), 200]),
      ...["abc", "-5", "12345678901", "", "1.5", "7 8"].map((value): [string, () => Buffer, number] => [
        `refuses connect-timeout-ms ${JSON.stringify(value)}`,
        () => request(profile, "{}", { ...auth(), "Connect-Timeout-Ms": value }),
        400,
      ]),
      ["two connect-timeout-ms headers", () => request(profile, "{}", { ...auth(), "Connect-Timeout-Ms": ["5", "6"] }), 400],
      ["content-encoding identity", () => request(profile, "{}", { ...auth(), "Content-Encoding": "identity" }), 200],
      ...["gzip", "br", "deflate", "", "Identity", "pigeon"].map((value): [string, () => Buffer, number] => [
        `refuses content-encoding ${JSON.stringify(value)}`,
        () => request(profile, "{}", { ...auth(), "Content-Encoding": value }),
        501,
      ]),
      ["a content-encoding with bytes past ASCII", () => request(profile, "{}", { ...auth(), "Content-Encoding": "gz\u00ffip" }), 501],
      ["a connect-timeout-ms with bytes past ASCII", () => request(profile, "{}", { ...auth(), "Connect-Timeout-Ms": "1\u0080" }), 400],
      ["an Authorization with bytes past ASCII", () => request(profile, "{}", { Authorization: "Bearer \u00e9t\u00e9" }), 401],
      ["two content-encoding headers", () => request(profile, "{}", { ...auth(), "Content-Encoding": ["identity", "identity"] }), 501],
      ["connect-content-encoding gzip (a streaming header)", () => request(profile, "{}", { ...auth(), "Connect-Content-Encoding": "gzip" }), 200],
      ["accept-encoding gzip, br", () => request(profile, "{}", { ...auth(), "Accept-Encoding": "gzip, br" }), 200],
      ["connect-accept-encoding gzip", () => request(profile, "{}", { ...auth(), "Connect-Accept-Encoding": "gzip" }), 200],
      ...["1", "2", "x"].map((value): [string, () => Buffer, number] => [`connect-protocol-version ${value}`, () => request(profile, "{}", { ...auth(), "Connect-Protocol-Version": value }), 200]),
      ["compression refused before a bad timeout", () => request(profile, "{}", { ...auth(), "Content-Encoding": "gzip", "Connect-Timeout-Ms": "x" }), 501],
      ["a bad timeout before an oversize Content-Length", () => request(profile, "", { ...auth(), "Connect-Timeout-Ms": "x", "Content-Length": "9000000" }), 400],
      ["a content type refused before compression", () => request(profile, "{}", { ...auth(), "Content-Type": "text/plain", "Content-Encoding": "gzip" }), 415],
      ["a method refused before the content type", () => request(profile, "{}", { ...auth(), "Content-Type": "text/plain" }, "PUT"), 405],
      // sizes
      ["a Content-Length over the limit, body never sent", () => request(profile, "", { ...auth(), "Content-Length": "8388609" }), 429],
      ["a Content-Length far over the limit", () => request(profile, "", { ...auth(), "Content-Length": "99999999999999" }), 429],
      ["a body of exactly the limit", () => request("/api.v1.UserService/UpdateProfile", `{"nickname":"${"x".repeat(8 * 1024 * 1024 - 16)}"}`, auth()), 400],
      ["a chunked body", () => chunkedRequest("/api.v1.UserService/ResolveUsername", 10, alice.accessToken), 400],
      ["a chunked body over the limit", () => chunkedRequest("/api.v1.UserService/UpdateProfile", 9 * 1024 * 1024, alice.accessToken), 429],
      ["no body and no length", () => request(profile, "", { ...auth(), "Content-Length": null }), 400],
      ["no body and no length, binary", () => request(profile, "", { ...auth(), "Content-Length": null, "Content-Type": "application/proto" }), 200],
      // JSON bodies
      ["an empty JSON body", () => request(profile, "", auth()), 400],
      ["JSON that does not parse", () => request(profile, "{x", auth()), 400],
      ["JSON null", () => request(profile, "null", auth()), 400],
      ["a JSON array", () => request(profile, "[]", auth()), 400],
      ["a JSON string", () => request(profile, '"hi"', auth()), 400],
      ["deeply nested JSON", () => request(profile, "[".repeat(5000) + "]".repeat(5000), auth()), 400],
      ["an unknown field", () => request(profile, '{"pigeon":1}', auth()), 400],
      ["duplicate keys", () => request("/api.v1.UserService/ResolveUsername", '{"username":"a","username":"b"}', auth()), 400],
      ["an unknown enum name", () => request("/api.v1.AuthService/RequestVerifyCode", JSON.stringify({ identityType: "IDENTITY_TYPE_PIGEON", identityValue: "a@b.co" })), 400],
      ["a field of the wrong type", () => request("/api.v1.UserService/BatchGetUserInfo", JSON.stringify({ userIds: ["abc"] }), auth()), 400],
      ["a lenient int64", () => request("/api.v1.MessageService/GetMessage", JSON.stringify({ conversationId: "0x10", messageId: "1" }), auth()), 400],
      ["an int64 past 2^53 as a number", () => request("/api.v1.MessageService/GetMessage", `{"conversationId":${"9".repeat(20)},"messageId":"1"}`, auth()), 400],
      ["invalid UTF-8", () => request("/api.v1.UserService/ResolveUsername", Buffer.from([0x7b, 0x22, 0x75, 0x73, 0x65, 0x72, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), auth()), 400],
      ["a lone surrogate escape", () => request("/api.v1.UserService/ResolveUsername", '{"username":"\\ud800"}', auth()), 400],
      // binary bodies
      ["garbage protobuf", () => request(profile, new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0xff]), { ...auth(), "Content-Type": "application/proto" }), 400],
      ["an unknown enum number in binary", () => request("/api.v1.AuthService/RequestVerifyCode", new Uint8Array([0x08, 0x09, 0x12, 0x06, ...Buffer.from("a@b.co")]), { "Content-Type": "application/proto" }), 400],
      ["unknown fields in binary", () => request(profile, new Uint8Array([0xf8, 0x01, 0x01]), { ...auth(), "Content-Type": "application/proto" }), 200],
      // what the procedures answer
      ["GetClientConfig, no token needed", () => request("/api.v1.AuthService/GetClientConfig", "{}"), 200],
      ["GetClientConfig in binary", () => request("/api.v1.AuthService/GetClientConfig", new Uint8Array(), { "Content-Type": "application/proto" }), 200],
      ["a validation error", () => request("/api.v1.AuthService/RequestVerifyCode", JSON.stringify({ identityType: "IDENTITY_TYPE_EMAIL", identityValue: "not an email" })), 400],
      [
        "a validation error in binary",
        () => request("/api.v1.AuthService/RequestVerifyCode", binary(RequestVerifyCodeRequestSchema, { identityType: IdentityType.EMAIL, identityValue: "x" }), { "Content-Type": "application/proto" }),
        400,
      ],
      ["no Authorization", () => request(profile, "{}"), 401],
      ["Authorization without a token", () => request(profile, "{}", { Authorization: "Bearer" }), 401],
      ["Basic authorization", () => request(profile, "{}", { Authorization: "Basic YTpi" }), 401],
      ["an unknown token", () => request(profile, "{}", { Authorization: "Bearer nxs_nope" }), 401],
      ["a lower-case bearer", () => request(profile, "{}", { Authorization: `bearer ${alice.accessToken}` }), 200],
      ["two Authorization headers", () => request(profile, "{}", { Authorization: [`Bearer ${alice.accessToken}`, "Bearer nxs_other"] }), 200],
      ["a user on an agent-only procedure", () => request("/api.v1.MessageService/PushStreamDelta", "{}", auth()), 403],
      ["an agent on a user-only procedure", () => request("/api.v1.UserService/ListDevices", "{}", { Authorization: `Bearer ${agentToken}` }), 403],
      ["an agent's profile", () => request(profile, "{}", { Authorization: `Bearer ${agentToken}` }), 200],
      ["a user that does not exist", () => request("/api.v1.UserService/ResolveUsername", JSON.stringify({ username: "nobody_here_at_all" }), auth()), 404],
      ["a user that exists", () => request("/api.v1.UserService/ResolveUsername", JSON.stringify({ username: `bob_${process.pid}` }), auth()), 200],
      ["a message that does not exist", () => request("/api.v1.MessageService/GetMessage", JSON.stringify({ conversationId: String(conversationId), messageId: "999" }), auth()), 404],
      ["a message", () => request("/api.v1.MessageService/GetMessage", JSON.stringify({ conversationId: String(conversationId), messageId: "1" }), auth()), 200],
      [
        "a message in binary",
        () => request("/api.v1.MessageService/GetMessage", binary(GetMessageRequestSchema, { conversationId, messageId: 1n }), { ...auth(), "Content-Type": "application/proto" }),
        200,
      ],
      ["a history", () => request("/api.v1.MessageService/GetMessageHistory", JSON.stringify({ conversationId: String(conversationId), limit: 10 }), auth()), 200],
      [
        "a history in binary",
        () => request("/api.v1.MessageService/GetMessageHistory", binary(GetMessageHistoryRequestSchema, { conversationId, limit: 10 }), { ...auth(), "Content-Type": "application/proto" }),
        200,
      ],
      ["a conversation list", () => request("/api.v1.ConversationService/ListConversations", JSON.stringify({ limit: 5 }), auth()), 200],
      ["the update stream", () => request("/api.v1.SyncService/GetDifference", JSON.stringify({ sn: "0" }), auth()), 200],
      ["users by id", () => request("/api.v1.UserService/BatchGetUserInfo", JSON.stringify({ userIds: [alice.userId, bob.userId, 1, -1] }), auth()), 200],
      [
        "users by id in binary",
        () => request("/api.v1.UserService/BatchGetUserInfo", binary(BatchGetUserInfoRequestSchema, { userIds: [alice.userId, bob.userId] }), { ...auth(), "Content-Type": "application/proto" }),
        200,
      ],
      ["the same SendMessage again", () => request("/api.v1.MessageService/SendMessage", JSON.stringify({ conversationId: String(conversationId), clientMessageId: String(clientMessageId), body: { type: "MESSAGE_TYPE_TEXT", text: { text: "hello" } } }), auth()), 200],
      ["the same profile update again", () => request("/api.v1.UserService/UpdateProfile", JSON.stringify({ nickname: "Alice", signature: "same" }), auth()), 200],
      ["a download URL for no file", () => request("/api.v1.MediaService/GetDownloadURL", JSON.stringify({ fileId: "nope" }), auth()), 404],
    ];
    /** Requests uWS 20.30 itself answers otherwise, before any route runs (docs/behaviour.md, "Socket drivers"). */
    const uwsOwnAnswers = new Set([
      "HTTP/1.0 without a Host", // HTTP/1.1 only: closed unanswered
      "HTTP/1.0 keeping the connection alive",
      "a Content-Length far over the limit", // a length its parser refuses: closed unanswered
      // Header bytes reach routes as UTF-8 text, not latin1: the same refusal, another echo of the value.
      "a connect-timeout-ms with bytes past ASCII",
      "a content-encoding with bytes past ASCII",
    ]);
    const contentTypeOf = (answer: RawAnswer) => /\r\ncontent-type: ([^\r]*)\r\n/i.exec(answer.text)?.[1];
    for (const [name, build, status] of cases) {
      it(`${name}: ${status}`, async () => {
        const answer = await expectSameAnswer(build());
        expect(answer.status, answer.text.slice(0, 400)).to.equal(status);
        if (uwsOwnAnswers.has(name)) return;
        const onUws = await exchange(cluster.uwsLean.port, build());
        expect([onUws.status, contentTypeOf(onUws), onUws.body], onUws.text.slice(0, 400)).to.deep.equal([answer.status, contentTypeOf(answer), answer.body]);
      });
    }
  });

  it("answers an unexpected engine error 500 with an INTERNAL detail on both paths, and logs it once on each", async () => {
    const bytes = request("/api.v1.UserService/ResolveUsername", JSON.stringify({ username: `bob_${process.pid}` }), { Authorization: `Bearer ${alice.accessToken}` });
    const logged: string[] = [];
    const { error } = console;
    // Both API nodes log to this process's console; the two requests go one after the other.
    const reportedAnswer = async (port: number) => {
      logged.length = 0;
      const answer = await exchange(port, bytes);
      return { answer, reports: logged.filter((line) => line.includes("unexpected error while serving a request")).length };
    };
    console.error = (...args: unknown[]) => void logged.push(args.map(String).join(" "));
    faults.failing = true;
    let lean, connectEs;
    try {
      lean = await reportedAnswer(cluster.lean.port);
      connectEs = await reportedAnswer(cluster.connectEs.port);
    } finally {
      faults.failing = false;
      console.error = error;
    }
    expect(comparable(lean.answer)).to.equal(comparable(connectEs.answer));
    expect(lean.answer.status).to.equal(500);
    expect((JSON.parse(lean.answer.body) as { details: { debug: { errorName: string } }[] }).details[0].debug.errorName).to.equal("INTERNAL");
    expect([lean.reports, connectEs.reports]).to.deep.equal([1, 1]);
  });

  it("answers a chunked body over the limit at once, then reads past the rest and serves the next request on that connection", async () => {
    // Both paths stop keeping the body at the limit and answer; the node front then reads past the
    // rest (a client still sending reads the answer rather than a reset), so the request after it
    // on the connection is served. The uWS front reads such a body to its end, then answers alike.
    const next = request("/api.v1.AuthService/GetClientConfig", "{}");
    const bytes = Buffer.concat([chunkedRequest("/api.v1.UserService/UpdateProfile", 9 * 1024 * 1024, alice.accessToken), next]);
    const [lean, connectEs, uwsLean] = await Promise.all([cluster.lean.port, cluster.connectEs.port, cluster.uwsLean.port].map((port) => untilAnswered(port, bytes, 2)));
    const firstAnswer = (text: string) => text.slice(0, text.indexOf("}]}") + 3).replace(/\r\nDate: [^\r]*\r\n/, "\r\nDate: -\r\n");
    expect(firstAnswer(lean)).to.equal(firstAnswer(connectEs));
    expect(lean).to.match(/^HTTP\/1\.1 429 /);
    for (const text of [lean, connectEs, uwsLean]) expect(text.match(/HTTP\/1\.1 \d{3}/g)).to.deep.equal(["HTTP/1.1 429", "HTTP/1.1 200"]);
  });

  it("serves a seeded fuzz of mutated requests as Connect-ES does", async function () {
    this.timeout(120_000);
    let state = 20261124;
    const next = () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state / 4294967296;
    };
    const int = (n: number) => Math.floor(next() * n);
    const pick = <T>(items: readonly T[]): T => items[int(items.length)];
    const templates: [string, string][] = [
      ["/api.v1.UserService/GetProfile", "{}"],
      ["/api.v1.UserService/BatchGetUserInfo", JSON.stringify({ userIds: [alice.userId, bob.userId] })],
      ["/api.v1.UserService/ResolveUsername", JSON.stringify({ username: `bob_${process.pid}` })],
      ["/api.v1.MessageService/GetMessage", JSON.stringify({ conversationId: String(conversationId), messageId: "1" })],
      ["/api.v1.MessageService/GetMessageHistory", JSON.stringify({ conversationId: String(conversationId), limit: 5, beforeMessageId: "9" })],
      ["/api.v1.SyncService/GetDifference", JSON.stringify({ sn: "0", limit: 3 })],
      ["/api.v1.ContactService/ListContacts", "{}"],
      ["/api.v1.AuthService/GetClientConfig", "{}"],
    ];
    const contentTypes = ["application/json", "application/proto", "application/json; charset=utf-8", "text/plain", "application/grpc-web+json", ""];
    for (let seed = 0; seed < 300; seed += 1) {
      const [path, template] = pick(templates);
      let body = Buffer.from(template);
      switch (int(5)) {
        case 0: // flip bytes
          body = Buffer.from(body);
          for (let i = 0; i <= int(3) && body.length > 0; i += 1) body[int(body.length)] = int(256);
          break;
        case 1: // cut short
          body = body.subarray(0, int(body.length + 1));
          break;
        case 2: // random bytes, often not UTF-8, sometimes protobuf
          body = Buffer.from(Array.from({ length: int(40) }, () => int(256)));
          break;
        default:
          break;
      }
      const headers: Record<string, string | null> = { Authorization: `Bearer ${pick([alice.accessToken, agentToken, "nxs_x"])}`, "Content-Type": pick(contentTypes) };
      if (next() < 0.2) headers["Connect-Timeout-Ms"] = pick(["10", "x", ""]);
      if (next() < 0.1) headers["Content-Encoding"] = pick(["identity", "gzip"]);
      const bytes = request(path, body, headers, next() < 0.05 ? "PUT" : "POST");
      const [lean, connectEs] = await bothAnswer(bytes);
      expect(comparable(lean), `seed ${seed}: ${bytes.toString("latin1").slice(0, 300)}`).to.equal(comparable(connectEs));
    }
  });

  it("leaves gRPC-Web to Connect-ES, which still serves it", async () => {
    const transport = createGrpcWebTransport({ baseUrl: cluster.lean.url, httpVersion: "1.1" });
    const config = await createClient(AuthService, transport).getClientConfig({});
    expect(config.login?.emailEnabled).to.equal(true);
  });

  it("serves real Connect clients, JSON and binary, on the lean path", async () => {
    const server = { url: cluster.lean.url };
    for (const mode of ["json", "binary"] as const) {
      const { profile } = await client(server, UserService, mode, alice.accessToken).getProfile({});
      expect(profile?.userId).to.equal(alice.userId);
      const { message } = await client(server, MessageService, mode, bob.accessToken).getMessage({ conversationId, messageId: 1n });
      expect(message?.senderId).to.equal(alice.userId);
    }
  });
});
