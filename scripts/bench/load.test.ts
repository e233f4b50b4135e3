// The benchmark's own bookkeeping: markers, pairing pushes with operations, the loops' counting.
// The loops run against an in-process workload whose "pushes" echo the request body's marker.
import { expect } from "chai";
import { spawn } from "node:child_process";
import { connect, createServer } from "node:net";
import { loopbackBytes, pidsListeningOn } from "./processes.js";
import { closedLoop, marker, markerIdAt, markerLength, markerOffset, median, openLoop, percentile, Tracker, writeMarker, type PushSink, type Workload } from "./load.js";

/** A workload whose every operation is pushed to `fanOut` sockets right after it is answered. */
function echoingWorkload(sink: PushSink, fanOut: number, options: { failLane?: number } = {}) {
  const sent: { id: number; lane: number }[] = [];
  const workload: Workload = {
    fanOut,
    echoSocket: () => 0,
    prepare: (id, lane) => {
      sent.push({ id, lane });
      return Buffer.from(`push:${marker(id)}:end`);
    },
    post: async (lane, body) => {
      if (lane === options.failLane) return false;
      setImmediate(() => {
        const frame = Buffer.from(body);
        const at = markerOffset(frame);
        for (let socket = 0; socket < fanOut; socket++) sink.tracker?.arrived(frame, at, markerIdAt(frame, at), socket, performance.now());
      });
      return true;
    },
  };
  return { workload, sent };
}

describe("benchmark load bookkeeping", () => {
  it("finds and rewrites an operation's marker inside a frame", () => {
    const frame = Buffer.from(`\x0a\x05before${marker(42)} after`, "latin1");
    const at = markerOffset(frame);
    expect(at).to.equal(8);
    expect(markerIdAt(frame, at)).to.equal(42);
    writeMarker(frame, at, 987654321);
    expect(markerIdAt(frame, at)).to.equal(987654321);
    expect(frame.toString("latin1", at + markerLength)).to.equal(" after");
    expect(markerOffset(Buffer.from("no marker here"))).to.equal(-1);
  });

  it("counts a push as a latency sample unless it reached the sender's own socket, and finishes an operation only when answered and fully pushed", async () => {
    const tracker = new Tracker(3);
    tracker.measuring = true;
    const id = tracker.nextId();
    let finished = false;
    const done = tracker.begin(id, 1, 100).then(() => (finished = true));
    const frame = Buffer.from(marker(id));
    for (const [socket, at] of [[0, 105], [1, 101], [2, 110]]) tracker.arrived(frame, 0, id, socket, at);
    await Promise.resolve();
    expect(finished, "pushed but not yet answered").to.equal(false);
    tracker.answer(id, true);
    await done;
    expect(tracker.deliveryLatencies).to.deep.equal([5, 10]);
    expect(tracker.messageLatencies).to.deep.equal([10]);
    expect(tracker).to.include({ completed: 1, deliveries: 3, measuredDeliveries: 3, lost: 0, errors: 0 });
  });

  it("ignores pushes of an earlier phase's operations", () => {
    const earlier = new Tracker(1);
    const old = earlier.nextId();
    const tracker = new Tracker(1);
    tracker.measuring = true;
    tracker.arrived(Buffer.from(marker(old)), 0, old, 0, 1);
    expect(tracker.deliveries).to.equal(0);
    expect(tracker.sample).to.equal(undefined);
  });

  it("counts the pushes of an operation given up as lost, and a refused request as an error", async () => {
    const tracker = new Tracker(2);
    tracker.measuring = true;
    const slow = tracker.nextId();
    const refused = tracker.nextId();
    const slowDone = tracker.begin(slow, -1, 0);
    const refusedDone = tracker.begin(refused, -1, 0);
    tracker.answer(slow, true);
    tracker.arrived(Buffer.from(marker(slow)), 0, slow, 0, 1);
    tracker.answer(refused, false);
    tracker.expire(1_000, 2_000);
    await Promise.all([slowDone, refusedDone]);
    expect(tracker).to.include({ completed: 0, errors: 1, lost: 1 });
    expect(tracker.pending).to.equal(0);
  });

  it("open loop: sends every scheduled operation once, in lane order, and measures only those after the warm-up", async () => {
    const sink: PushSink = { tracker: undefined };
    const { workload, sent } = echoingWorkload(sink, 2);
    const result = await openLoop(workload, 1000, { warmupMs: 20, measureMs: 50 }, [process.pid], sink);
    expect(sent.map((s) => s.lane)).to.deep.equal(Array.from({ length: 70 }, (_, i) => i));
    expect(result.window.operations).to.equal(50);
    expect(result.window.deliveries).to.equal(100);
    // Socket 0 is the sender's own: one latency sample per measured operation.
    expect(result.tracker.deliveryLatencies).to.have.length(50);
    expect(result.tracker.messageLatencies).to.have.length(50);
    expect(result.tracker).to.include({ errors: 0, lost: 0 });
    expect(sink.tracker).to.equal(undefined);
  });

  it("closed loop: keeps at most one operation in flight per lane, goes on past refusals and counts them", async () => {
    const sink: PushSink = { tracker: undefined };
    const { workload, sent } = echoingWorkload(sink, 2, { failLane: 2 });
    const result = await closedLoop(workload, 3, { warmupMs: 10, measureMs: 40 }, [process.pid], sink);
    expect(new Set(sent.map((s) => s.lane))).to.deep.equal(new Set([0, 1, 2]));
    expect(result.window.operations).to.be.greaterThan(0);
    expect(result.tracker.errors).to.be.greaterThan(0);
    expect(result.tracker.maxInFlight).to.be.at.most(3);
    expect(result.tracker.lost).to.equal(0);
    expect(result.tracker.sample?.frame.toString()).to.match(/^push:~bm\d{9}:end$/);
  });

  it("closed loop: measures each backing service's CPU over the window, apart from the server's", async () => {
    // A busy process stands for a backing service (Cassandra doing Paxos rounds), the test process for Parley.
    const busy = spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" });
    try {
      const sink: PushSink = { tracker: undefined };
      const { workload } = echoingWorkload(sink, 1);
      const result = await closedLoop(workload, 2, { warmupMs: 20, measureMs: 300 }, [process.pid], sink, { busy: [busy.pid!] });
      expect(Object.keys(result.window.backingCpuMs)).to.deep.equal(["busy"]);
      expect(result.window.backingCpuMs.busy).to.be.greaterThan(0);
    } finally {
      busy.kill("SIGKILL");
    }
  });

  it("finds the processes listening on a port, and none on a port nobody listens on", async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      expect(pidsListeningOn(port)).to.deep.equal([process.pid]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
    expect(pidsListeningOn(port)).to.deep.equal([]);
  });

  it("counts the bytes sent over loopback: a megabyte through a local socket moves the count by at least that", async () => {
    let received = 0;
    const server = createServer((socket) => socket.on("data", (chunk: Buffer) => (received += chunk.length)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const before = loopbackBytes();
    const socket = connect((server.address() as { port: number }).port, "127.0.0.1");
    socket.end(Buffer.alloc(2 ** 20));
    while (received < 2 ** 20) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(loopbackBytes() - before).to.be.at.least(2 ** 20);
    await new Promise((resolve) => server.close(resolve));
  });

  it("takes nearest-rank percentiles and medians that skip unknown figures", () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(percentile(values, 50)).to.equal(50);
    expect(percentile(values, 99)).to.equal(99);
    expect(Number.isNaN(percentile([], 99))).to.equal(true);
    expect(median([3, NaN, 1, 2])).to.equal(2);
    expect(Number.isNaN(median([NaN]))).to.equal(true);
  });
});
