// `npm run bench -- [options]`: the issue-10 benchmark. Starts Parley in its own process (or uses
// one already running), a bare `ws` relay and a node:http JSON echo, signs in users, connects one
// socket per user to the gateway and to the relay, then measures each row in rounds and prints the
// medians as markdown tables. What each figure means: docs/benchmarks.md.
import { type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type WebSocket from "ws";
import cassandra from "cassandra-driver";
import { releaseTestCassandra, testCassandra } from "../../test/support/cassandra.js";
import { freePort, generousAbuseLimits } from "../../test/support/harness.js";
import { buildFixture } from "./fixture.js";
import { buildPushFixture, startLocalPushProviders, type LocalPushProviders } from "./push-fixture.js";
import { backingServices } from "../cluster/backing.js";
import { pidsListeningOn, startNode, stop, waitHealthy, type BackingPids } from "./processes.js";
import { report } from "./report.js";
import { measureRow, medians, roleFigure, rowNames, type BenchContext, type Figures, type RowName } from "./rows.js";
import { closeAll, keepAlive, openGatewaySocket, openRelaySocket, PushRouter, RpcClient } from "./wire.js";

const usage = `npm run bench -- [options]
  --rows private,group,delta,rpc,rss,push   rows to measure (default: all; without push with
                             --url or --store cluster, which it cannot run on)
  --runs 3                   rounds; every figure is the median of its rounds
  --concurrency 32           operations in flight in the closed loops
  --closed-warmup 1 --closed-seconds 5     closed loop: warm-up, then measured seconds
  --warmup 2 --seconds 10                  open loop: warm-up, then measured seconds
  --private-rate 1000 --group-rate 50 --delta-rate 1000   open-loop rates (operations/s)
  --pairs 50 --group-size 200              befriended pairs; members of the group
  --idle-sockets 5000        authenticated idle sockets for the memory row
  --push-recipients 50       push row: offline recipients with a device token (APNs and FCM in
                             turn) and as many without; at least --concurrency, so no two lanes
                             share a conversation. The row needs the server the benchmark starts
                             (sqlite or cassandra): it points it at local APNs and FCM servers
  --socket-driver ws|uws     SOCKET_DRIVER of the server the benchmark starts
  --store sqlite,cassandra,cluster   what the benchmark starts, one after the other: the server on
                             SQLite or on Cassandra (a real server, started if none runs, on a keyspace
                             of its own), or \`npm run cluster\` (server CPU and memory: the sum over
                             its Parley processes; backing services not counted)
  --gateways 2               gateway processes of the cluster the benchmark starts
  --engines 2                engine processes of the cluster the benchmark starts
  --url http://host:port     use a running server instead (needs --codes-file; its abuse
                             limits must be off); --server-pids 12,34 to read its CPU and RSS
  --codes-file <path>        the server's CODE_DELIVERY=file: path (with --url)
  --smoke                    every row for a fraction of a second, small shapes (checks the script)
  BENCH_PROFILE=<dir>        writes a CPU profile of the server the benchmark starts`;

const { values } = parseArgs({
  options: {
    rows: { type: "string" },
    runs: { type: "string" },
    concurrency: { type: "string" },
    "closed-warmup": { type: "string" },
    "closed-seconds": { type: "string" },
    warmup: { type: "string" },
    seconds: { type: "string" },
    "private-rate": { type: "string" },
    "group-rate": { type: "string" },
    "delta-rate": { type: "string" },
    pairs: { type: "string" },
    "group-size": { type: "string" },
    "idle-sockets": { type: "string" },
    "push-recipients": { type: "string" },
    "socket-driver": { type: "string" },
    store: { type: "string", default: "sqlite" },
    gateways: { type: "string", default: "2" },
    engines: { type: "string", default: "2" },
    url: { type: "string" },
    "server-pids": { type: "string" },
    "codes-file": { type: "string" },
    smoke: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  console.log(usage);
  process.exit(0);
}

const smoke = values.smoke;
/** A numeric option: its value, else the smoke default in smoke mode, else the default. */
function numberOption(name: keyof typeof values, normal: number, small = normal): number {
  const given = values[name];
  if (given === undefined) return smoke ? small : normal;
  const n = Number(given);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} takes a number, not ${String(given)}`);
  return n;
}

const stores = values.store.split(",").map((name) => name.trim());
for (const store of stores) if (!["sqlite", "cassandra", "cluster"].includes(store)) throw new Error(`--store takes sqlite, cassandra and/or cluster, not ${store}`);
if (values.url && values.store !== "sqlite") throw new Error("--store chooses the store of a server the benchmark starts; not with --url");
// The push row points the server at local push providers through its settings, so it needs a
// server the benchmark starts as one process. (The cluster would pass them on to its processes,
// but that path has not been run.)
const pushUnavailable = values.url ? "--url" : stores.includes("cluster") ? "--store cluster" : undefined;

const rows = (values.rows?.split(",").map((r) => r.trim()) ?? rowNames.filter((row) => row !== "push" || !pushUnavailable)) as RowName[];
for (const row of rows) if (!rowNames.includes(row)) throw new Error(`unknown row ${row}; rows are ${rowNames.join(", ")}`);
if (rows.includes("push") && pushUnavailable) throw new Error(`the push row needs a server the benchmark starts on sqlite or cassandra (it points it at local APNs and FCM servers); not with ${pushUnavailable}`);
const runs = numberOption("runs", 3, 1);
const concurrency = numberOption("concurrency", 32, 4);
const closed = { warmupMs: numberOption("closed-warmup", 1, 0.2) * 1000, measureMs: numberOption("closed-seconds", 5, 0.5) * 1000 };
const open = { warmupMs: numberOption("warmup", 2, 0.2) * 1000, measureMs: numberOption("seconds", 10, 0.5) * 1000 };
const rates = { private: numberOption("private-rate", 1000, 200), group: numberOption("group-rate", 50, 20), delta: numberOption("delta-rate", 1000, 200) };
const shape = { pairs: numberOption("pairs", 50, 4), groupSize: numberOption("group-size", 200, 20), streams: rows.includes("delta") ? concurrency : 0 };
const idleSockets = numberOption("idle-sockets", 5000, 200);
const pushRecipients = numberOption("push-recipients", 50, 4);
if (shape.pairs < 1 || shape.groupSize < 2 || concurrency < 1 || pushRecipients < 1) throw new Error("--pairs, --concurrency, --push-recipients need at least 1 and --group-size at least 2");
if (rows.includes("push") && pushRecipients < concurrency) process.stderr.write(`bench: ${pushRecipients} push recipients for ${concurrency} lanes: lanes share conversations and queue behind each other there\n`);
if (values.url && !values["codes-file"]) throw new Error("--url needs --codes-file (the server's CODE_DELIVERY=file: path) to sign users in");
if (values.url && rows.includes("rss") && !values["server-pids"]) throw new Error("the rss row reads the server's memory: with --url, give --server-pids");

const children: ChildProcess[] = [];
let dataDir: string | undefined;
/** Started before the server it serves, stopped after it, as the children are. */
let pushProviders: LocalPushProviders | undefined;
const benchKeyspace = `parley_bench_${process.pid}`;
let keyspaceCreated = false;

/** The settings that put the benchmark's server on `store`. */
async function storeEnv(store: string): Promise<Record<string, string>> {
  if (store === "sqlite") return {};
  keyspaceCreated = true;
  return { STORE: "cassandra", CASSANDRA_CONTACT_POINTS: await testCassandra(), CASSANDRA_KEYSPACE: benchKeyspace };
}

async function dropBenchKeyspace(): Promise<void> {
  if (!keyspaceCreated) return;
  keyspaceCreated = false;
  const client = new cassandra.Client({ contactPoints: [await testCassandra()], localDataCenter: "datacenter1" });
  try {
    await client.execute(`DROP KEYSPACE IF EXISTS ${benchKeyspace}`);
  } finally {
    await client.shutdown();
  }
}

/** The services listening on these ports, by name; one not found is left out (its CPU is not reported rather than reported as 0). */
function backingOn(ports: Record<string, number>): BackingPids {
  const found: BackingPids = {};
  for (const [name, port] of Object.entries(ports)) {
    const pids = pidsListeningOn(port);
    if (pids.length > 0) found[name] = pids;
    else process.stderr.write(`bench: nothing listens on ${port} (${name}): its CPU is not reported\n`);
  }
  return found;
}

const portOf = (contactPoint: string) => Number(/:(\d+)$/.exec(contactPoint)?.[1] ?? 9042);

interface StartedServer {
  url: string;
  codesFile: string;
  pids: number[];
  backing: BackingPids;
  collectGarbage?: () => void;
}

/** `npm run cluster` on the services' usual ports, its data under the system's temporary directory (warm on a second run). */
async function startCluster(): Promise<StartedServer> {
  const clusterDir = join(tmpdir(), "parley-bench-cluster");
  const codesFile = join(clusterDir, `codes-${process.pid}.jsonl`);
  const port = await freePort();
  const env = {
    DATA_DIR: clusterDir,
    HOST: "127.0.0.1",
    PORT: String(port),
    CODE_DELIVERY: `file:${codesFile}`,
    LOG_LEVEL: "warn",
    CLUSTER_GATEWAY_NODES: values.gateways,
    CLUSTER_ENGINE_NODES: values.engines,
    // One keyspace for every cluster run (it lives in the cluster's own Cassandra).
    CASSANDRA_KEYSPACE: "parley_bench",
    ...generousAbuseLimits,
    ...(values["socket-driver"] ? { SOCKET_DRIVER: values["socket-driver"] } : {}),
  };
  const cluster = await startNode([], ["scripts/cluster/main.ts"], env, "cluster: ready after");
  children.push(cluster);
  const pidDir = join(clusterDir, "cluster", "pids");
  const pidFiles = readdirSync(pidDir);
  const pids = pidFiles.map((name) => Number(readFileSync(join(pidDir, name), "utf8")));
  // Parley's processes by role too (pid files are <role>-<n>.pid): what each role costs per operation, for the capacity model.
  const byRole: BackingPids = {};
  pidFiles.forEach((name, index) => (byRole[roleFigure(name.replace(/-\d+\.pid$/, ""))] ??= []).push(pids[index]));
  const backing = { ...backingOn({ ...Object.fromEntries(backingServices.map((service) => [service.name, service.port])), nginx: port }), ...byRole };
  return { url: `http://127.0.0.1:${port}`, codesFile, pids, backing };
}

async function startServer(store: string): Promise<StartedServer> {
  if (store === "cluster") return startCluster();
  if (values.url) {
    const pids = (values["server-pids"] ?? "").split(",").filter(Boolean).map(Number);
    return { url: values.url.replace(/\/$/, ""), codesFile: values["codes-file"]!, pids, backing: {} };
  }
  dataDir = mkdtempSync(join(tmpdir(), "parley-bench-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const port = await freePort();
  const profile = process.env.BENCH_PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] : [];
  const driver: Record<string, string> = values["socket-driver"] ? { SOCKET_DRIVER: values["socket-driver"] } : {};
  if (rows.includes("push")) pushProviders = await startLocalPushProviders();
  const env: Record<string, string> = {
    PORT: String(port),
    HOST: "127.0.0.1",
    DATA_DIR: dataDir,
    CODE_DELIVERY: `file:${codesFile}`,
    LOG_LEVEL: "warn",
    ...generousAbuseLimits,
    ...driver,
    ...(await storeEnv(store)),
    ...pushProviders?.serverEnv,
  };
  const server = await startNode(["--expose-gc", ...profile], ["scripts/bench/server.ts"], env);
  children.push(server);
  const url = `http://127.0.0.1:${port}`;
  // A server that refuses to start (a socket driver it cannot load, say) ends the run at once.
  const exited = new Promise<never>((_, reject) => server.once("exit", (code) => reject(new Error(`the server exited with ${code} before it was healthy`))));
  await Promise.race([waitHealthy(url), exited]);
  exited.catch(() => undefined);
  const backing = store === "cassandra" ? backingOn({ cassandra: portOf(env.CASSANDRA_CONTACT_POINTS!) }) : {};
  return { url, codesFile, pids: [server.pid!], backing, collectGarbage: () => server.kill("SIGUSR2") };
}

async function main(store: string): Promise<number> {
  const server = await startServer(store);
  const relayPort = await freePort();
  const relay = await startNode([], ["scripts/bench/baseline-servers.ts", "relay", String(relayPort)], {}, "ready");
  children.push(relay);
  const echoPort = await freePort();
  const echoServer = await startNode([], ["scripts/bench/baseline-servers.ts", "echo", String(echoPort)], {}, "ready");
  children.push(echoServer);

  const setupStarted = performance.now();
  const fixture = await buildFixture(server, shape);
  const wsUrl = server.url.replace(/^http/, "ws") + "/ws";
  const gatewaySockets: WebSocket[] = [];
  const relaySockets: WebSocket[] = [];
  const router = new PushRouter();
  for (const [index, user] of fixture.users.entries()) {
    const socket = await openGatewaySocket(wsUrl, user.accessToken);
    socket.on("message", (data: Buffer) => router.receive(data, index));
    gatewaySockets.push(socket);
    const relaySocket = await openRelaySocket(`ws://127.0.0.1:${relayPort}`, index);
    relaySocket.on("message", (data: Buffer) => router.receive(data, index));
    relaySockets.push(relaySocket);
  }
  const stopKeepAlive = keepAlive(gatewaySockets);
  // The push row's recipients stay offline: signed in, no socket.
  const push = pushProviders && { providers: pushProviders, fixture: await buildPushFixture(server, fixture.users[0], pushRecipients) };
  process.stderr.write(
    `bench: ${fixture.users.length} users signed in and connected${push ? ` and ${2 * pushRecipients} offline push recipients set up` : ""} in ${((performance.now() - setupStarted) / 1000).toFixed(1)} s\n`,
  );

  const parley = new RpcClient(server.url, Math.max(concurrency, 256));
  const echo = new RpcClient(`http://127.0.0.1:${echoPort}`, concurrency);
  const context: BenchContext = {
    fixture,
    wsUrl,
    parley,
    echo,
    router,
    relaySockets,
    serverPids: server.pids,
    backingPids: server.backing,
    relayPid: relay.pid!,
    echoPid: echoServer.pid!,
    collectGarbage: server.collectGarbage,
    concurrency,
    closed,
    open,
    rates,
    idleSockets,
    push,
  };
  if (server.pids.length === 0) process.stderr.write("bench: no --server-pids: server CPU figures are unknown (n/a)\n");

  const startedAt = new Date();
  const clientCpuBefore = process.cpuUsage();
  const perRow = new Map<RowName, Figures[]>();
  for (let run = 1; run <= runs; run++) {
    for (const row of rows) {
      process.stderr.write(`bench: run ${run}/${runs}, row ${row}\n`);
      const figures = await measureRow(row, context);
      perRow.set(row, [...(perRow.get(row) ?? []), figures]);
    }
  }
  const clientCpu = process.cpuUsage(clientCpuBefore);
  const elapsedS = (Date.now() - startedAt.getTime()) / 1000;

  stopKeepAlive();
  await closeAll([...gatewaySockets, ...relaySockets]);
  await Promise.all([parley.close(), echo.close()]);

  const results = Object.fromEntries([...perRow].map(([row, figures]) => [row, medians(figures)]));
  const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
  const heading = [
    `Medians of ${runs} run${runs === 1 ? "" : "s"}, ${startedAt.toISOString().slice(0, 16)}Z; ${machine}; server ${values.url ?? `started by the benchmark on ${store}${store === "cluster" ? ` (${values.engines} engines, ${values.gateways} gateways)` : ""}`}, socket driver ${values["socket-driver"] ?? process.env.SOCKET_DRIVER ?? "default"};`,
    `closed loops ${closed.measureMs / 1000} s after ${closed.warmupMs / 1000} s warm-up, open loops ${open.measureMs / 1000} s after ${open.warmupMs / 1000} s warm-up;`,
    `${fixture.users.length} users, each with one gateway socket and one relay socket${push ? `; ${pushRecipients} offline recipients with a device token and ${pushRecipients} without` : ""}. The load generator shares the machine:`,
    `it used ${(((clientCpu.user + clientCpu.system) / 1000 / (elapsedS * 1000)) * 100).toFixed(0)} % of one core over the whole run (per phase: column "client CPU").`,
  ].join("\n");
  console.log("\n" + report(results, { groupSize: shape.groupSize, concurrency, runs, heading }));

  // In smoke mode the script checks itself: every row must have completed operations without a loss.
  if (smoke) {
    const broken = [...perRow].filter(([, all]) =>
      all.some((f) => (f.closedFailed ?? 0) > 0 || (f.openFailed ?? 0) > 0 || f.opsPerSec === 0 || Number.isNaN(f.opsPerSec ?? f.rssPerSocketKb) || f.notificationsPerSec === 0 || (f.undelivered ?? 0) > 0),
    );
    if (broken.length) {
      console.error(`bench --smoke: rows with failed or no operations: ${broken.map(([row]) => row).join(", ")}`);
      return 1;
    }
  }
  return 0;
}

let exitCode = 0;
try {
  for (const store of stores) {
    try {
      // The cluster starts a Cassandra of its own on the same port: the one the embedded server
      // used goes first (a run of --store cassandra,cluster failed on the taken port).
      if (store === "cluster") {
        await dropBenchKeyspace();
        await releaseTestCassandra();
      }
      exitCode = Math.max(exitCode, await main(store));
    } finally {
      await Promise.all(children.splice(0).map(stop));
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
      await pushProviders?.close();
      pushProviders = undefined;
    }
  }
} finally {
  await dropBenchKeyspace();
  await releaseTestCassandra();
}
process.exit(exitCode);
