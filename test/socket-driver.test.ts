// SOCKET_DRIVER picks the WebSocket implementation once at start-up; uWS only in its native form.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect } from "chai";
import { loadNativeUws, nativeBinaryPath } from "../gateway/uws-native.js";
import { defaultSocketDriver, loadConfig } from "../shared/config.js";
import { freePort, socketDrivers, startTestServer, type TestServer } from "./support/harness.js";
import { openRaw } from "./support/raw-http.js";

const repositoryRoot = resolve(import.meta.dirname, "..");

/** `npm start` with `env`, until it exits or `waitMs` passes; what it printed and how it ended. */
async function startAndWait(env: Record<string, string>, waitMs: number): Promise<{ code: number | null; output: string; port: number }> {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-driver-"));
  const port = await freePort();
  const child = spawn(process.execPath, ["--import", "tsx", "main.ts"], {
    cwd: repositoryRoot,
    env: { ...process.env, HOST: "127.0.0.1", PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), waitMs);
  const code = await new Promise<number | null>((done) => child.once("exit", (exitCode) => done(exitCode)));
  clearTimeout(timer);
  rmSync(dataDir, { recursive: true, force: true });
  return { code, output, port };
}

describe("SOCKET_DRIVER", () => {
  it("defaults to the measured choice and takes ws or uws", () => {
    expect(loadConfig({}).socketDriver).to.equal(defaultSocketDriver);
    expect(loadConfig({ SOCKET_DRIVER: "ws" }).socketDriver).to.equal("ws");
    expect(loadConfig({ SOCKET_DRIVER: "uws" }).socketDriver).to.equal("uws");
  });

  it("stops start-up on anything else", () => {
    for (const raw of ["uWS", "uwebsockets", "ws ", "none"]) {
      expect(() => loadConfig({ SOCKET_DRIVER: raw }), raw).to.throw(/SOCKET_DRIVER must be one of ws, uws/);
    }
  });
});

describe("uWebSockets.js native loading", () => {
  it("loads the native binary of this platform and Node ABI", () => {
    const uws = loadNativeUws({});
    expect(nativeBinaryPath()).to.match(/\.node$/);
    // The JS fallback's App is a JavaScript function; the binary's is native.
    expect(Function.prototype.toString.call(uws.App)).to.include("[native code]");
  });

  it("refuses when UWS_USE_FALLBACK asks for the JS fallback", () => {
    for (const flag of ["1", "true", "TRUE"]) {
      expect(() => loadNativeUws({ UWS_USE_FALLBACK: flag }), flag).to.throw(/native binary.*UWS_USE_FALLBACK.*JS fallback is not used/);
    }
  });

  it("refuses when the binary does not load, naming it", () => {
    const missing = join(tmpdir(), "no-such-uws_linux_x64_0.node");
    expect(() => loadNativeUws({}, missing)).to.throw(new RegExp(`${missing.replace(/[.]/g, "\\.")} does not load`));
  });

  it("npm start with SOCKET_DRIVER=uws and only the fallback available exits with the reason, never serving", async function () {
    this.timeout(60_000);
    const { code, output, port } = await startAndWait({ SOCKET_DRIVER: "uws", UWS_USE_FALLBACK: "1" }, 30_000);
    expect(code, output).to.equal(1);
    expect(output).to.match(/SOCKET_DRIVER=uws needs uWebSockets\.js's native binary/);
    expect(output).not.to.match(/Using µWS fallback/);
    const refused = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      () => false,
      () => true,
    );
    expect(refused).to.equal(true);
  });
});

for (const driver of socketDrivers) {
  describe(`the edge's HTTP routes (${driver} driver)`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer({ env: { SOCKET_DRIVER: driver } });
    });
    after(async () => server.dispose());

    it("answers a HEAD without its body, so the next answer on the connection stays readable", async () => {
      const connection = await openRaw(server.port);
      connection.socket.write("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
      await new Promise<void>((resolve) => {
        const check = () => connection.received().includes("not found\n") && resolve();
        connection.socket.on("data", check);
        check();
      });
      const [head, rest] = connection.received().split(/\r\n\r\n(.*)/s);
      expect(head).to.match(/^HTTP\/1\.1 200 /);
      expect(rest).to.match(/^HTTP\/1\.1 404 /);
      connection.socket.destroy();
    });

    it("serves /, unknown paths, /healthz and /metrics", async () => {
      expect((await fetch(server.url + "/")).status).to.equal(404);
      expect((await fetch(server.url + "/nowhere?x=1")).status).to.equal(404);
      expect(await (await fetch(server.url + "/healthz")).text()).to.equal("ok\n");
      expect(await (await fetch(server.url + "/metrics")).text()).to.include("parley_websocket_connections");
    });
  });
}
