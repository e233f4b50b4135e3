// RPC path benchmark: a trivial authenticated RPC (UserService.GetProfile) through the lean Connect
// unary path (api/lean-unary.ts) and through Connect-ES, in the same run, next to a plain node:http
// JSON echo (scripts/bench/baseline-servers.ts). One server process holds two complete Parley
// servers (embedded, each with its own data directory), one per path, so that both are measured
// in the same process under the same conditions; rounds alternate between them. Per row: requests
// per second (closed loop, keep-alive connections) and server CPU per request (the process's
// user + system time from /proc over the phase, divided by the requests it answered).
// Usage: tsx scripts/bench/rpc-path.ts [--seconds 5] [--concurrency 32] [--rounds 2]
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Pool } from "undici";
import { startParley } from "../../server.js";
import { loadConfig } from "../../shared/config.js";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { DeviceType } from "../../shared/gen/shared/v1/common_pb.js";
import { lastCode } from "../../test/support/harness.js";

const root = resolve(import.meta.dirname, "../..");
const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i].replace(/^--/, ""), process.argv[i + 1]);
const option = (name: string, fallback: number) => Number(args.get(name) ?? fallback);
const seconds = option("seconds", 5);
const concurrency = option("concurrency", 32);
const rounds = option("rounds", 2);

/** The server process: both Parley servers, then one line "ready <lean port> <Connect-ES port>". */
async function serve(dataDir: string): Promise<void> {
  // Both on the node:http front: the uWS front serves every Connect unary request on the lean
  // path whatever leanUnary says, so there both rows would measure the same path.
  const env = { HOST: "127.0.0.1", PORT: "0", LOG_LEVEL: "warn", SOCKET_DRIVER: "ws", CODE_DELIVERY: `file:${join(dataDir, "codes.jsonl")}` };
  const lean = await startParley({ config: loadConfig({ ...env, DATA_DIR: join(dataDir, "lean") }) });
  const connectEs = await startParley({ config: loadConfig({ ...env, DATA_DIR: join(dataDir, "connect-es") }), api: { leanUnary: false } });
  console.log(`ready ${lean.port} ${connectEs.port}`);
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((done) => probe.listen(0, "127.0.0.1", done));
  const { port } = probe.address() as { port: number };
  await new Promise((done) => probe.close(done));
  return port;
}

/** Starts a child process and resolves with it and the first stdout line that starts with `ready`. */
function startProcess(script: string[]): Promise<{ child: ChildProcess; ready: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", ...script], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr!.on("data", (data: Buffer) => process.stderr.write(data));
  return new Promise((resolveReady, reject) => {
    let output = "";
    child.stdout!.on("data", (data: Buffer) => {
      output += data.toString();
      const line = output.split("\n").find((l) => l.startsWith("ready"));
      if (line) resolveReady({ child, ready: line });
    });
    child.once("exit", (code) => reject(new Error(`${script.join(" ")} exited with ${code}`)));
  });
}

/** CPU time (user + system) the process has used so far, in ms, from /proc (Linux). */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  // utime and stime are fields 14 and 15 of stat, in clock ticks (100 per second on Linux).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

async function signIn(baseUrl: string, codesFile: string, email: string): Promise<string> {
  const auth = createClient(AuthService, createConnectTransport({ baseUrl, httpVersion: "1.1" }));
  const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
  const code = lastCode({ codesFile }, email);
  const signed = await auth.verifyCode({ verifyToken, code, deviceInfo: { deviceId: "bench", deviceType: DeviceType.CLI } });
  return signed.accessToken;
}

interface Target {
  name: string;
  baseUrl: string;
  pid: number;
  path: string;
  headers: Record<string, string>;
  body: string | Buffer;
}

interface Tally {
  requests: number;
  seconds: number;
  cpuMs: number;
}

/** Closed loop: `concurrency` connections each send the next request once the last is answered. */
async function measure(target: Target): Promise<Tally> {
  const pool = new Pool(target.baseUrl, { connections: concurrency, pipelining: 1 });
  // A short warm-up, so that connections are open and code is compiled before the clock starts.
  const run = async (untilMs: number) => {
    let done = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < untilMs) {
          const response = await pool.request({ method: "POST", path: target.path, headers: target.headers, body: target.body });
          await response.body.arrayBuffer();
          if (response.statusCode !== 200) throw new Error(`${target.name} answered ${response.statusCode}`);
          done++;
        }
      }),
    );
    return done;
  };
  await run(performance.now() + 500);
  const cpuBefore = processCpuMs(target.pid);
  const started = performance.now();
  const requests = await run(started + seconds * 1000);
  const elapsed = (performance.now() - started) / 1000;
  const cpuMs = processCpuMs(target.pid) - cpuBefore;
  await pool.close();
  return { requests, seconds: elapsed, cpuMs };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-rpc-bench-"));
  const children: ChildProcess[] = [];
  try {
    const servers = await startProcess(["scripts/bench/rpc-path.ts", "serve", dataDir]);
    children.push(servers.child);
    const [leanPort, connectEsPort] = servers.ready.split(" ").slice(1).map(Number);
    const echoPort = await freePort();
    const echo = await startProcess(["scripts/bench/baseline-servers.ts", "echo", String(echoPort)]);
    children.push(echo.child);

    const codesFile = join(dataDir, "codes.jsonl");
    const lean = `http://127.0.0.1:${leanPort}`;
    const connectEs = `http://127.0.0.1:${connectEsPort}`;
    const tokens = { lean: await signIn(lean, codesFile, "lean@example.com"), connectEs: await signIn(connectEs, codesFile, "connect-es@example.com") };
    const serverPid = servers.child.pid!;
    const getProfile = (name: string, baseUrl: string, token: string, binary: boolean): Target => ({
      name,
      baseUrl,
      pid: serverPid,
      path: "/api.v1.UserService/GetProfile",
      headers: { "content-type": binary ? "application/proto" : "application/json", authorization: `Bearer ${token}` },
      body: binary ? Buffer.alloc(0) : "{}",
    });
    const targets: Target[] = [
      getProfile("GetProfile, JSON, lean path", lean, tokens.lean, false),
      getProfile("GetProfile, JSON, Connect-ES", connectEs, tokens.connectEs, false),
      getProfile("GetProfile, binary, lean path", lean, tokens.lean, true),
      getProfile("GetProfile, binary, Connect-ES", connectEs, tokens.connectEs, true),
      { name: "node:http JSON echo", baseUrl: `http://127.0.0.1:${echoPort}`, pid: echo.child.pid!, path: "/echo", headers: { "content-type": "application/json" }, body: "{}" },
    ];
    const tallies = new Map<string, Tally>(targets.map((t) => [t.name, { requests: 0, seconds: 0, cpuMs: 0 }]));
    for (let round = 0; round < rounds; round++) {
      for (const target of targets) {
        const tally = await measure(target);
        const sum = tallies.get(target.name)!;
        sum.requests += tally.requests;
        sum.seconds += tally.seconds;
        sum.cpuMs += tally.cpuMs;
      }
    }

    console.log(`\nmachine: ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; load generator and servers share it`);
    console.log(`${rounds} round(s) of ${seconds} s per row, ${concurrency} keep-alive connections, closed loop\n`);
    console.log("| row | req/s | server CPU per request (ms) |");
    console.log("|---|---|---|");
    for (const target of targets) {
      const { requests, seconds: elapsed, cpuMs } = tallies.get(target.name)!;
      console.log(`| ${target.name} | ${Math.round(requests / elapsed)} | ${(cpuMs / requests).toFixed(3)} |`);
    }
  } finally {
    for (const child of children) child.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (process.argv[2] === "serve") await serve(process.argv[3]);
else await main();
