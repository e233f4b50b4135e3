// Messaging benchmark: starts Parley (`npm start`'s entry, own process, fresh DATA_DIR), signs in
// users, connects each over WebSocket, and measures against baselines run in the same session:
//   - SendMessage throughput and send-to-push latency in PRIVATE conversations,
//     next to a bare `ws` relay forwarding the same frames;
//   - stream deltas per second and delta-to-push latency, next to the same relay;
//   - requests/s of a trivial authenticated RPC (UserService.GetProfile), next to a plain
//     node:http JSON echo.
// Usage: npm run bench -- [--pairs 20] [--messages 4000] [--concurrency 32] [--deltas 8000] [--seconds 5]
// 200-member GROUP conversations join this benchmark when GroupService exists.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { create, fromJson, toJson, toJsonString } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Pool } from "undici";
import WebSocket from "ws";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { DeviceType, IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema, type ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import { MessageService, MessageType } from "../../shared/gen/api/v1/message_pb.js";
import { privateConversationId } from "../../shared/ids.js";

const root = resolve(import.meta.dirname, "../..");
const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i].replace(/^--/, ""), process.argv[i + 1]);
const option = (name: string, fallback: number) => Number(args.get(name) ?? fallback);
const pairs = option("pairs", 20);
const totalMessages = option("messages", 4000);
const concurrency = option("concurrency", 32);
const totalDeltas = option("deltas", 8000);
const rpcSeconds = option("seconds", 5);

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const { port } = probe.address() as { port: number };
  await new Promise((r) => probe.close(r));
  return port;
}

function startProcess(args: string[], env: Record<string, string>, readyLine?: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", ...args.filter((a) => a.startsWith("--cpu-prof")), ...args.filter((a) => !a.startsWith("--cpu-prof"))], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr!.on("data", (d: Buffer) => process.stderr.write(d));
  if (!readyLine) return Promise.resolve(child);
  return new Promise((resolveReady, reject) => {
    child.stdout!.on("data", (d: Buffer) => d.toString().includes(readyLine) && resolveReady(child));
    child.once("exit", (code) => reject(new Error(`process exited with ${code}`)));
  });
}

async function waitHealthy(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const ok = await fetch(url + "/healthz").then((r) => r.status === 200, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("server did not become healthy");
}

const percentile = (sorted: number[], p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN);
const summary = (latencies: number[]) => {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
};

/** Runs `total` tasks with at most `limit` in flight; answers the elapsed seconds. */
async function runPool(total: number, limit: number, task: (index: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(limit, total) }, async () => {
      while (next < total) await task(next++);
    }),
  );
  return (performance.now() - started) / 1000;
}

/** Resolves arrival waiters by key; a socket's frames call `arrived`. */
class Arrivals {
  private readonly waiting = new Map<string, (at: number) => void>();
  expect(key: string): Promise<number> {
    return new Promise((r) => this.waiting.set(key, r));
  }
  arrived(key: string): void {
    const resolveArrival = this.waiting.get(key);
    if (resolveArrival) {
      this.waiting.delete(key);
      resolveArrival(performance.now());
    }
  }
}

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-bench-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const children: ChildProcess[] = [];
  try {
    // BENCH_PROFILE=<dir> writes a CPU profile of the server there.
    const profile = process.env.BENCH_PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] : [];
    children.push(await startProcess([...profile, "main.ts"], { PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, CODE_DELIVERY: `file:${codesFile}`, LOG_LEVEL: "warn" }));
    await waitHealthy(baseUrl);

    const transport = (token?: string) => {
      const interceptors: Interceptor[] = token ? [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))] : [];
      return createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors });
    };
    const auth = createClient(AuthService, transport());

    // Users, signed in by code.
    const users: { userId: number; token: string }[] = [];
    for (let i = 0; i < pairs * 2; i++) {
      const email = `bench${i}.${Date.now()}@example.com`;
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const code = readFileSync(codesFile, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { identityValue: string; code: string }).filter((l) => l.identityValue === email).pop()!.code;
      const signed = await auth.verifyCode({ verifyToken, code, deviceInfo: { deviceId: `bench-${i}`, deviceType: DeviceType.CLI } });
      users.push({ userId: signed.userId, token: signed.accessToken });
    }
    const couples = Array.from({ length: pairs }, (_, i) => ({ a: users[2 * i], b: users[2 * i + 1] }));
    for (const { a, b } of couples) {
      const { requestId } = await createClient(ContactService, transport(a.token)).sendFriendRequest({ targetUserId: b.userId });
      await createClient(ContactService, transport(b.token)).acceptFriendRequest({ requestId });
    }

    // One socket per user, recording when each message or delta arrives.
    const arrivals = new Arrivals();
    const sockets: WebSocket[] = [];
    const openSocket = async (token: string) => {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`);
      await new Promise((r) => socket.once("open", r));
      const authed = new Promise((r) => socket.once("message", r));
      socket.send(toJsonString(ClientFrameSchema, create(ClientFrameSchema, { requestId: 1n, type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token } } })));
      await authed;
      socket.on("message", (data) => {
        const frame: ServerFrame = fromJson(ServerFrameSchema, JSON.parse(data.toString()));
        if (frame.payload.case !== "update") return;
        const inner = frame.payload.value.update.value?.update;
        if (inner?.case !== "messageEnvelope") return;
        const content = inner.value.body?.content;
        if (content?.case === "text") arrivals.arrived(content.value.text);
        if (content?.case === "stream" && content.value.delta) arrivals.arrived(content.value.delta);
      });
      sockets.push(socket);
    };
    for (const user of users) await openSocket(user.token);

    // 1. SendMessage in PRIVATE conversations.
    const messageClients = couples.map(({ a }) => createClient(MessageService, transport(a.token)));
    const sendLatencies: number[] = [];
    const sendSeconds = await runPool(totalMessages, concurrency, async (i) => {
      const k = i % pairs;
      const key = `m${i}`;
      const arrival = arrivals.expect(key);
      const started = performance.now();
      await messageClients[k].sendMessage({
        conversationId: privateConversationId(couples[k].a.userId, couples[k].b.userId),
        clientMessageId: BigInt(i + 1),
        body: { type: MessageType.TEXT, content: { case: "text", value: { text: key } } },
      });
      sendLatencies.push((await arrival) - started);
    });

    // 2. Streamed output: one agent per couple streams to its creator.
    const streams: { client: ReturnType<typeof createClient<typeof MessageService>>; conversationId: bigint; messageId: bigint; seq: number }[] = [];
    for (const [k, { a }] of couples.entries()) {
      const created = await createClient(AgentService, transport(a.token)).createAgent({ username: `benchbot_${k}_${process.pid}`.slice(0, 32), name: `Bench ${k}` });
      const agentId = created.profile!.user!.userId;
      const client = createClient(MessageService, transport(created.token));
      const conversationId = privateConversationId(a.userId, agentId);
      const { messageId } = await client.sendMessage({ conversationId, clientMessageId: 1n, body: { type: MessageType.STREAM, content: { case: "stream", value: { contentType: "text/plain" } } } });
      streams.push({ client, conversationId, messageId, seq: 0 });
    }
    const deltaLatencies: number[] = [];
    // One delta in flight per stream, as an agent emitting tokens in order does.
    const perStream = Math.ceil(totalDeltas / streams.length);
    const deltaStarted = performance.now();
    await Promise.all(
      streams.map(async (stream, k) => {
        for (let i = 0; i < perStream; i++) {
          const key = `d${k}.${i} `;
          const arrival = arrivals.expect(key);
          const started = performance.now();
          await stream.client.pushStreamDelta({ conversationId: stream.conversationId, messageId: stream.messageId, seq: ++stream.seq, delta: key });
          deltaLatencies.push((await arrival) - started);
        }
      }),
    );
    const deltaSeconds = (performance.now() - deltaStarted) / 1000;

    // 3. A trivial authenticated RPC.
    const rpcPool = new Pool(baseUrl, { connections: concurrency, pipelining: 1 });
    const rpcRate = await measureRate(rpcPool, "/api.v1.UserService/GetProfile", { authorization: `Bearer ${users[0].token}` });
    await rpcPool.close();
    for (const socket of sockets) socket.close();
    children.shift()!.kill("SIGTERM");

    // Baselines, same machine, same load shapes.
    const relayPort = await freePort();
    children.push(await startProcess(["scripts/bench/baseline-servers.ts", "relay", String(relayPort)], {}, "ready"));
    const relayArrivals = new Arrivals();
    const relaySockets: WebSocket[] = [];
    for (let i = 0; i < pairs * 2; i++) {
      const socket = new WebSocket(`ws://127.0.0.1:${relayPort}/?id=${i}`);
      await new Promise((r) => socket.once("open", r));
      socket.on("message", (data) => {
        const frame: ServerFrame = fromJson(ServerFrameSchema, JSON.parse(data.toString()));
        const inner = frame.payload.case === "update" ? frame.payload.value.update.value?.update : undefined;
        const content = inner?.case === "messageEnvelope" ? inner.value.body?.content : undefined;
        if (content?.case === "text") relayArrivals.arrived(content.value.text);
        if (content?.case === "stream") relayArrivals.arrived(content.value.delta);
      });
      relaySockets.push(socket);
    }
    const relayFrame = (content: { case: "text"; value: { text: string } } | { case: "stream"; value: { delta: string; seq: number } }) =>
      JSON.stringify(
        toJson(
          ServerFrameSchema,
          create(ServerFrameSchema, {
            requestId: -1n,
            type: 2,
            payload: {
              case: "update",
              value: {
                update: {
                  case: content.case === "text" ? "snUpdate" : "nonSnUpdate",
                  value: { update: { case: "messageEnvelope", value: { messageId: 1n, conversationId: 1n, senderId: 1, body: { type: content.case === "text" ? 1 : 8, content } } } },
                } as never,
              },
            },
          }),
        ),
      );
    const relayLatencies: number[] = [];
    const relaySeconds = await runPool(totalMessages, concurrency, async (i) => {
      const k = i % pairs;
      const key = `m${i}`;
      const arrival = relayArrivals.expect(key);
      const started = performance.now();
      relaySockets[2 * k].send(JSON.stringify({ to: String(2 * k + 1), frame: relayFrame({ case: "text", value: { text: key } }) }));
      relayLatencies.push((await arrival) - started);
    });
    const relayDeltaLatencies: number[] = [];
    const relayDeltaStarted = performance.now();
    await Promise.all(
      Array.from({ length: pairs }, async (_, k) => {
        for (let i = 0; i < perStream; i++) {
          const key = `d${k}.${i} `;
          const arrival = relayArrivals.expect(key);
          const started = performance.now();
          relaySockets[2 * k].send(JSON.stringify({ to: String(2 * k + 1), frame: relayFrame({ case: "stream", value: { delta: key, seq: i + 1 } }) }));
          relayDeltaLatencies.push((await arrival) - started);
        }
      }),
    );
    const relayDeltaSeconds = (performance.now() - relayDeltaStarted) / 1000;
    for (const socket of relaySockets) socket.close();
    children.pop()!.kill("SIGTERM");

    const echoPort = await freePort();
    children.push(await startProcess(["scripts/bench/baseline-servers.ts", "echo", String(echoPort)], {}, "ready"));
    const echoPool = new Pool(`http://127.0.0.1:${echoPort}`, { connections: concurrency, pipelining: 1 });
    const echoRate = await measureRate(echoPool, "/echo", {});
    await echoPool.close();

    const send = summary(sendLatencies);
    const relay = summary(relayLatencies);
    const delta = summary(deltaLatencies);
    const relayDelta = summary(relayDeltaLatencies);
    const fmt = (n: number) => n.toFixed(n < 10 ? 2 : 0);
    console.log(`\nmachine: ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`);
    console.log(`load: ${pairs} private pairs (${pairs * 2} sockets), ${totalMessages} messages at concurrency ${concurrency}, ${perStream * streams.length} deltas over ${streams.length} streams\n`);
    console.log("| measure | Parley | baseline | Parley / baseline |");
    console.log("|---|---|---|---|");
    console.log(`| SendMessage, private (msg/s) | ${fmt(totalMessages / sendSeconds)} | ${fmt(totalMessages / relaySeconds)} (ws relay) | ${fmt(relaySeconds / sendSeconds)} |`);
    console.log(`| send-to-push latency p50 / p99 (ms) | ${fmt(send.p50)} / ${fmt(send.p99)} | ${fmt(relay.p50)} / ${fmt(relay.p99)} | ${fmt(send.p50 / relay.p50)} (p50) |`);
    console.log(`| stream deltas (deltas/s) | ${fmt((perStream * streams.length) / deltaSeconds)} | ${fmt((perStream * pairs) / relayDeltaSeconds)} (ws relay) | ${fmt(relayDeltaSeconds / deltaSeconds)} |`);
    console.log(`| delta-to-push latency p50 / p99 (ms) | ${fmt(delta.p50)} / ${fmt(delta.p99)} | ${fmt(relayDelta.p50)} / ${fmt(relayDelta.p99)} | ${fmt(delta.p50 / relayDelta.p50)} (p50) |`);
    console.log(`| trivial authenticated RPC (req/s) | ${fmt(rpcRate)} (GetProfile) | ${fmt(echoRate)} (node:http echo) | ${fmt(rpcRate / echoRate)} |`);
  } finally {
    for (const child of children) child.kill("SIGTERM");
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Requests per second over `rpcSeconds` with `concurrency` keep-alive connections. */
async function measureRate(pool: Pool, path: string, headers: Record<string, string>): Promise<number> {
  const body = "{}";
  const deadline = performance.now() + rpcSeconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const response = await pool.request({ method: "POST", path, headers: { "content-type": "application/json", ...headers }, body });
        await response.body.text();
        if (response.statusCode !== 200) throw new Error(`${path} answered ${response.statusCode}`);
        done++;
      }
    }),
  );
  return done / rpcSeconds;
}

await main();
