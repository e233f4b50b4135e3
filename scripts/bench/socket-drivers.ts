// Socket driver benchmark: `ws` against uWebSockets.js in the same run. For each driver it starts
// Parley (`npm start`'s entry, own process, fresh DATA_DIR, SOCKET_DRIVER set) and measures:
//   - RSS per idle authenticated socket: server RSS with `--sockets` WebSockets open and
//     authenticated (spread over `--users` users), minus the RSS before the first was opened;
//   - server CPU per delivered push frame: one user holds `--fan-sockets` of those sockets and
//     changes its profile `--updates` times; each change pushes one frame to each of its sockets.
//     The server's CPU time (from /proc) over that phase, divided by the frames delivered; the
//     RPC and the store write behind each change are included, spread over the fan's sockets;
//   - server CPU per trivial authenticated RPC (UserService.GetProfile, `--rpcs` calls, 16 at a
//     time, Connect JSON over HTTP/1.1 keep-alive): the uWS front serves the API too.
// Drivers run one after the other, `--rounds` times, alternating, so both see the same machine.
// Usage: npx tsx scripts/bench/socket-drivers.ts [--sockets 5000] [--users 50] [--fan-sockets 1000]
//                                                [--updates 200] [--rpcs 3000] [--rounds 1] [--drivers ws,uws]
// The open-file limit (20,000 per process here) bounds --sockets for the server and this client.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { create, toJsonString } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import WebSocket from "ws";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { ClientFrameSchema, ClientFrameType } from "../../shared/gen/api/v1/gateway_pb.js";
import { UserService } from "../../shared/gen/api/v1/user_pb.js";
import { DeviceType } from "../../shared/gen/shared/v1/common_pb.js";
import { socketDrivers, type SocketDriver } from "../../shared/config.js";
import { lastCode } from "../../test/support/harness.js";

const root = resolve(import.meta.dirname, "../..");
const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i].replace(/^--/, ""), process.argv[i + 1]);
const option = (name: string, fallback: number) => Number(args.get(name) ?? fallback);
const socketCount = option("sockets", 5000);
const userCount = option("users", 50);
const fanSockets = Math.min(option("fan-sockets", 1000), socketCount);
const updates = option("updates", 200);
const rpcs = option("rpcs", 3000);
const rounds = option("rounds", 1);
const drivers = (args.get("drivers") ?? socketDrivers.join(",")).split(",") as SocketDriver[];
for (const driver of drivers) if (!(socketDrivers as readonly string[]).includes(driver)) throw new Error(`unknown driver ${driver}`);

// The benchmark signs in many users from one address: the limits across identities are off.
const noAbuseLimits = { VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "0", VERIFY_CODES_PER_MINUTE: "0", SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "0" };

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const { port } = probe.address() as { port: number };
  await new Promise((r) => probe.close(r));
  return port;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU time (user + system) the process has used so far, in ms, from /proc (Linux). */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  // utime and stime are fields 14 and 15 of stat, in clock ticks (100 per second on Linux).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Resident set size of the process, in bytes, from /proc (Linux). */
function processRssBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!;
  return Number(/(\d+)/.exec(line)![1]) * 1024;
}

interface Result {
  driver: SocketDriver;
  rssPerSocketBytes: number;
  cpuPerFrameUs: number;
  frames: number;
  seconds: number;
  cpuPerRpcUs: number;
}

async function measure(driver: SocketDriver): Promise<Result> {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-bench-sockets-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const server: ChildProcess = spawn(process.execPath, ["--import", "tsx", "main.ts"], {
    cwd: root,
    env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, CODE_DELIVERY: `file:${codesFile}`, LOG_LEVEL: "warn", SOCKET_DRIVER: driver, ...noAbuseLimits },
    stdio: ["ignore", "inherit", "inherit"],
  });
  const sockets: WebSocket[] = [];
  let heartbeat: NodeJS.Timeout | undefined;
  try {
    for (let i = 0; ; i++) {
      if (await fetch(`${baseUrl}/healthz`).then((r) => r.status === 200, () => false)) break;
      if (i > 300 || server.exitCode !== null) throw new Error(`the ${driver} server did not become healthy`);
      await sleep(100);
    }
    const pid = server.pid!;
    const transport = (token?: string) => {
      const interceptors: Interceptor[] = token ? [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))] : [];
      return createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors });
    };
    const auth = createClient(AuthService, transport());
    const tokens: string[] = [];
    for (let i = 0; i < userCount; i++) {
      const email = `sockets${i}.${process.pid}@example.com`;
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const code = lastCode({ codesFile }, email);
      tokens.push((await auth.verifyCode({ verifyToken, code, deviceInfo: { deviceId: `bench-${i}`, deviceType: DeviceType.CLI } })).accessToken);
    }
    // Warm the paths a socket takes before the baseline, so the first sockets do not carry the code's own memory.
    await sleep(1000);
    const rssBefore = processRssBytes(pid);

    // The fan user (user 0) holds the first `fanSockets` sockets; the rest are spread over the others.
    let received = 0;
    const connect = async (index: number) => {
      const token = index < fanSockets ? tokens[0] : tokens[1 + (index % Math.max(1, userCount - 1))] ?? tokens[0];
      const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`, { perMessageDeflate: false });
      await new Promise((r, reject) => (socket.once("open", r), socket.once("error", reject)));
      const authed = new Promise((r) => socket.once("message", r));
      socket.send(toJsonString(ClientFrameSchema, create(ClientFrameSchema, { requestId: 1n, type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token } } })));
      await authed;
      if (index < fanSockets) socket.on("message", (data: Buffer) => data.includes("heartbeatPong") || (received += 1));
      sockets[index] = socket;
    };
    for (let first = 0; first < socketCount; first += 200) {
      await Promise.all(Array.from({ length: Math.min(200, socketCount - first) }, (_, i) => connect(first + i)));
    }
    // The gateway closes a connection silent for 90 s: a long run pings, spread over 30 s.
    const ping = toJsonString(ClientFrameSchema, create(ClientFrameSchema, { requestId: 2n, type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } }));
    let pinged = 0;
    heartbeat = setInterval(() => {
      for (let i = 0; i < Math.ceil(sockets.length / 30); i++) sockets[pinged++ % sockets.length].send(ping);
    }, 1000);
    await sleep(2000);
    const rssAfter = processRssBytes(pid);
    const updatesBefore = received;

    const users = createClient(UserService, transport(tokens[0]));
    const cpuBefore = processCpuMs(pid);
    const started = performance.now();
    const expected = updatesBefore + updates * fanSockets;
    for (let i = 0; i < updates; i++) await users.updateProfile({ signature: `update ${i}` });
    while (received < expected) await sleep(5);
    const seconds = (performance.now() - started) / 1000;
    const cpuMs = processCpuMs(pid) - cpuBefore;
    const frames = updates * fanSockets;

    let nextRpc = 0;
    const rpcCpuBefore = processCpuMs(pid);
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (nextRpc++ < rpcs) await users.getProfile({});
      }),
    );
    const cpuPerRpcUs = ((processCpuMs(pid) - rpcCpuBefore) * 1000) / rpcs;
    return { driver, rssPerSocketBytes: (rssAfter - rssBefore) / socketCount, cpuPerFrameUs: (cpuMs * 1000) / frames, frames, seconds, cpuPerRpcUs };
  } finally {
    clearInterval(heartbeat);
    for (const socket of sockets) socket?.terminate();
    server.kill("SIGTERM");
    await new Promise((r) => (server.exitCode !== null ? r(undefined) : server.once("exit", r)));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const results: Result[] = [];
for (let round = 0; round < rounds; round++) {
  for (const driver of round % 2 === 0 ? drivers : [...drivers].reverse()) {
    const result = await measure(driver);
    results.push(result);
    console.log(
      `${driver.padEnd(4)} round ${round + 1}: ${(result.rssPerSocketBytes / 1024).toFixed(2)} KB RSS per idle authenticated socket (${socketCount} sockets); ` +
        `${result.cpuPerFrameUs.toFixed(2)} µs server CPU per delivered push frame (${result.frames} frames to ${fanSockets} sockets in ${result.seconds.toFixed(1)} s); ` +
        `${result.cpuPerRpcUs.toFixed(0)} µs server CPU per GetProfile`,
    );
  }
}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.log("\ndriver | KB RSS per idle socket | µs server CPU per push frame | µs server CPU per GetProfile (medians)");
for (const driver of drivers) {
  const mine = results.filter((r) => r.driver === driver);
  console.log(
    `${driver} | ${(median(mine.map((r) => r.rssPerSocketBytes)) / 1024).toFixed(2)} | ${median(mine.map((r) => r.cpuPerFrameUs)).toFixed(2)} | ${median(mine.map((r) => r.cpuPerRpcUs)).toFixed(0)}`,
  );
}
