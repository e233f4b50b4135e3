// Messaging benchmark: starts Parley (`npm start`'s entry, own process, fresh DATA_DIR), signs in
// users, connects each over WebSocket, and measures against baselines run in the same session:
//   - SendMessage throughput and send-to-push latency, in PRIVATE conversations and in one
//     200-member GROUP, next to a bare `ws` relay forwarding the same frames to the same sockets;
//   - stream deltas per second and delta-to-push latency (agent streaming to its creator, and an
//     agent streaming into the 200-member group), next to the same relay;
//   - requests/s of a trivial authenticated RPC (UserService.GetProfile), next to a plain
//     node:http JSON echo.
// Latencies are per delivered frame: from the call's start to each recipient socket's arrival.
// Usage: npm run bench -- [--pairs 20] [--messages 3000] [--group-messages 300] [--concurrency 32]
//                         [--deltas 6000] [--group-deltas 600] [--seconds 5]
// BENCH_PROFILE=<dir> writes a CPU profile of the server there.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { create, fromJson, toJson, toJsonString } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Pool } from "undici";
import WebSocket from "ws";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { DeviceType } from "../../shared/gen/shared/v1/common_pb.js";
import { IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema, type ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { MessageType } from "../../shared/gen/shared/v1/message_pb.js";
import { privateConversationId } from "../../shared/ids.js";

const root = resolve(import.meta.dirname, "../..");
const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i].replace(/^--/, ""), process.argv[i + 1]);
const option = (name: string, fallback: number) => Number(args.get(name) ?? fallback);
const pairs = option("pairs", 20);
const privateMessages = option("messages", 3000);
const groupMessages = option("group-messages", 300);
const concurrency = option("concurrency", 32);
const privateDeltas = option("deltas", 6000);
const groupDeltas = option("group-deltas", 600);
const rpcSeconds = option("seconds", 5);
const groupSize = 200;

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const { port } = probe.address() as { port: number };
  await new Promise((r) => probe.close(r));
  return port;
}

function startProcess(nodeFlags: string[], script: string[], env: Record<string, string>, readyLine?: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...nodeFlags, "--import", "tsx", ...script], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr!.on("data", (d: Buffer) => process.stderr.write(d));
  if (!readyLine) return Promise.resolve(child);
  return new Promise((resolveReady, reject) => {
    child.stdout!.on("data", (d: Buffer) => d.toString().includes(readyLine) && resolveReady(child));
    child.once("exit", (code) => reject(new Error(`process exited with ${code}`)));
  });
}

async function waitHealthy(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (await fetch(url + "/healthz").then((r) => r.status === 200, () => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("server did not become healthy");
}

const percentile = (sorted: number[], p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN);
/** CPU time (user + system) the process has used so far, in ms, from /proc (Linux). */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  // utime and stime are fields 14 and 15 of stat, in clock ticks (100 per second on Linux).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Runs `work` and adds the server CPU it cost. */
async function withServerCpu<T extends object>(pid: number, work: () => Promise<T>): Promise<T & { cpuMs: number }> {
  const before = processCpuMs(pid);
  const result = await work();
  return { ...result, cpuMs: processCpuMs(pid) - before };
}

function summary(latencies: number[]) {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** Collects arrival times per key: a key is expected at `count` sockets. */
class Arrivals {
  private readonly waiting = new Map<string, { times: number[]; count: number; done: (times: number[]) => void }>();
  expect(key: string, count: number): Promise<number[]> {
    return new Promise((done) => this.waiting.set(key, { times: [], count, done }));
  }
  arrived(key: string): void {
    const entry = this.waiting.get(key);
    if (!entry) return;
    entry.times.push(performance.now());
    if (entry.times.length === entry.count) {
      this.waiting.delete(key);
      entry.done(entry.times);
    }
  }
}

/** The text or delta a pushed frame carries, if it is a message. */
function frameKey(data: WebSocket.RawData): string | undefined {
  const frame: ServerFrame = fromJson(ServerFrameSchema, JSON.parse(data.toString()));
  const inner = frame.payload.case === "update" ? frame.payload.value.update.value?.update : undefined;
  const content = inner?.case === "messageEnvelope" ? inner.value.body?.content : undefined;
  if (content?.case === "text") return content.value.text;
  if (content?.case === "stream" && content.value.delta) return content.value.delta;
  return undefined;
}

/** Runs `total` sends with at most `limit` in flight; each resolves when all its deliveries arrived. */
async function runLoad(total: number, limit: number, send: (index: number) => Promise<number[]>): Promise<{ seconds: number; latencies: number[] }> {
  let next = 0;
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(limit, total) }, async () => {
      while (next < total) {
        const sentAt = performance.now();
        const arrivals = await send(next++);
        for (const at of arrivals) latencies.push(at - sentAt);
      }
    }),
  );
  return { seconds: (performance.now() - started) / 1000, latencies };
}

interface Row {
  name: string;
  unit: string;
  parley: { seconds: number; latencies: number[]; count: number; cpuMs: number };
  baseline: { seconds: number; latencies: number[]; count: number };
}

// The benchmark signs in hundreds of users from one address: the limits across identities are off.
const noAbuseLimits = { VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "0", VERIFY_CODES_PER_MINUTE: "0", SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "0" };

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-bench-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const children: ChildProcess[] = [];
  const rows: Row[] = [];
  try {
    const profile = process.env.BENCH_PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] : [];
    children.push(await startProcess(profile, ["main.ts"], { PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, CODE_DELIVERY: `file:${codesFile}`, LOG_LEVEL: "warn", ...noAbuseLimits }));
    await waitHealthy(baseUrl);
    const transport = (token?: string) => {
      const interceptors: Interceptor[] = token ? [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))] : [];
      return createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors });
    };
    const auth = createClient(AuthService, transport());

    // Accounts: 2 × pairs for private chats, and the 200 members of one group (the first is its owner).
    const userCount = Math.max(pairs * 2, groupSize);
    const users: { userId: number; token: string }[] = [];
    for (let i = 0; i < userCount; i++) {
      const email = `bench${i}.${process.pid}@example.com`;
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
    const members = users.slice(0, groupSize);
    const { group } = await createClient(GroupService, transport(members[0].token)).createGroup({ name: "bench", memberIds: members.slice(1).map((m) => m.userId) });
    const groupConversation = BigInt(group!.groupId);

    const arrivals = new Arrivals();
    const sockets: WebSocket[] = [];
    for (const user of users) {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`);
      await new Promise((r) => socket.once("open", r));
      const authed = new Promise((r) => socket.once("message", r));
      socket.send(toJsonString(ClientFrameSchema, create(ClientFrameSchema, { requestId: 1n, type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token: user.token } } })));
      await authed;
      socket.on("message", (data) => {
        const key = frameKey(data);
        if (key) arrivals.arrived(key);
      });
      sockets.push(socket);
    }
    const messageClients = new Map<number, Client<typeof MessageService>>(users.map((u) => [u.userId, createClient(MessageService, transport(u.token))]));
    const text = (t: string) => ({ type: MessageType.TEXT, content: { case: "text" as const, value: { text: t } } });

    // SendMessage: every participant's socket (the sender's too) receives the message.
    let clientMessageId = 1n;
    const serverPid = children[0].pid!;
    const privateSend = await withServerCpu(serverPid, () => runLoad(privateMessages, concurrency, async (i) => {
      const { a, b } = couples[i % pairs];
      const key = `p${i}`;
      const arrived = arrivals.expect(key, 2);
      await messageClients.get(a.userId)!.sendMessage({ conversationId: privateConversationId(a.userId, b.userId), clientMessageId: clientMessageId++, body: text(key) });
      return arrived;
    }));
    const groupSend = await withServerCpu(serverPid, () => runLoad(groupMessages, Math.min(concurrency, 8), async (i) => {
      const sender = members[i % groupSize];
      const key = `g${i}`;
      const arrived = arrivals.expect(key, groupSize);
      await messageClients.get(sender.userId)!.sendMessage({ conversationId: groupConversation, clientMessageId: clientMessageId++, body: text(key) });
      return arrived;
    }));

    // Streams: an agent per couple streams to its creator; one agent streams into the group.
    const makeStream = async (owner: { token: string; userId: number }, name: string, conversationFor: (agentId: number) => bigint, inGroup = false) => {
      const created = await createClient(AgentService, transport(owner.token)).createAgent({ username: `${name}_${process.pid}`.slice(0, 32), name });
      const agentId = created.profile!.user!.userId;
      const client = createClient(MessageService, transport(created.token));
      const conversationId = conversationFor(agentId);
      // The group is full (200 people): the agent takes the place of the last member.
      if (inGroup) {
        const groups = createClient(GroupService, transport(owner.token));
        await groups.removeMember({ groupId: Number(conversationId), targetId: members[groupSize - 1].userId });
        await groups.inviteMembers({ groupId: Number(conversationId), memberIds: [agentId] });
      }
      const { messageId } = await client.sendMessage({ conversationId, clientMessageId: 1n, body: { type: MessageType.STREAM, content: { case: "stream", value: { contentType: "text/plain" } } } });
      return { client, conversationId, messageId, seq: 0 };
    };
    const privateStreams: Awaited<ReturnType<typeof makeStream>>[] = [];
    for (const [k, { a }] of couples.entries()) privateStreams.push(await makeStream(a, `benchbot${k}`, (agentId) => privateConversationId(a.userId, agentId)));
    const groupStream = await makeStream(members[0], "benchgroupbot", () => groupConversation, true);
    // One delta in flight per stream, as an agent emitting tokens in order does.
    const streamLoad = async (streams: typeof privateStreams, total: number, recipients: number, prefix: string) => {
      const perStream = Math.ceil(total / streams.length);
      const latencies: number[] = [];
      const started = performance.now();
      await Promise.all(
        streams.map(async (stream, k) => {
          for (let i = 0; i < perStream; i++) {
            const key = `${prefix}${k}.${i} `;
            const arrived = arrivals.expect(key, recipients);
            const sentAt = performance.now();
            await stream.client.pushStreamDelta({ conversationId: stream.conversationId, messageId: stream.messageId, seq: ++stream.seq, delta: key });
            for (const at of await arrived) latencies.push(at - sentAt);
          }
        }),
      );
      return { seconds: (performance.now() - started) / 1000, latencies, count: perStream * streams.length };
    };
    const privateDelta = await withServerCpu(serverPid, () => streamLoad(privateStreams, privateDeltas, 1, "pd"));
    // 199 people and the agent: the 199 people's sockets receive each delta.
    const groupDelta = await withServerCpu(serverPid, () => streamLoad([groupStream], groupDeltas, groupSize - 1, "gd"));

    const rpcPool = new Pool(baseUrl, { connections: concurrency, pipelining: 1 });
    const rpc = await withServerCpu(serverPid, async () => ({ rate: await measureRate(rpcPool, "/api.v1.UserService/GetProfile", { authorization: `Bearer ${users[0].token}` }) }));
    const rpcRate = rpc.rate;
    await rpcPool.close();
    for (const socket of sockets) socket.close();
    children.shift()!.kill("SIGTERM");

    // The same loads through a bare relay, to the same number of sockets.
    const relayPort = await freePort();
    children.push(await startProcess([], ["scripts/bench/baseline-servers.ts", "relay", String(relayPort)], {}, "ready"));
    const relayArrivals = new Arrivals();
    const relaySockets: WebSocket[] = [];
    for (let i = 0; i < userCount; i++) {
      const socket = new WebSocket(`ws://127.0.0.1:${relayPort}/?id=${i}`);
      await new Promise((r) => socket.once("open", r));
      socket.on("message", (data) => {
        const key = frameKey(data);
        if (key) relayArrivals.arrived(key);
      });
      relaySockets.push(socket);
    }
    const frameOf = (content: { case: "text"; value: { text: string } } | { case: "stream"; value: { delta: string; seq: number } }) =>
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
    const groupIds = Array.from({ length: groupSize }, (_, i) => String(i));
    const relay = (from: number, to: string[], key: string, frame: string, recipients: number) => {
      const arrived = relayArrivals.expect(key, recipients);
      relaySockets[from].send(JSON.stringify({ to, frame }));
      return arrived;
    };
    const relayPrivate = await runLoad(privateMessages, concurrency, (i) => {
      const k = i % pairs;
      return relay(2 * k, [String(2 * k), String(2 * k + 1)], `p${i}`, frameOf({ case: "text", value: { text: `p${i}` } }), 2);
    });
    const relayGroup = await runLoad(groupMessages, Math.min(concurrency, 8), (i) => relay(i % groupSize, groupIds, `g${i}`, frameOf({ case: "text", value: { text: `g${i}` } }), groupSize));
    const relayStream = async (streams: number, total: number, recipients: (k: number) => string[], prefix: string) => {
      const perStream = Math.ceil(total / streams);
      const latencies: number[] = [];
      const started = performance.now();
      await Promise.all(
        Array.from({ length: streams }, async (_, k) => {
          for (let i = 0; i < perStream; i++) {
            const key = `${prefix}${k}.${i} `;
            const to = recipients(k);
            const sentAt = performance.now();
            for (const at of await relay(2 * k, to, key, frameOf({ case: "stream", value: { delta: key, seq: i + 1 } }), to.length)) latencies.push(at - sentAt);
          }
        }),
      );
      return { seconds: (performance.now() - started) / 1000, latencies, count: perStream * streams };
    };
    const relayPrivateDelta = await relayStream(pairs, privateDeltas, (k) => [String(2 * k)], "pd");
    const relayGroupDelta = await relayStream(1, groupDeltas, () => groupIds.slice(0, groupSize - 1), "gd");
    for (const socket of relaySockets) socket.close();
    children.pop()!.kill("SIGTERM");

    const echoPort = await freePort();
    children.push(await startProcess([], ["scripts/bench/baseline-servers.ts", "echo", String(echoPort)], {}, "ready"));
    const echoPool = new Pool(`http://127.0.0.1:${echoPort}`, { connections: concurrency, pipelining: 1 });
    const echoRate = await measureRate(echoPool, "/echo", {});
    await echoPool.close();

    rows.push(
      { name: "SendMessage, private", unit: "msg/s", parley: { ...privateSend, count: privateMessages }, baseline: { ...relayPrivate, count: privateMessages } },
      { name: `SendMessage, ${groupSize}-member group`, unit: "msg/s", parley: { ...groupSend, count: groupMessages }, baseline: { ...relayGroup, count: groupMessages } },
      { name: "stream deltas, private", unit: "deltas/s", parley: privateDelta, baseline: relayPrivateDelta },
      { name: `stream deltas, ${groupSize}-member group`, unit: "deltas/s", parley: groupDelta, baseline: relayGroupDelta },
    );
    const fmt = (n: number) => (Number.isNaN(n) ? "n/a" : n.toFixed(n < 10 ? 2 : 0));
    console.log(`\nmachine: ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; load generator and server share it`);
    console.log(`load: ${pairs} private pairs, one ${groupSize}-member group, ${userCount} sockets, concurrency ${concurrency} (8 for the group)\n`);
    console.log("| measure | Parley | bare ws relay | Parley / relay |");
    console.log("|---|---|---|---|");
    for (const row of rows) {
      const p = summary(row.parley.latencies);
      const b = summary(row.baseline.latencies);
      const rate = row.parley.count / row.parley.seconds;
      const baseRate = row.baseline.count / row.baseline.seconds;
      console.log(`| ${row.name} (${row.unit}) | ${fmt(rate)} | ${fmt(baseRate)} | ${fmt(rate / baseRate)} |`);
      console.log(`| ${row.name}: push latency p50 / p99 (ms) | ${fmt(p.p50)} / ${fmt(p.p99)} | ${fmt(b.p50)} / ${fmt(b.p99)} | ${fmt(p.p50 / b.p50)} (p50) |`);
      console.log(`| ${row.name}: server CPU per operation (ms) | ${(row.parley.cpuMs / row.parley.count).toFixed(3)} | | |`);
    }
    console.log(`| trivial authenticated RPC (req/s) | ${fmt(rpcRate)} (GetProfile) | ${fmt(echoRate)} (node:http JSON echo) | ${fmt(rpcRate / echoRate)} |`);
    console.log(`| trivial authenticated RPC: server CPU per request (ms) | ${(rpc.cpuMs / (rpcRate * rpcSeconds)).toFixed(3)} | | |`);
  } finally {
    for (const child of children) child.kill("SIGTERM");
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Requests per second over `rpcSeconds` with `concurrency` keep-alive connections. */
async function measureRate(pool: Pool, path: string, headers: Record<string, string>): Promise<number> {
  const deadline = performance.now() + rpcSeconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const response = await pool.request({ method: "POST", path, headers: { "content-type": "application/json", ...headers }, body: "{}" });
        await response.body.text();
        if (response.statusCode !== 200) throw new Error(`${path} answered ${response.statusCode}`);
        done++;
      }
    }),
  );
  return done / rpcSeconds;
}

await main();
