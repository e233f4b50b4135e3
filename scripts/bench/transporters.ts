// Which Moleculer transporter a Parley cluster should use, by measurement: TCP (Moleculer's own,
// peer to peer, static node list), Redis (pub/sub through a real redis-server from Debian's
// packages) and NATS (a real nats-server built with `go install`). For each, in separate
// processes on this machine (scripts/bench/transporter-node.ts), with Parley's broker settings:
//   - that a payload with int64 ids as decimal strings and nested objects round-trips exactly
//     under the JSON serializer, and that a bigint is refused rather than rounded;
//   - request/response at concurrency 1 and 64 with a ~300-byte message: calls/s, p50/p99, and
//     CPU per call of the caller and the service (process.cpuUsage, each process its own) and of
//     the broker server (from /proc);
//   - an event broadcast to 2 listener nodes: events/s delivered to both, p50/p99 delivery time;
//   - how long after its broker started a new node is known to the caller, and how long after a
//     SIGKILL the caller notices a node is gone.
// Every figure is the median of the runs (3 unless --runs N). Usage:
//   npx tsx scripts/bench/transporters.ts [--runs N] [--seconds S] [--only tcp,redis,nats]
import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { meshTransporter, type BrokerSettings } from "../../moleculer.config.js";
import { portIsOpen, stopProcess } from "../services/daemon.js";
import { unpackDebianPackages } from "../services/debian-packages.js";
import { installNatsServer, natsServerVersion } from "../services/nats-server.js";
import { processCpuMs } from "./processes.js";
import type { CallerCommand, CallsResult, FanOutResult, NodeReport, NodeRole, NodeSpec, RoundTripResult } from "./transporter-node.js";

const nodeEntry = resolve(import.meta.dirname, "transporter-node.ts");
const now = () => performance.timeOrigin + performance.now();
const fanOutEvents = 5_000;
const listenerIDs = ["listener-1", "listener-2"];
const nodeIDs = ["caller", "service", ...listenerIDs, "joiner"];

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((done) => server.close(() => done()));
  return port;
}

/** A transporter under test: what each node is given, and the broker server behind it if any. */
interface Transport {
  name: string;
  describe: string;
  transporterFor(nodeID: string): BrokerSettings["transporter"];
  serverPid?: number;
  stop(): Promise<void>;
}

async function waitForPort(port: number, child: ChildProcess, what: string): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    if (await portIsOpen("127.0.0.1", port)) return;
    await sleep(50);
  }
  throw new Error(`${what} did not listen on ${port}`);
}

async function tcpTransport(): Promise<Transport> {
  const ports = new Map<string, number>();
  for (const nodeID of nodeIDs) ports.set(nodeID, await freePort());
  const urls = nodeIDs.map((nodeID) => `127.0.0.1:${ports.get(nodeID)}/${nodeID}`);
  return {
    name: "TCP",
    describe: "Moleculer TCP transporter, static node list, UDP discovery off",
    transporterFor: (nodeID) => meshTransporter(ports.get(nodeID)!, urls),
    stop: async () => undefined,
  };
}

async function redisTransport(dir: string): Promise<Transport> {
  const redis = unpackDebianPackages("redis-server", ["redis-server", "redis-tools", "liblzf1", "libjemalloc2"]);
  const port = await freePort();
  // No persistence: the transporter only publishes and subscribes.
  const child = spawn(join(redis.root, "usr", "bin", "redis-server"), ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no", "--dir", dir], {
    env: { ...process.env, LD_LIBRARY_PATH: redis.libraryPath },
    stdio: "ignore",
  });
  await waitForPort(port, child, "redis-server");
  return {
    name: "Redis",
    describe: `redis-server ${redis.version} (Debian package, unpacked), ioredis`,
    transporterFor: () => `redis://127.0.0.1:${port}`,
    serverPid: child.pid,
    stop: () => stopProcess(child.pid!, 5_000),
  };
}

async function natsTransport(): Promise<Transport> {
  const binary = installNatsServer();
  const port = await freePort();
  const child = spawn(binary, ["-a", "127.0.0.1", "-p", String(port)], { stdio: "ignore" });
  await waitForPort(port, child, "nats-server");
  return {
    name: "NATS",
    describe: `nats-server ${natsServerVersion} (go install), nats.js 2.29`,
    transporterFor: () => `nats://127.0.0.1:${port}`,
    serverPid: child.pid,
    stop: () => stopProcess(child.pid!, 5_000),
  };
}

/** One forked broker and what it has reported so far. */
class BenchNode {
  readonly reports: NodeReport[] = [];
  private wake: (() => void) | undefined;
  exited = false;

  private constructor(readonly child: ChildProcess) {
    child.on("message", (report: NodeReport) => {
      this.reports.push(report);
      this.wake?.();
    });
    child.on("error", () => undefined);
    child.on("exit", () => {
      this.exited = true;
      this.wake?.();
    });
  }

  static async start(role: NodeRole, nodeID: string, transport: Transport, waitFor: string[] = []): Promise<{ node: BenchNode; startAt: number }> {
    const spec: NodeSpec = { role, nodeID, transporter: transport.transporterFor(nodeID), waitFor };
    const child = fork(nodeEntry, [], { execArgv: ["--import", "tsx"], env: { ...process.env, BENCH_NODE: JSON.stringify(spec) }, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const node = new BenchNode(child);
    const started = await node.next((report) => report.report === "started", 60_000, `${nodeID} start`);
    return { node, startAt: (started as { startAt: number }).startAt };
  }

  /** The first report (since the last one taken) that matches; a "failed" report throws. */
  async next(matches: (report: NodeReport) => boolean, timeoutMs: number, what: string): Promise<NodeReport> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const index = this.reports.findIndex((report) => report.report === "failed" || matches(report));
      if (index >= 0) {
        const [report] = this.reports.splice(index, 1);
        if (report.report === "failed") throw new Error(`${what}: ${report.message}`);
        return report;
      }
      if (this.exited) throw new Error(`${what}: the node exited`);
      if (Date.now() > deadline) throw new Error(`${what}: no answer within ${timeoutMs / 1000} s`);
      await new Promise<void>((done) => {
        this.wake = done;
        setTimeout(done, 200).unref();
      });
    }
  }

  async command<Result>(command: CallerCommand, timeoutMs: number): Promise<Result> {
    this.child.send(command);
    const report = await this.next((candidate) => candidate.report === "result", timeoutMs, command.command);
    return (report as unknown as { result: Result }).result;
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    // A node just killed may not have reported its exit yet; its channel is closed already.
    if (this.child.connected) this.child.send({ command: "stop" } satisfies CallerCommand, () => undefined);
    for (let waited = 0; waited < 5_000 && !this.exited; waited += 50) await sleep(50);
    if (!this.exited) this.child.kill("SIGKILL");
  }
}

interface RunFigures {
  roundTrip: RoundTripResult;
  one: CallsResult;
  many: CallsResult;
  serverCpuUsPerCallMany: number;
  fanOut: FanOutResult;
  discoveryMs: number;
  detectionMs: number;
}

async function oneRun(transport: Transport, seconds: number): Promise<RunFigures> {
  const nodes: BenchNode[] = [];
  try {
    nodes.push((await BenchNode.start("service", "service", transport)).node);
    for (const nodeID of listenerIDs) nodes.push((await BenchNode.start("listener", nodeID, transport)).node);
    const caller = (await BenchNode.start("caller", "caller", transport, ["bench", ...listenerIDs.map((id) => `listen-${id}`)])).node;
    nodes.push(caller);

    const roundTrip = await caller.command<RoundTripResult>({ command: "roundTrip" }, 10_000);
    await caller.command<CallsResult>({ command: "calls", concurrency: 64, seconds: 1 }, 30_000);
    const one = await caller.command<CallsResult>({ command: "calls", concurrency: 1, seconds }, 60_000);
    const serverBefore = transport.serverPid ? processCpuMs([transport.serverPid]) : NaN;
    const many = await caller.command<CallsResult>({ command: "calls", concurrency: 64, seconds }, 60_000);
    const serverCpuUsPerCallMany = ((processCpuMs(transport.serverPid ? [transport.serverPid] : []) - serverBefore) * 1000) / many.calls;
    const fanOut = await caller.command<FanOutResult>({ command: "fanOut", events: fanOutEvents, listeners: listenerIDs }, 90_000);

    const joiner = await BenchNode.start("joiner", "joiner", transport);
    nodes.push(joiner.node);
    const connected = await caller.next((report) => report.report === "nodeConnected" && report.nodeID === "joiner", 60_000, "joiner discovered");
    const discoveryMs = (connected as { at: number }).at - joiner.startAt;
    // Known to the caller, the joiner is killed as a crash would: no DISCONNECT packet is sent.
    const killedAt = now();
    joiner.node.child.kill("SIGKILL");
    const gone = await caller.next((report) => report.report === "nodeDisconnected" && report.nodeID === "joiner", 60_000, "killed joiner noticed");
    const detectionMs = (gone as { at: number }).at - killedAt;
    return { roundTrip, one, many, serverCpuUsPerCallMany, fanOut, discoveryMs, detectionMs };
  } finally {
    await Promise.all(nodes.map((node) => node.stop()));
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length % 2 === 1 ? sorted[(sorted.length - 1) / 2] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
}

/** min–max: discovery and failure detection hang on timers, so their spread matters as much as the median. */
const spread = (values: number[]) => `${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)}`;

const perCallUs = (result: CallsResult) => (result.callerCpuUs + result.serviceCpuUs) / result.calls;

function summarize(name: string, runs: RunFigures[]): Record<string, string> {
  const m = (pick: (run: RunFigures) => number, digits = 0) => median(runs.map(pick)).toFixed(digits);
  return {
    transporter: name,
    "round trip": runs.every((run) => run.roundTrip.exact && run.roundTrip.bigintRefused) ? "exact" : "BROKEN",
    "c1 calls/s": m((run) => run.one.calls / run.one.seconds),
    "c1 p50/p99 ms": `${m((run) => run.one.p50Ms, 2)}/${m((run) => run.one.p99Ms, 2)}`,
    "c1 cpu µs/call (caller+service)": `${m((run) => run.one.callerCpuUs / run.one.calls)}+${m((run) => run.one.serviceCpuUs / run.one.calls)}`,
    "c64 calls/s": m((run) => run.many.calls / run.many.seconds),
    "c64 p50/p99 ms": `${m((run) => run.many.p50Ms, 1)}/${m((run) => run.many.p99Ms, 1)}`,
    "c64 cpu µs/call (caller+service)": `${m((run) => run.many.callerCpuUs / run.many.calls)}+${m((run) => run.many.serviceCpuUs / run.many.calls)}`,
    "c64 total µs/call (+server)": `${m((run) => perCallUs(run.many) + (Number.isNaN(run.serverCpuUsPerCallMany) ? 0 : run.serverCpuUsPerCallMany))}`,
    "fan-out ev/s to 2": m((run) => run.fanOut.events / run.fanOut.seconds),
    "fan-out p50/p99 ms": `${m((run) => run.fanOut.p50Ms, 1)}/${m((run) => run.fanOut.p99Ms, 1)}`,
    "new node seen ms": `${m((run) => run.discoveryMs)} (${spread(runs.map((run) => run.discoveryMs))})`,
    "kill noticed ms": `${m((run) => run.detectionMs)} (${spread(runs.map((run) => run.detectionMs))})`,
  };
}

function printTable(rows: Record<string, string>[]): void {
  const columns = Object.keys(rows[0]);
  const widths = columns.map((column) => Math.max(column.length, ...rows.map((row) => row[column].length)));
  const line = (cells: string[]) => `| ${cells.map((cell, index) => cell.padEnd(widths[index])).join(" | ")} |`;
  console.log(line(columns));
  console.log(`|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`);
  for (const row of rows) console.log(line(columns.map((column) => row[column])));
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { runs: { type: "string", default: "3" }, seconds: { type: "string", default: "3" }, only: { type: "string", default: "tcp,redis,nats" } } });
  const runs = Number(values.runs);
  const seconds = Number(values.seconds);
  const dir = mkdtempSync(join(tmpdir(), "parley-transporters-"));
  const starters: Record<string, () => Promise<Transport>> = { tcp: tcpTransport, redis: () => redisTransport(dir), nats: natsTransport };
  const rows: Record<string, string>[] = [];
  try {
    for (const key of values.only!.split(",")) {
      const transport = await starters[key]();
      try {
        console.log(`${transport.name}: ${transport.describe}`);
        const figures: RunFigures[] = [];
        for (let run = 0; run < runs; run++) {
          const result = await oneRun(transport, seconds);
          if (!result.roundTrip.exact) console.log(`  round trip NOT exact: ${result.roundTrip.detail}`);
          if (!result.roundTrip.bigintRefused) console.log("  a bigint crossed the transporter: it must be refused");
          console.log(
            `  run ${run + 1}: c1 ${(result.one.calls / result.one.seconds).toFixed(0)}/s, c64 ${(result.many.calls / result.many.seconds).toFixed(0)}/s, fan-out ${(result.fanOut.events / result.fanOut.seconds).toFixed(0)} ev/s (${result.fanOut.delivered} delivered), new node ${result.discoveryMs.toFixed(0)} ms, kill noticed ${result.detectionMs.toFixed(0)} ms`,
          );
          figures.push(result);
        }
        rows.push(summarize(transport.name, figures));
      } finally {
        await transport.stop();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`\nMedians of ${runs} runs; ${seconds} s per call measurement, ${fanOutEvents} fan-out events; 2 cores shared by every process.`);
  printTable(rows);
}

await main();
