// Graceful shutdown, as an operator sees it: `npm start` (main.ts) in a child process, under load,
// gets SIGTERM or SIGINT. What must hold: /healthz answers 503 at once, new connections are
// refused, every request the server had begun receiving gets its whole answer, WebSockets close
// with 1001, the process exits 0 and SQLite leaves no write-ahead log behind.
//
// "Begun receiving" is made exact with a barrier: after every load request has been written, a
// /healthz request on a new connection must answer 200 before the signal is sent. The server reads
// sockets in the order their data arrives, so by then it has read (at least the start of) every
// load request; one it had not yet read would look like an idle keep-alive connection and be
// closed, which is the race no server can avoid and not what is tested here.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { Agent, request, type ClientRequest, type IncomingHttpHeaders } from "node:http";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect } from "chai";
import { Errors } from "../shared/errors.js";
import { loadConfig } from "../shared/config.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, freePort, socketDrivers, startTestServer, testSocketDriver, testStoreEnv } from "./support/harness.js";
import { GatewayClient } from "./support/ws-client.js";

const repositoryRoot = resolve(import.meta.dirname, "..");

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** `npm start` in a child process, on its own port and data directory. */
class ParleyProcess {
  private output = "";
  readonly exited: Promise<Exit>;
  exit: Exit | undefined;

  private constructor(
    readonly child: ChildProcess,
    readonly port: number,
    readonly dataDir: string,
    readonly codesFile: string,
  ) {
    child.stdout!.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    child.stderr!.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.exited = new Promise((resolve) =>
      child.once("exit", (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      }),
    );
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** What the process printed, for failure messages. */
  get log(): string {
    return this.output;
  }

  static async start(env: Record<string, string> = {}): Promise<ParleyProcess> {
    // A restart passes the stopped server's DATA_DIR (and so, on Cassandra, gets its keyspace).
    const dataDir = env.DATA_DIR ?? mkdtempSync(join(tmpdir(), "parley-shutdown-"));
    const codesFile = join(dataDir, "codes.jsonl");
    const port = await freePort();
    const child = spawn(process.execPath, ["--import", "tsx", "main.ts"], {
      cwd: repositoryRoot,
      env: {
        ...process.env,
        HOST: "127.0.0.1",
        PORT: String(port),
        DATA_DIR: dataDir,
        CODE_DELIVERY: `file:${codesFile}`,
        LOG_LEVEL: "warn",
        SOCKET_DRIVER: testSocketDriver,
        ...(await testStoreEnv(dataDir)),
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const parley = new ParleyProcess(child, port, dataDir, codesFile);
    // Ready once /healthz answers 200 (the port opens only after every service has started).
    for (;;) {
      if (parley.exit) throw new Error(`parley exited before serving (${JSON.stringify(parley.exit)}):\n${parley.log}`);
      const status = await fetch(`${parley.url}/healthz`).then(
        (response) => response.status,
        () => 0,
      );
      if (status === 200) return parley;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Resolves once the server refuses new connections (it has begun stopping), while it is still running. */
  async refusesConnections(): Promise<void> {
    await untilRefused(this.port, () => this.exit === undefined);
  }

  /** Size of parley.db-wal, or undefined when there is none. */
  walSize(): number | undefined {
    const wal = join(this.dataDir, "parley.db-wal");
    return existsSync(wal) ? statSync(wal).size : undefined;
  }

  dispose(): void {
    if (!this.exit) this.child.kill("SIGKILL");
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Collects the whole answer to a request; rejects if the connection dies before it is complete. */
function answerOf(req: ClientRequest): Promise<Answer> {
  const answer = new Promise<Answer>((resolve, reject) => {
    req.once("error", reject);
    req.once("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.once("error", reject);
      res.once("end", () => (res.complete ? resolve({ status: res.statusCode!, headers: res.headers, body }) : reject(new Error("answer cut short"))));
    });
  });
  // A cut request fails before the test looks at it; the test still sees the rejection.
  answer.catch(() => undefined);
  return answer;
}

interface Rpc {
  what: string;
  written: Promise<unknown>;
  answer: Promise<Answer>;
}

/** A Connect JSON call through a keep-alive agent; `written` resolves once the whole request is on the wire. */
function rpc(agent: Agent | false, port: number, method: string, body: unknown, token?: string): Rpc {
  const payload = JSON.stringify(body);
  const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": Buffer.byteLength(payload) };
  if (token) headers.authorization = `Bearer ${token}`;
  const req = request({ host: "127.0.0.1", port, method: "POST", path: `/api.v1.${method}`, agent, headers });
  const answer = answerOf(req);
  const written = once(req, "finish");
  req.end(payload);
  return { what: method, written, answer };
}

/**
 * A call whose body is sent in two parts: it is in flight at the server from the first part until
 * the test sends the second.
 */
function heldRpc(port: number, method: string, body: unknown, token: string) {
  const payload = Buffer.from(JSON.stringify(body));
  const req = request({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: `/api.v1.${method}`,
    agent: false,
    headers: { "content-type": "application/json", "content-length": payload.length, authorization: `Bearer ${token}` },
  });
  const answer = answerOf(req);
  const half = Math.floor(payload.length / 2);
  const written = new Promise<void>((resolve, reject) => req.write(payload.subarray(0, half), (err) => (err ? reject(err) : resolve())));
  return { answer, written, finish: () => req.end(payload.subarray(half)) };
}

/**
 * A GET whose request line and headers arrive in two parts, over a raw socket: the server has
 * begun reading it before the signal and decides its answer only when the rest arrives.
 */
async function heldGet(port: number, path: string, headers: Record<string, string> = {}) {
  const socket: Socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  let received = "";
  socket.setEncoding("utf8");
  socket.on("data", (chunk: string) => (received += chunk));
  const closed = once(socket, "close").then(() => received);
  const head = [`GET ${path} HTTP/1.1`, "Host: parley", ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)].join("\r\n") + "\r\n";
  await new Promise<void>((resolve, reject) => socket.write(head, (err) => (err ? reject(err) : resolve())));
  return {
    finish: () => socket.write("\r\n"),
    /** The raw answer, once the server has closed the connection. */
    answer: closed,
  };
}

/** The /healthz barrier described at the top of the file, on a new connection: 200 only if the server is not yet stopping. */
async function barrier(port: number): Promise<void> {
  const req = request({ host: "127.0.0.1", port, path: "/healthz", agent: false });
  const answer = answerOf(req);
  req.end();
  expect((await answer).status, "the barrier ran before the signal").to.equal(200);
}

/** Whether a new connection to the port is refused. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED"));
  });
}

/** Waits until the server refuses new connections: it has begun stopping. */
async function untilRefused(port: number, alive: () => boolean): Promise<void> {
  while (!(await refused(port))) {
    if (!alive()) throw new Error("the server went away before it was seen refusing connections");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const deviceInfo = () => ({ deviceId: randomUUID(), deviceType: "DEVICE_TYPE_CLI", deviceName: "shutdown test" });
const uploadBody = (bytes: number, name: string) => ({
  fileName: name,
  contentType: "application/octet-stream",
  purpose: "MEDIA_PURPOSE_MESSAGE",
  data: randomBytes(bytes).toString("base64"),
});

async function signedInSocket(url: string, token: string, mode: "json" | "binary"): Promise<GatewayClient> {
  const ws = await GatewayClient.connect(url, mode);
  const auth = await ws.authenticate(token);
  expect(auth.payload.case === "authResponse" && auth.payload.value.success).to.equal(true);
  return ws;
}

describe("graceful shutdown of npm start", function () {
  this.timeout(90_000);
  let parley: ParleyProcess | undefined;
  afterEach(() => {
    parley?.dispose();
    parley = undefined;
  });

  it("on SIGTERM under load: 503 at once, refuses new connections, answers every request in flight, closes sockets with 1001, exits 0 without a WAL", async () => {
    const server = (parley = await ParleyProcess.start({ DRAIN_TIMEOUT_MS: "30000" }));
    const users: SignedIn[] = [];
    for (let i = 0; i < 4; i++) users.push(await signInWithCode(server));
    const password = "shutdown password 1";
    for (const user of users) await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: password });
    const sockets = [await signedInSocket(server.url, users[0].accessToken, "json"), await signedInSocket(server.url, users[1].accessToken, "binary")];

    // Keep-alive connections already open before the load, as a busy client pool has them.
    const agent = new Agent({ keepAlive: true, maxSockets: 64 });
    await Promise.all(Array.from({ length: 8 }, () => rpc(agent, server.port, "AuthService/GetClientConfig", {}).answer));

    const load: Rpc[] = [];
    for (let i = 0; i < 12; i++) {
      const user = users[i % users.length];
      // scrypt makes these slow-ish, and the thread pool queues them.
      load.push(rpc(agent, server.port, "AuthService/LoginPassword", { identityType: "IDENTITY_TYPE_EMAIL", identityValue: user.email, password, deviceInfo: deviceInfo() }));
      load.push(rpc(agent, server.port, "UserService/GetProfile", {}, user.accessToken));
    }
    for (let i = 0; i < 4; i++) load.push(rpc(agent, server.port, "MediaService/UploadFile", uploadBody(1_500_000, `load-${i}.bin`), users[i].accessToken));
    const heldUpload = heldRpc(server.port, "MediaService/UploadFile", uploadBody(200_000, "held.bin"), users[2].accessToken);
    const heldHealth = await heldGet(server.port, "/healthz");
    await Promise.all([...load.map((call) => call.written), heldUpload.written]);
    await barrier(server.port);

    server.child.kill("SIGTERM");
    await server.refusesConnections();
    expect(server.exit, "still running (draining) while refusing connections").to.equal(undefined);

    // The health check begun before the signal and completed after it: 503 at once, and the
    // connection is not kept.
    heldHealth.finish();
    const health = await heldHealth.answer;
    expect(health).to.match(/^HTTP\/1\.1 503 /);
    expect(health.toLowerCase()).to.include("connection: close");

    // The upload spanning the signal is still taken in whole and answered.
    heldUpload.finish();
    const upload = await heldUpload.answer;
    expect(upload.status, upload.body).to.equal(200);
    expect(upload.headers.connection).to.equal("close");
    expect(JSON.parse(upload.body)).to.have.nested.property("file.fileId");

    const answers = await Promise.allSettled(load.map((call) => call.answer));
    const failures = answers.flatMap((settled, i) =>
      settled.status === "rejected" ? [`${load[i].what}: ${String(settled.reason)}`] : settled.value.status !== 200 ? [`${load[i].what}: HTTP ${settled.value.status} ${settled.value.body}`] : [],
    );
    expect(failures, "every request in flight at the signal is answered in full").to.deep.equal([]);
    for (const settled of answers) if (settled.status === "fulfilled") JSON.parse(settled.value.body);

    for (const ws of sockets) {
      const { code } = await ws.closed;
      expect(code).to.equal(1001);
      expect(ws.frames.some((f) => f.payload.case === "error" && f.payload.value.fatal && f.payload.value.error?.errorName === Errors.gatewayShuttingDown.errorName)).to.equal(true);
    }
    expect(await server.exited, server.log).to.deep.equal({ code: 0, signal: null });
    expect(server.walSize() ?? 0, "no write-ahead log is left").to.equal(0);
    agent.destroy();
  });

  it("on SIGINT (delivered twice, as npm forwards a terminal's Ctrl-C) drains the same way and exits 0 without a WAL", async () => {
    const server = (parley = await ParleyProcess.start());
    const user = await signInWithCode(server);
    const ws = await signedInSocket(server.url, user.accessToken, "json");
    const held = heldRpc(server.port, "UserService/UpdateProfile", { nickname: "set while stopping" }, user.accessToken);
    await held.written;
    await barrier(server.port);

    server.child.kill("SIGINT");
    server.child.kill("SIGINT");
    await server.refusesConnections();
    held.finish();
    const answer = await held.answer;
    expect(answer.status, answer.body).to.equal(200);
    expect(answer.headers.connection).to.equal("close");
    expect((await ws.closed).code).to.equal(1001);
    expect(await server.exited, server.log).to.deep.equal({ code: 0, signal: null });
    expect(server.walSize() ?? 0).to.equal(0);

    // What the drained request wrote is there after a restart.
    parley = await ParleyProcess.start({ DATA_DIR: server.dataDir });
    const { profile } = await client(parley, UserService, "json", user.accessToken).getProfile({});
    expect(profile?.nickname).to.equal("set while stopping");
  });

  it("a second signal cuts the drain short, and the process still stops services, closes the store and exits 0", async () => {
    const server = (parley = await ParleyProcess.start({ DRAIN_TIMEOUT_MS: "600000" }));
    const user = await signInWithCode(server);
    const ws = await signedInSocket(server.url, user.accessToken, "binary");
    const held = heldRpc(server.port, "MediaService/UploadFile", uploadBody(100_000, "never-finished.bin"), user.accessToken);
    await held.written;
    await barrier(server.port);

    server.child.kill("SIGTERM");
    await server.refusesConnections();
    // Signals less than a second apart count as one (npm forwards a terminal's Ctrl-C that the
    // process also receives itself).
    await new Promise((resolve) => setTimeout(resolve, 1100));
    server.child.kill("SIGTERM");

    // Never finished by the client, so only the cut can end it: the connection dies unanswered.
    let error: unknown;
    await held.answer.catch((err: unknown) => (error = err));
    expect(error, "the request was cut, not answered").to.be.instanceOf(Error);
    expect((await ws.closed).code).to.equal(1001);
    expect(await server.exited, server.log).to.deep.equal({ code: 0, signal: null });
    expect(server.walSize() ?? 0).to.equal(0);
  });
});

for (const driver of socketDrivers)
describe(`Parley.stop drain window (${driver} driver)`, () => {
  const startOnDriver = (env: Record<string, string>) => startTestServer({ env: { SOCKET_DRIVER: driver, ...env }, topology: "single" });

  it("cuts a request still running when DRAIN_TIMEOUT_MS has passed, then stops", async () => {
    const server = await startOnDriver({ DRAIN_TIMEOUT_MS: "200" });
    const user = await signInWithCode(server);
    const held = heldRpc(server.port, "UserService/UpdateProfile", { nickname: "never finished" }, user.accessToken);
    await held.written;
    await barrier(server.port);

    // Resolves only because the window cuts the request: the client never sends the rest.
    await server.dispose();
    let error: unknown;
    await held.answer.catch((err: unknown) => (error = err));
    expect(error, "the request was cut, not answered").to.be.instanceOf(Error);
  });

  it("answers a request that finishes inside the window, with Connection: close, before stopping", async () => {
    const server = await startOnDriver({ DRAIN_TIMEOUT_MS: "60000" });
    const user = await signInWithCode(server);
    const held = heldRpc(server.port, "UserService/UpdateProfile", { nickname: "finished in time" }, user.accessToken);
    await held.written;
    await barrier(server.port);

    const stopped = server.restart();
    // Once the server refuses new connections it is draining; then the client finishes its request.
    await untilRefused(server.port, () => true);
    held.finish();
    const answer = await held.answer;
    expect(answer.status, answer.body).to.equal(200);
    expect(answer.headers.connection).to.equal("close");
    const restarted = await stopped;
    try {
      const { profile } = await client(restarted, UserService, "json", user.accessToken).getProfile({});
      expect(profile?.nickname).to.equal("finished in time");
    } finally {
      await restarted.dispose();
    }
  });

  it("answers a WebSocket upgrade begun before the stop and completed during the drain with 503", async () => {
    const server = await startOnDriver({ DRAIN_TIMEOUT_MS: "60000" });
    const upgrade = await heldGet(server.port, "/ws", {
      Upgrade: "websocket",
      Connection: "Upgrade",
      "Sec-WebSocket-Key": randomBytes(16).toString("base64"),
      "Sec-WebSocket-Version": "13",
    });
    await barrier(server.port);

    const stopped = server.dispose();
    await untilRefused(server.port, () => true);
    upgrade.finish();
    expect(await upgrade.answer).to.match(/^HTTP\/1\.1 503 /);
    await stopped;
  });

  it("answers the request in flight, then closes WebSockets with 1001 and a GATEWAY_SHUTTING_DOWN frame", async () => {
    const server = await startOnDriver({ DRAIN_TIMEOUT_MS: "60000" });
    const user = await signInWithCode(server);
    const sockets = [await signedInSocket(server.url, user.accessToken, "json"), await signedInSocket(server.url, user.accessToken, "binary")];
    const held = heldRpc(server.port, "UserService/UpdateProfile", { nickname: "while stopping" }, user.accessToken);
    await held.written;
    await barrier(server.port);

    const stopped = server.dispose();
    await untilRefused(server.port, () => true);
    held.finish();
    expect((await held.answer).status).to.equal(200);
    for (const ws of sockets) {
      expect((await ws.closed).code).to.equal(1001);
      expect(ws.frames.some((f) => f.payload.case === "error" && f.payload.value.error?.errorName === Errors.gatewayShuttingDown.errorName)).to.equal(true);
    }
    await stopped;
  });
});

describe("DRAIN_TIMEOUT_MS", () => {
  it("defaults to 10 s and takes 0..600000 ms", () => {
    expect(loadConfig({}).drainTimeoutMs).to.equal(10_000);
    expect(loadConfig({ DRAIN_TIMEOUT_MS: "0" }).drainTimeoutMs).to.equal(0);
    expect(loadConfig({ DRAIN_TIMEOUT_MS: "600000" }).drainTimeoutMs).to.equal(600_000);
  });

  it("stops start-up when it is not a whole number of milliseconds in range", () => {
    for (const raw of ["-1", "600001", "1.5", "ten", "10s"]) {
      expect(() => loadConfig({ DRAIN_TIMEOUT_MS: raw }), raw).to.throw(/DRAIN_TIMEOUT_MS must be 0\.\.600000/);
    }
  });
});
