// The nginx front (Debian's nginx unpacked into the cache on first use: a few seconds, then ~1 s a
// start) in front of tiny real upstreams: node:http servers that say who they are and a ws echo.
import { execFile } from "node:child_process";
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer as createTcpServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { expect } from "chai";
import { freeStablePort } from "../../test/support/ports.js";
import WebSocket, { WebSocketServer } from "ws";
import { startTestFront } from "../../test/support/nginx.js";
import { isAlive, portIsOpen } from "./daemon.js";
import { childPids, nginxPaths, reloadNginx, renderFrontConfig, startNginx, stopNginx, type FrontOptions } from "./nginx.js";

const repositoryRoot = resolve(import.meta.dirname, "../..");
const run = promisify(execFile);

/** What an upstream saw of one request. */
interface Seen {
  method: string;
  url: string;
  forwardedFor: string | undefined;
  bodyBytes: number;
}

/** A node:http upstream answering `<name> <method> <url>`; paths starting /crash drop the connection unanswered. */
class Upstream {
  readonly seen: Seen[] = [];
  readonly server: Server;
  readonly webSockets: WebSocketServer;

  constructor(readonly name: string) {
    this.server = createServer((req, res) => {
      let bodyBytes = 0;
      req.on("data", (chunk: Buffer) => (bodyBytes += chunk.length));
      req.on("end", () => {
        this.seen.push({ method: req.method ?? "", url: req.url ?? "", forwardedFor: req.headers["x-forwarded-for"] as string | undefined, bodyBytes });
        if (req.url?.startsWith("/crash")) {
          req.socket.destroy();
          return;
        }
        res.setHeader("content-type", "text/plain");
        res.end(`${this.name} ${req.method} ${req.url}`);
      });
    });
    this.webSockets = new WebSocketServer({ server: this.server, path: "/ws" });
    this.webSockets.on("connection", (socket, req) => {
      this.seen.push({ method: "UPGRADE", url: req.url ?? "", forwardedFor: req.headers["x-forwarded-for"] as string | undefined, bodyBytes: 0 });
      socket.on("message", (data) => socket.send(`${this.name} echo ${String(data)}`));
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((done) => this.server.listen(0, "127.0.0.1", done));
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Gone as a killed process is: open connections cut, new ones refused. */
  async kill(): Promise<void> {
    for (const client of this.webSockets.clients) client.terminate();
    this.server.closeAllConnections();
    await new Promise<void>((done) => this.server.close(() => done()));
  }
}

interface Answer {
  status: number;
  body: string;
}

function send(port: number, method: string, path: string, options: { body?: Buffer; headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((done, fail) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers: options.headers, agent: false }, (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", fail);
    req.end(options.body);
  });
}

/** The Connect code and ErrorDetail names of an error answer. */
function refusalOf(answer: Answer): { code: string; errorNames: string[] } {
  const body = JSON.parse(answer.body) as { code: string; details: { debug: { errorName: string } }[] };
  return { code: body.code, errorNames: body.details.map((detail) => detail.debug.errorName) };
}

const rpc = (port: number, method = "SendMessage") => send(port, "POST", `/api.v1.MessageService/${method}`, { body: Buffer.from("{}"), headers: { "content-type": "application/json" } });

function echoThroughFront(port: number, text: string): Promise<string> {
  return new Promise((done, fail) => {
    const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    socket.on("open", () => socket.send(text));
    socket.on("message", (data) => {
      done(String(data));
      socket.close();
    });
    socket.on("error", fail);
  });
}

describe("nginx front (real nginx from Debian's packages)", function () {
  this.timeout(120_000);
  let runDir: string;
  let apiA: Upstream;
  let apiB: Upstream;
  let gateway: Upstream;
  let health: Upstream;
  let options: FrontOptions;
  let configPath: string;

  beforeEach(async () => {
    runDir = mkdtempSync(join(tmpdir(), "parley-nginx-"));
    [apiA, apiB, gateway, health] = [new Upstream("api-a"), new Upstream("api-b"), new Upstream("gateway"), new Upstream("health")];
    options = {
      listenHost: "127.0.0.1",
      listenPort: await freeStablePort(),
      apiUpstreams: [await apiA.listen(), await apiB.listen()],
      gatewayUpstreams: [await gateway.listen()],
      healthUpstream: await health.listen(),
      runDir,
    };
    configPath = join(runDir, "nginx.conf");
    writeFileSync(configPath, renderFrontConfig(options));
  });

  afterEach(async () => {
    await stopNginx(runDir);
    for (const upstream of [apiA, apiB, gateway, health]) await upstream.kill().catch(() => undefined);
    rmSync(runDir, { recursive: true, force: true });
  });

  it("spreads API calls over both api nodes and sends /healthz to its node only", async () => {
    await startNginx(configPath, runDir);
    const answers = await Promise.all(Array.from({ length: 20 }, () => rpc(options.listenPort)));
    expect(answers.every((answer) => answer.status === 200)).to.equal(true);
    expect(apiA.seen.length + apiB.seen.length).to.equal(20);
    expect(apiA.seen.length).to.be.greaterThan(0);
    expect(apiB.seen.length).to.be.greaterThan(0);
    expect(apiA.seen[0]).to.include({ method: "POST", url: "/api.v1.MessageService/SendMessage" });

    const healthz = await send(options.listenPort, "GET", "/healthz");
    expect(healthz).to.deep.equal({ status: 200, body: "health GET /healthz" });
    const download = await send(options.listenPort, "GET", "/media/abc");
    expect(download.body).to.match(/^api-[ab] GET \/media\/abc$/);
    expect(health.seen.map((seen) => seen.url)).to.deep.equal(["/healthz"]);
    expect(gateway.seen).to.deep.equal([]);
  });

  it("carries a WebSocket to the gateway node and echoes through it", async () => {
    await startNginx(configPath, runDir);
    expect(await echoThroughFront(options.listenPort, "hello")).to.equal("gateway echo hello");
    expect(gateway.seen).to.deep.include({ method: "UPGRADE", url: "/ws", forwardedFor: "127.0.0.1", bodyBytes: 0 });
    expect(apiA.seen.length + apiB.seen.length).to.equal(0);
  });

  it("appends the client's address to X-Forwarded-For", async () => {
    await startNginx(configPath, runDir);
    await send(options.listenPort, "POST", "/api.v1.AuthService/Login", { body: Buffer.from("{}") });
    await send(options.listenPort, "POST", "/api.v1.AuthService/Login", { body: Buffer.from("{}"), headers: { "x-forwarded-for": "203.0.113.7" } });
    const forwarded = [...apiA.seen, ...apiB.seen].map((seen) => seen.forwardedFor).sort();
    expect(forwarded).to.deep.equal(["127.0.0.1", "203.0.113.7, 127.0.0.1"]);
  });

  it("serves every call through the other api node once one is killed", async () => {
    await startNginx(configPath, runDir);
    await apiA.kill();
    const before = apiB.seen.length;
    const answers = await Promise.all(Array.from({ length: 10 }, () => rpc(options.listenPort)));
    expect(answers.map((answer) => answer.status)).to.deep.equal(Array(10).fill(200));
    expect(answers.every((answer) => answer.body.startsWith("api-b "))).to.equal(true);
    expect(apiB.seen.length - before).to.equal(10);
  });

  // Both nodes drop /crash unanswered: a retried request reaches both, a request not retried one.
  it("never sends a POST that reached a node which then died to another node, and answers unavailable (503, UNAVAILABLE) in Connect's form", async () => {
    await startNginx(configPath, runDir);
    const post = await send(options.listenPort, "POST", "/crash/api.v1.MessageService/SendMessage", { body: Buffer.from("{}") });
    expect(post.status).to.equal(503);
    expect(refusalOf(post)).to.deep.equal({ code: "unavailable", errorNames: ["UNAVAILABLE"] });
    expect(apiA.seen.length + apiB.seen.length).to.equal(1);
  });

  it("retries a GET that reached a node which then died on the other node", async () => {
    await startNginx(configPath, runDir);
    const get = await send(options.listenPort, "GET", "/crash/media/abc");
    expect(get.status).to.equal(503);
    expect(apiA.seen.map((seen) => seen.url)).to.deep.equal(["/crash/media/abc"]);
    expect(apiB.seen.map((seen) => seen.url)).to.deep.equal(["/crash/media/abc"]);
  });

  it("passes an upload-sized body (7 MB) and refuses one past its limit unsent, as an api node would (resource_exhausted, REQUEST_TOO_LARGE)", async () => {
    await startNginx(configPath, runDir);
    const upload = await send(options.listenPort, "POST", "/api.v1.MediaService/UploadFile", { body: Buffer.alloc(7_000_000, 0x61) });
    expect(upload.status).to.equal(200);
    expect([...apiA.seen, ...apiB.seen].map((seen) => seen.bodyBytes)).to.deep.equal([7_000_000]);
    const tooLarge = await send(options.listenPort, "POST", "/api.v1.MediaService/UploadFile", { body: Buffer.alloc(10 * 1024 * 1024, 0x61) });
    expect(tooLarge.status).to.equal(429);
    const refusal = JSON.parse(tooLarge.body) as { code: string; details: { debug: { errorName: string } }[] };
    expect(refusal.code).to.equal("resource_exhausted");
    expect(refusal.details.map((detail) => detail.debug.errorName)).to.deep.equal(["REQUEST_TOO_LARGE"]);
    expect(apiA.seen.length + apiB.seen.length).to.equal(1);
  });

  it("answers a request line or header over the head limit itself, as an api node would (431, REQUEST_HEADERS_TOO_LARGE), unsent", async () => {
    await startNginx(configPath, runDir);
    const longLine = await send(options.listenPort, "POST", "/api.v1.UserService/GetProfile", { body: Buffer.from("{}"), headers: { authorization: `Bearer ${"a".repeat(20_000)}` } });
    const longTarget = await send(options.listenPort, "GET", `/media/${"a".repeat(20_000)}`);
    const manyLines = await send(options.listenPort, "POST", "/api.v1.UserService/GetProfile", {
      body: Buffer.from("{}"),
      headers: Object.fromEntries(Array.from({ length: 20 }, (_, index) => [`x-pad-${index}`, "p".repeat(1000)])),
    });
    for (const answer of [longLine, longTarget, manyLines]) {
      expect(answer.status).to.equal(431);
      expect(refusalOf(answer)).to.deep.equal({ code: "resource_exhausted", errorNames: ["REQUEST_HEADERS_TOO_LARGE"] });
    }
    expect(apiA.seen.length + apiB.seen.length).to.equal(0);
  });

  it("answers a path that climbs above the root itself, as an api node answers bad input (invalid_argument, INVALID_ARGUMENT), unsent", async () => {
    await startNginx(configPath, runDir);
    const climbing = await send(options.listenPort, "GET", "/media/..%2F..%2Fparley.db");
    expect(climbing.status).to.equal(400);
    const refusal = JSON.parse(climbing.body) as { code: string; details: { debug: { errorName: string } }[] };
    expect(refusal.code).to.equal("invalid_argument");
    expect(refusal.details.map((detail) => detail.debug.errorName)).to.deep.equal(["INVALID_ARGUMENT"]);
    expect(apiA.seen.length + apiB.seen.length).to.equal(0);
  });

  it("takes a new upstream list on reload without dropping the open WebSocket", async () => {
    const third = new Upstream("api-c");
    try {
      const instance = await startNginx(configPath, runDir);
      const socket = new WebSocket(`ws://127.0.0.1:${options.listenPort}/ws`);
      await new Promise((done, fail) => socket.on("open", done).on("error", fail));
      writeFileSync(configPath, renderFrontConfig({ ...options, apiUpstreams: [await third.listen()] }));
      await reloadNginx(runDir);
      const answers = await Promise.all(Array.from({ length: 5 }, () => rpc(options.listenPort)));
      expect(answers.every((answer) => answer.body.startsWith("api-c "))).to.equal(true);
      const echoed = new Promise<string>((done) => socket.once("message", (data) => done(String(data))));
      socket.send("still here");
      expect(await echoed).to.equal("gateway echo still here");
      socket.close();
      expect(isAlive(instance.pid)).to.equal(true);
    } finally {
      await third.kill().catch(() => undefined);
    }
  });

  it("refuses a reload of a config nginx cannot load and keeps serving the old one", async () => {
    await startNginx(configPath, runDir);
    writeFileSync(configPath, "http { nonsense; }\n");
    let failure: Error | undefined;
    await reloadNginx(runDir).catch((error: Error) => (failure = error));
    expect(failure?.message).to.match(/nginx refuses .*nginx\.conf/);
    expect((await rpc(options.listenPort)).status).to.equal(200);
  });

  it("refuses upstreams that are not host:port", () => {
    expect(() => renderFrontConfig({ ...options, apiUpstreams: [] })).to.throw(/at least one/);
    expect(() => renderFrontConfig({ ...options, gatewayUpstreams: ["http://x:1"] })).to.throw(/not host:port/);
  });

  it("fails to start on a taken port, saying why, and leaves nothing running", async () => {
    const squatter = createTcpServer();
    await new Promise<void>((done) => squatter.listen(options.listenPort, "127.0.0.1", done));
    try {
      let failure: Error | undefined;
      await startNginx(configPath, runDir).catch((error: Error) => (failure = error));
      expect(failure?.message).to.match(/Address already in use/);
      expect(existsSync(nginxPaths(runDir).pidFile)).to.equal(false);
    } finally {
      await new Promise<void>((done) => squatter.close(() => done()));
    }
  });

  it("reuses a running front and stops it with its workers", async () => {
    const first = await startNginx(configPath, runDir);
    expect(first.started).to.equal(true);
    expect(first.version).to.match(/^1\.\d+\.\d+/);
    const workers = childPids(first.pid);
    expect(workers.length).to.be.greaterThan(0);
    const second = await startNginx(configPath, runDir);
    expect(second).to.include({ pid: first.pid, started: false });

    expect(await stopNginx(runDir)).to.equal(true);
    expect([first.pid, ...workers].filter(isAlive)).to.deep.equal([]);
    expect(await portIsOpen("127.0.0.1", options.listenPort)).to.equal(false);
    expect(existsSync(nginxPaths(runDir).pidFile)).to.equal(false);
    expect(await stopNginx(runDir)).to.equal(false);
  });

  it("is run by `npm run services -- up nginx` from NGINX_* settings, reloaded by a second up, stopped by down", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "parley-services-"));
    const services = async (env: Record<string, string>, ...args: string[]) =>
      (await run(process.execPath, ["--import", "tsx", "scripts/services/main.ts", ...args], { cwd: repositoryRoot, env: { ...process.env, DATA_DIR: dataDir, ...env }, timeout: 60_000 })).stdout;
    const env = { NGINX_LISTEN: `127.0.0.1:${options.listenPort}`, NGINX_API_UPSTREAMS: options.apiUpstreams[0], NGINX_HEALTH_UPSTREAM: options.healthUpstream };
    try {
      expect(await services(env, "up", "nginx")).to.match(/^nginx 1\.\S+ on 127\.0\.0\.1:\d+ started \(pid \d+\)/);
      expect((await rpc(options.listenPort)).body).to.match(/^api-a /);
      // The gateway list defaults to the api list.
      expect(await echoThroughFront(options.listenPort, "x")).to.equal("api-a echo x");
      expect(await services(env, "up", "nginx")).to.include("already running");
      expect(await services({ ...env, NGINX_API_UPSTREAMS: options.apiUpstreams[1] }, "up", "nginx")).to.include("reloaded");
      expect((await rpc(options.listenPort)).body).to.match(/^api-b /);
      const pid = Number(readFileSync(nginxPaths(join(dataDir, "services", "nginx")).pidFile, "utf8"));
      expect(await services(env, "down", "nginx")).to.include("nginx: stopped");
      expect(isAlive(pid)).to.equal(false);
      expect(await portIsOpen("127.0.0.1", options.listenPort)).to.equal(false);
    } finally {
      await services(env, "down", "nginx").catch(() => undefined);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("gives tests a front through startTestFront that reloads and stops", async () => {
    const front = await startTestFront({ api: [options.apiUpstreams[0]], health: options.healthUpstream });
    try {
      expect((await rpc(front.port)).body).to.match(/^api-a /);
      expect(await echoThroughFront(front.port, "y")).to.equal("api-a echo y");
      await front.reload({ api: [options.apiUpstreams[1]] });
      expect((await rpc(front.port)).body).to.match(/^api-b /);
      expect((await send(front.port, "GET", "/healthz")).body).to.equal("api-b GET /healthz");
    } finally {
      await front.stop();
    }
    expect(await portIsOpen("127.0.0.1", front.port)).to.equal(false);
    expect(existsSync(front.runDir)).to.equal(false);
  });
});
