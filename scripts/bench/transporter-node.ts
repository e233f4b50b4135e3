// One broker of the transporter benchmark (scripts/bench/transporters.ts forks it): a caller that
// measures on command, the service it calls, a listener of the fan-out event, or a node that is
// started and killed to time discovery and failure detection. It talks to the benchmark over IPC.
// The broker is configured as Parley's own (moleculer.config.ts), only the transporter differs.
import { deepStrictEqual } from "node:assert";
import { ServiceBroker, type Context } from "moleculer";
import { brokerOptions, type BrokerSettings } from "../../moleculer.config.js";

export type NodeRole = "caller" | "service" | "listener" | "joiner";

export interface NodeSpec {
  role: NodeRole;
  nodeID: string;
  transporter: BrokerSettings["transporter"];
  /** Services the node waits for before it reports itself started. */
  waitFor: string[];
}

/** What the benchmark asks the caller. */
export type CallerCommand =
  | { command: "roundTrip" }
  | { command: "calls"; concurrency: number; seconds: number }
  | { command: "fanOut"; events: number; listeners: string[] }
  | { command: "stop" };

export interface CallsResult {
  calls: number;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
  callerCpuUs: number;
  serviceCpuUs: number;
}

export interface FanOutResult {
  events: number;
  seconds: number;
  delivered: number;
  p50Ms: number;
  p99Ms: number;
}

export interface RoundTripResult {
  exact: boolean;
  detail: string;
  bigintRefused: boolean;
}

/** Messages a node sends the benchmark. */
export type NodeReport =
  | { report: "started"; nodeID: string; startAt: number }
  | { report: "nodeConnected"; nodeID: string; at: number }
  | { report: "nodeDisconnected"; nodeID: string; at: number; unexpected: boolean }
  | { report: "result"; result: CallsResult | FanOutResult | RoundTripResult }
  | { report: "failed"; message: string };

/** A wall clock that two processes on one machine share, in ms with sub-ms resolution. */
const now = () => performance.timeOrigin + performance.now();

/**
 * A message of about 300 bytes as JSON, shaped like a Parley message: ids are int64 carried as
 * decimal strings (shared/wire.ts), some beyond 2^53 where a JSON number would lose digits.
 */
export const benchPayload = {
  conversationId: "7312458812345678901",
  messageId: "9223372036854775807",
  senderId: "1152921504606846976",
  clientMessageId: "2f1c6a3e-6f0b-4a51-9d8e-3b5b8c1f0a77",
  sentAtMs: "1795678901234",
  text: "Meeting moved to 15:30, room 4.12; bring the draft.",
  entities: [{ type: "MENTION", offset: 0, length: 7, userId: "9007199254740993" }],
  replyTo: { messageId: "-9223372036854775808", senderId: "42" },
};

/** Everything JSON can carry that our wire form uses, nested, for the exact round-trip check. */
export const roundTripPayload = {
  ids: ["9223372036854775807", "-9223372036854775808", "9007199254740993", "0", "18446744073709551615"],
  nested: { level: { deeper: { id: "1234567890123456789", list: [{ a: "1" }, { b: ["2", "3"] }], empty: {}, none: [] } } },
  text: "ünïcödé ✓ 🙂 \"quoted\" \\ back\nline\u0000nul",
  number: 1.5,
  negative: -0.25,
  flag: false,
  nothing: null,
  bytes: Buffer.from("binary\u0000\u00ff").toString("base64"),
};

function quantile(sorted: Float64Array, q: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

type ServiceUsage = NodeJS.CpuUsage & { handled: number };

function cpuUs(usage: NodeJS.CpuUsage): number {
  return usage.user + usage.system;
}

function report(message: NodeReport): void {
  // While the broker stops, $node events still come; the benchmark may have closed the channel.
  if (process.connected) process.send?.(message);
}

async function calls(broker: ServiceBroker, concurrency: number, seconds: number): Promise<CallsResult> {
  const latencies: number[] = [];
  const serviceBefore = await broker.call<ServiceUsage, object>("bench.cpu", {});
  const callerBefore = process.cpuUsage();
  const began = now();
  const until = began + seconds * 1000;
  const worker = async () => {
    while (now() < until) {
      const sent = now();
      await broker.call("bench.echo", benchPayload);
      latencies.push(now() - sent);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = (now() - began) / 1000;
  const callerUs = cpuUs(process.cpuUsage(callerBefore));
  const serviceAfter = await broker.call<ServiceUsage, object>("bench.cpu", {});
  // Every call must have run on the service node, not been answered on the way.
  if (serviceAfter.handled - serviceBefore.handled !== latencies.length) throw new Error(`${latencies.length} calls answered, ${serviceAfter.handled - serviceBefore.handled} handled by the service`);
  const sorted = Float64Array.from(latencies).sort();
  return { calls: latencies.length, seconds: elapsed, p50Ms: quantile(sorted, 0.5), p99Ms: quantile(sorted, 0.99), callerCpuUs: callerUs, serviceCpuUs: cpuUs(serviceAfter) - cpuUs(serviceBefore) };
}

/** Waits for each listener's "received everything" event; the listeners answer their latencies. */
async function fanOut(broker: ServiceBroker, events: number, listeners: string[], finished: Map<string, (latencies: number[]) => void>): Promise<FanOutResult> {
  const done = listeners.map((nodeID) => new Promise<number[]>((resolve) => finished.set(nodeID, resolve)));
  const began = now();
  for (let sequence = 0; sequence < events; sequence++) {
    // Paced by the publish promise in groups, as a busy engine broadcasts: never more than 64 unsent.
    const published = broker.broadcast("bench.fanOut", { ...benchPayload, sequence, total: events, sentAt: now() });
    if (sequence % 64 === 63) await published;
  }
  const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 60_000).unref());
  const all = await Promise.race([Promise.all(done), timeout]);
  const elapsed = (now() - began) / 1000;
  if (all === "timeout") return { events, seconds: elapsed, delivered: NaN, p50Ms: NaN, p99Ms: NaN };
  const sorted = Float64Array.from(all.flat()).sort();
  return { events, seconds: elapsed, delivered: sorted.length, p50Ms: quantile(sorted, 0.5), p99Ms: quantile(sorted, 0.99) };
}

async function roundTrip(broker: ServiceBroker): Promise<RoundTripResult> {
  const answer = await broker.call<unknown, object>("bench.echo", roundTripPayload);
  let exact = JSON.stringify(answer) === JSON.stringify(roundTripPayload);
  let detail = exact ? "identical, key order included" : `differs: ${JSON.stringify(answer)}`;
  try {
    deepStrictEqual(answer, roundTripPayload);
  } catch (error) {
    exact = false;
    detail = (error as Error).message;
  }
  // The reason ids travel as strings: a bigint must be refused, never arrive rounded.
  const bigintRefused = await (async () => broker.call("bench.echo", { id: 9223372036854775807n }))().then(
    () => false,
    () => true,
  );
  return { exact, detail, bigintRefused };
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.env.BENCH_NODE ?? "") as NodeSpec;
  const broker = new ServiceBroker(brokerOptions({ nodeID: spec.nodeID, transporter: spec.transporter, logLevel: "warn" }));
  const finished = new Map<string, (latencies: number[]) => void>();
  let handled = 0;

  if (spec.role === "service" || spec.role === "joiner") {
    broker.createService({
      name: spec.role === "service" ? "bench" : "joiner",
      actions: {
        echo: (ctx: Context<unknown>) => {
          handled++;
          return ctx.params;
        },
        cpu: () => ({ ...process.cpuUsage(), handled }),
      },
    });
  }
  if (spec.role === "listener") {
    const latencies: number[] = [];
    broker.createService({
      name: `listen-${spec.nodeID}`,
      events: {
        "bench.fanOut"(ctx: Context<{ total: number; sentAt: number }>) {
          latencies.push(now() - ctx.params.sentAt);
          if (latencies.length === ctx.params.total) {
            void broker.broadcast("bench.fanOutDone", { nodeID: spec.nodeID, latencies: latencies.splice(0) });
          }
        },
      },
    });
  }
  if (spec.role === "caller") {
    broker.createService({
      name: "caller",
      events: {
        "bench.fanOutDone"(ctx: Context<{ nodeID: string; latencies: number[] }>) {
          finished.get(ctx.params.nodeID)?.(ctx.params.latencies);
        },
        "$node.connected"(ctx: Context<{ node: { id: string } }>) {
          report({ report: "nodeConnected", nodeID: ctx.params.node.id, at: now() });
        },
        "$node.disconnected"(ctx: Context<{ node: { id: string }; unexpected: boolean }>) {
          report({ report: "nodeDisconnected", nodeID: ctx.params.node.id, at: now(), unexpected: ctx.params.unexpected });
        },
      },
    });
    process.on("message", (message: CallerCommand) => {
      const work = async (): Promise<CallsResult | FanOutResult | RoundTripResult | undefined> => {
        switch (message.command) {
          case "roundTrip":
            return roundTrip(broker);
          case "calls":
            return calls(broker, message.concurrency, message.seconds);
          case "fanOut":
            return fanOut(broker, message.events, message.listeners, finished);
          case "stop":
            await broker.stop();
            process.exit(0);
        }
      };
      work().then(
        (result) => result && report({ report: "result", result }),
        (error: Error) => report({ report: "failed", message: error.stack ?? error.message }),
      );
    });
  } else {
    process.on("message", (message: CallerCommand) => {
      if (message.command === "stop") void broker.stop().then(() => process.exit(0));
    });
  }

  const startAt = now();
  await broker.start();
  if (spec.waitFor.length > 0) await broker.waitForServices(spec.waitFor, 30_000);
  report({ report: "started", nodeID: spec.nodeID, startAt });
}

main().catch((error: Error) => {
  report({ report: "failed", message: error.stack ?? error.message });
  process.exit(1);
});
