// Load generation: a closed loop (a fixed number of operations in flight, each waiting for its
// answer and every push it causes) and an open loop (operations sent on a fixed schedule whatever
// the answers), both measuring server CPU, client CPU and push arrivals in a window after a warm-up.
//
// Every operation carries a marker (`~bm` and nine digits) in the text it sends; each push is
// recognised by finding the marker in its raw bytes, so receiving costs the client a byte search,
// not a protobuf decode.
import { loopbackBytes, processCpuMs, type BackingPids } from "./processes.js";

const markerPrefix = Buffer.from("~bm");
const markerDigits = 9;
export const markerLength = markerPrefix.length + markerDigits;

/** The marker text of operation `id`. */
export const marker = (id: number) => `~bm${String(id).padStart(markerDigits, "0")}`;

/** Where the marker starts in `data`, or -1. */
export const markerOffset = (data: Buffer) => data.indexOf(markerPrefix);

export function markerIdAt(data: Buffer, offset: number): number {
  let id = 0;
  for (let i = offset + markerPrefix.length; i < offset + markerLength; i++) id = id * 10 + data[i] - 48;
  return id;
}

/** Writes the marker of `id` over the marker at `offset` (same width, so the bytes around it stay valid). */
export function writeMarker(data: Buffer, offset: number, id: number): void {
  data.write(marker(id), offset, "latin1");
}

let lastOperationId = 0;

interface Operation {
  sentAt: number;
  /** Pushes still expected. */
  pending: number;
  answered: boolean;
  /** The sender's own socket: its push is counted as a delivery but is no latency sample. */
  echoSocket: number;
  measured: boolean;
  lastArrival: number;
  done: (ok: boolean) => void;
}

/**
 * Pairs pushes with the operations that caused them. One tracker per phase; pushes of an earlier
 * phase that arrive late are ignored.
 */
export class Tracker {
  private readonly inFlight = new Map<number, Operation>();
  readonly firstId = lastOperationId + 1;
  measuring = false;
  /** Operations finished and pushes received while `measuring` (the closed loop's window). */
  completed = 0;
  deliveries = 0;
  /** Pushes received for operations sent while `measuring` (the open loop's window), whenever they arrive. */
  measuredDeliveries = 0;
  errors = 0;
  lost = 0;
  maxInFlight = 0;
  readonly deliveryLatencies: number[] = [];
  readonly messageLatencies: number[] = [];
  /** A copy of the first push seen, so a baseline can move exactly the same bytes. */
  sample: { frame: Buffer; markerAt: number } | undefined;

  constructor(readonly fanOut: number) {}

  nextId(): number {
    return ++lastOperationId;
  }

  /** Registers an operation just sent; resolves once it is answered and all its pushes arrived (true) or it failed or was given up (false). */
  begin(id: number, echoSocket: number, sentAt: number): Promise<boolean> {
    return new Promise((done) => {
      this.inFlight.set(id, { sentAt, pending: this.fanOut, answered: false, echoSocket, measured: this.measuring, lastArrival: sentAt, done });
      if (this.inFlight.size > this.maxInFlight) this.maxInFlight = this.inFlight.size;
    });
  }

  answer(id: number, ok: boolean): void {
    const op = this.inFlight.get(id);
    if (!op) return;
    op.answered = true;
    if (!ok) {
      this.errors += 1;
      this.finish(id, op, "refused");
    } else if (op.pending <= 0) this.finish(id, op, "done");
  }

  /** A push carrying `id` reached socket `socket`. */
  arrived(data: Buffer, markerAt: number, id: number, socket: number, at: number): void {
    if (id < this.firstId) return;
    const op = this.inFlight.get(id);
    if (!op) return;
    this.sample ??= { frame: Buffer.from(data), markerAt };
    op.pending -= 1;
    if (this.measuring) this.deliveries += 1;
    if (op.measured) {
      this.measuredDeliveries += 1;
      if (socket !== op.echoSocket) {
        this.deliveryLatencies.push(at - op.sentAt);
        if (at > op.lastArrival) op.lastArrival = at;
      }
    }
    if (op.pending <= 0 && op.answered) this.finish(id, op, "done");
  }

  private finish(id: number, op: Operation, outcome: "done" | "refused" | "given up"): void {
    this.inFlight.delete(id);
    if (outcome === "done" && this.measuring) this.completed += 1;
    if (op.measured) {
      if (outcome === "given up") this.lost += Math.max(op.pending, 0);
      else if (outcome === "done" && this.fanOut > 0) this.messageLatencies.push(op.lastArrival - op.sentAt);
    }
    op.done(outcome === "done");
  }

  /** Gives up on operations sent more than `ageMs` ago: their missing pushes count as lost. */
  expire(ageMs: number, now = performance.now()): void {
    for (const [id, op] of this.inFlight) if (now - op.sentAt > ageMs) this.finish(id, op, "given up");
  }

  get pending(): number {
    return this.inFlight.size;
  }
}

/** What one load phase drives: a request (or relay message) per operation, prepared ahead where it can be. */
export interface Workload {
  /** Sockets each operation's push reaches (0 for a plain request). */
  fanOut: number;
  /** The request body of operation `id` on `lane` (lanes keep order: one stream, one sender). */
  prepare(id: number, lane: number): Uint8Array;
  /** Sends it; resolves whether it was accepted. */
  post(lane: number, body: Uint8Array): Promise<boolean>;
  /** The socket of the lane's sender, whose own push is not a latency sample; -1 when none. */
  echoSocket(lane: number): number;
}

interface Snapshot {
  at: number;
  wallClockMs: number;
  serverCpuMs: number;
  backingCpuMs: Record<string, number>;
  clientCpuMs: number;
  loopbackBytes: number;
  completed: number;
  deliveries: number;
}

function snapshot(tracker: Tracker, pids: number[], backing: BackingPids): Snapshot {
  const { user, system } = process.cpuUsage();
  const backingCpuMs = Object.fromEntries(Object.entries(backing).map(([name, servicePids]) => [name, processCpuMs(servicePids)]));
  return { at: performance.now(), wallClockMs: Date.now(), serverCpuMs: processCpuMs(pids), backingCpuMs, clientCpuMs: (user + system) / 1000, loopbackBytes: loopbackBytes(), completed: tracker.completed, deliveries: tracker.deliveries };
}

export interface WindowFigures {
  seconds: number;
  /** The window's bounds by Date.now(), the clock of events other code stamps (the push providers' arrivals). */
  startedAtMs: number;
  endedAtMs: number;
  operations: number;
  deliveries: number;
  serverCpuMs: number;
  /** CPU of each backing service over the window (a service's own work for Parley: Cassandra's Paxos rounds, say). */
  backingCpuMs: Record<string, number>;
  clientCpuMs: number;
  /** Bytes over loopback in the window: every hop of every process here, the client's requests and pushes included. */
  loopbackBytes: number;
}

function windowOf(start: Snapshot, end: Snapshot, operations = end.completed - start.completed): WindowFigures {
  return {
    seconds: (end.at - start.at) / 1000,
    startedAtMs: start.wallClockMs,
    endedAtMs: end.wallClockMs,
    operations,
    deliveries: end.deliveries - start.deliveries,
    serverCpuMs: end.serverCpuMs - start.serverCpuMs,
    backingCpuMs: Object.fromEntries(Object.entries(end.backingCpuMs).map(([name, ms]) => [name, ms - start.backingCpuMs[name]])),
    clientCpuMs: end.clientCpuMs - start.clientCpuMs,
    loopbackBytes: end.loopbackBytes - start.loopbackBytes,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** An operation with nothing back after this long is given up (its pushes count as lost). */
const giveUpMs = 10_000;
/** After an open loop's last send, how long the stragglers may take. */
const drainMs = 5_000;

export interface Timing {
  warmupMs: number;
  measureMs: number;
}

/** Where pushes go: the tracker of the phase under way, none between phases. */
export interface PushSink {
  tracker: Tracker | undefined;
}

/** `concurrency` lanes, each sending its next operation once the previous one is answered and fully pushed. */
export async function closedLoop(workload: Workload, concurrency: number, timing: Timing, pids: number[], sink: PushSink, backing: BackingPids = {}) {
  const tracker = new Tracker(workload.fanOut);
  sink.tracker = tracker;
  let stopped = false;
  const lanes = Array.from({ length: concurrency }, async (_, lane) => {
    while (!stopped) {
      const id = tracker.nextId();
      const body = workload.prepare(id, lane);
      const done = tracker.begin(id, workload.echoSocket(lane), performance.now());
      workload.post(lane, body).then((ok) => tracker.answer(id, ok), () => tracker.answer(id, false));
      // A lane whose requests fail at once would otherwise run on microtasks alone and starve the timers.
      if (!(await done)) await new Promise((r) => setImmediate(r));
    }
  });
  const sweeper = setInterval(() => tracker.expire(giveUpMs), 1000);
  await sleep(timing.warmupMs);
  tracker.measuring = true;
  const start = snapshot(tracker, pids, backing);
  await sleep(timing.measureMs);
  const end = snapshot(tracker, pids, backing);
  tracker.measuring = false;
  stopped = true;
  await Promise.race([Promise.all(lanes), sleep(drainMs)]);
  tracker.expire(0);
  clearInterval(sweeper);
  await Promise.all(lanes);
  sink.tracker = undefined;
  return { tracker, window: windowOf(start, end) };
}

/** A send is late when the scheduler issued it this long after its slot (the client fell behind). */
const lateMs = 2;

/**
 * Sends `rate` operations per second on a fixed schedule, whatever the answers: a slow answer
 * never delays the next send. Bodies are prepared before the clock starts.
 */
export async function openLoop(workload: Workload, rate: number, timing: Timing, pids: number[], sink: PushSink) {
  const tracker = new Tracker(workload.fanOut);
  sink.tracker = tracker;
  const warmupSends = Math.round((rate * timing.warmupMs) / 1000);
  const total = warmupSends + Math.round((rate * timing.measureMs) / 1000);
  const ids = Array.from({ length: total }, () => tracker.nextId());
  const bodies = ids.map((id, lane) => workload.prepare(id, lane));
  const interval = 1000 / rate;
  let late = 0;
  let maxLateMs = 0;
  let start: Snapshot | undefined;
  let end: Snapshot | undefined;
  const outstanding: Promise<boolean>[] = [];
  const began = performance.now();
  await new Promise<void>((finished) => {
    let next = 0;
    const tick = () => {
      const now = performance.now();
      while (next < total && began + next * interval <= now) {
        if (next === warmupSends) {
          tracker.measuring = true;
          start = snapshot(tracker, pids, {});
        }
        const slot = began + next * interval;
        if (tracker.measuring && now - slot > lateMs) {
          late += 1;
          maxLateMs = Math.max(maxLateMs, now - slot);
        }
        const id = ids[next];
        // Latency runs from the moment the request leaves the scheduler.
        outstanding.push(tracker.begin(id, workload.echoSocket(next), performance.now()));
        workload.post(next, bodies[next]).then((ok) => tracker.answer(id, ok), () => tracker.answer(id, false));
        next += 1;
      }
      if (next < total) setTimeout(tick, 1);
      else {
        // The window closes when the last send's slot is over, so it holds exactly the measured sends.
        setTimeout(() => {
          end = snapshot(tracker, pids, {});
          finished();
        }, Math.max(0, began + total * interval - performance.now()));
      }
    };
    tick();
  });
  tracker.measuring = false;
  const sweeper = setInterval(() => tracker.expire(giveUpMs), 1000);
  await Promise.race([Promise.all(outstanding), sleep(drainMs)]);
  clearInterval(sweeper);
  tracker.expire(0);
  sink.tracker = undefined;
  start ??= end!;
  const window = { ...windowOf(start, end!, total - warmupSends), deliveries: tracker.measuredDeliveries };
  return { tracker, window, late, maxLateMs, offeredRate: rate, sentRate: window.operations / window.seconds };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

export function median(values: number[]): number {
  const known = values.filter((v) => !Number.isNaN(v));
  return known.length ? percentile(known, 50) : NaN;
}
