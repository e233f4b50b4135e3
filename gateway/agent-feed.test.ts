// The seam between an agent's backlog replay and its live pushes, with the timing under the
// test's control: when a backlog read answers, when a live push arrives, when a write completes.
import { expect } from "chai";
import type { JsonObject } from "@bufbuild/protobuf";
import type { AgentBacklogParams } from "../shared/agent-delivery.js";
import { AgentFeed, type AgentFeedPolicy, type FeedSink } from "./agent-feed.js";
import { UpdateFrame, type PushFrame } from "./frame-codec.js";

const update = (sn: number): JsonObject => ({ snUpdate: { sn, contactAdded: { peerUserId: sn } } });
const frame = (sn: number) => new UpdateFrame(-BigInt(sn), update(sn));
const snOf = (pushed: PushFrame) => (JSON.parse(pushed.encoded("json") as string) as { update: { snUpdate: { sn: number } } }).update.snUpdate.sn;
const settle = () => new Promise((resolve) => setTimeout(resolve, 5));

/** An agent's stored stream, a socket and the engine actions, all in memory. */
class Harness implements FeedSink {
  hasRoom = true;
  stream: number[] = [];
  delivered = 0;
  readonly reads: AgentBacklogParams[] = [];
  readonly written: number[] = [];
  readonly recorded: number[] = [];
  readonly failures: unknown[] = [];
  /** Backlog answers wait for release() while held. */
  hold = false;
  /** The agent is in WEBHOOK mode: backlog reads say so and carry no entries. */
  byWebhook = false;
  /** Receipts asked for (WebSocket pings). */
  receiptsAsked = 0;
  /** Whether the agent answers a receipt request (its pong arrives a tick later). */
  answersReceipts = true;
  /** Writes complete only on completeWrites() while manual. */
  manualWrites = false;
  private held: (() => void)[] = [];
  private pendingWrites: (() => void)[] = [];
  readonly feed: AgentFeed;

  constructor(policy: AgentFeedPolicy = { pageSize: 100, recordDelayMs: 1, receiptWaitMs: 50 }, failReads = false) {
    this.feed = new AgentFeed(
      7,
      this,
      {
        backlog: async (params) => {
          this.reads.push(params);
          if (failReads) throw new Error("store down");
          if (this.byWebhook) return { afterSn: this.delivered, updates: [], hasMore: false, byWebhook: true };
          const afterSn = params.afterSn ?? this.delivered;
          // The read sees the stream as it is now; its answer may arrive later.
          const after = this.stream.filter((sn) => sn > afterSn);
          const page = after.slice(0, params.limit);
          if (this.hold) await new Promise<void>((resolve) => this.held.push(resolve));
          return { afterSn, updates: page.map(update), hasMore: after.length > page.length };
        },
        markDelivered: async ({ sn }) => {
          this.recorded.push(sn);
        },
      },
      { replayFailed: (err) => this.failures.push(err), recordFailed: (err) => this.failures.push(err) },
      policy,
    );
  }

  writePush(pushed: PushFrame, onWritten: () => void): void {
    this.written.push(snOf(pushed));
    if (this.manualWrites) this.pendingWrites.push(onWritten);
    else queueMicrotask(onWritten);
  }

  askForReceipt(): void {
    this.receiptsAsked += 1;
    if (this.answersReceipts) setTimeout(() => this.feed.agentHeard(), 1);
  }

  completeWrites(): void {
    for (const done of this.pendingWrites.splice(0)) done();
  }

  release(): void {
    for (const go of this.held.splice(0)) go();
  }

  /** An entry stored and then pushed live, as the inbox does; `toWebhook`: queued for the agent's webhook. */
  append(sn: number, toWebhook = false): void {
    this.stream.push(sn);
    this.feed.live(frame(sn), sn, toWebhook);
  }
}

describe("AgentFeed", () => {
  it("replays after the delivered position, then carries live pushes", async () => {
    const h = new Harness();
    h.stream = [1, 2, 3, 4];
    h.delivered = 2;
    h.feed.start();
    await settle();
    h.append(5);
    await settle();
    expect(h.written).to.deep.equal([3, 4, 5]);
    expect(h.reads[0].afterSn).to.equal(undefined);
  });

  it("reads again for entries announced during the replay but stored after its read, sending each once and in order", async () => {
    const h = new Harness();
    h.stream = [1, 2, 3];
    h.hold = true;
    h.feed.start();
    await settle();
    // The read saw 1..3; 4 and 5 are stored and announced before its answer arrives.
    h.append(4);
    h.append(5);
    h.hold = false;
    h.release();
    await settle();
    h.append(6);
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3, 4, 5, 6]);
    expect(h.reads.map((r) => r.afterSn)).to.deep.equal([undefined, 3]);
  });

  it("does not repeat an entry that was both in the replay and announced live", async () => {
    const h = new Harness();
    h.stream = [1, 2];
    h.hold = true;
    h.feed.start();
    await settle();
    // Stored before the read took its view (so it is in the page), announced while the answer travels.
    h.feed.live(frame(2), 2);
    h.release();
    await settle();
    h.feed.live(frame(2), 2);
    h.append(3);
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3]);
    expect(h.reads).to.have.length(1);
  });

  it("goes back to the store when a live push skips ahead of the next sn", async () => {
    const h = new Harness();
    h.feed.start();
    await settle();
    h.append(1);
    h.stream.push(2); // stored, its push not (yet) here
    h.append(3);
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3]);
    expect(h.reads.map((r) => r.afterSn)).to.deep.equal([undefined, 1]);
  });

  it("reads the next page only after the previous one is on the network", async () => {
    const h = new Harness({ pageSize: 2, recordDelayMs: 1, receiptWaitMs: 50 });
    h.stream = [1, 2, 3, 4, 5];
    h.manualWrites = true;
    h.feed.start();
    await settle();
    expect(h.written).to.deep.equal([1, 2]);
    expect(h.reads).to.have.length(1);
    h.completeWrites();
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3, 4]);
    h.completeWrites();
    await settle();
    h.completeWrites();
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3, 4, 5]);
    expect(h.reads.map((r) => r.afterSn)).to.deep.equal([undefined, 2, 4]);
  });

  it("waits for the socket to drain within a page when its buffer fills", async () => {
    const h = new Harness();
    h.stream = [1, 2, 3];
    h.manualWrites = true;
    h.hasRoom = false;
    h.feed.start();
    await settle();
    expect(h.written).to.deep.equal([1]);
    h.hasRoom = true;
    h.completeWrites();
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3]);
  });

  it("records only positions the agent confirmed: writes completed before a frame from it, in batches and when the connection closes", async () => {
    const h = new Harness({ pageSize: 100, recordDelayMs: 10_000, receiptWaitMs: 50 });
    h.feed.start();
    await settle();
    h.manualWrites = true;
    h.append(1);
    h.append(2);
    h.completeWrites();
    h.append(3);
    await settle();
    // The agent is heard while 3 is still being written: 1 and 2 are confirmed, 3 is not, even
    // once its write completes.
    h.feed.agentHeard();
    h.completeWrites();
    await settle();
    // Within the batching delay nothing is recorded; closing records what was confirmed.
    expect(h.recorded).to.deep.equal([]);
    h.feed.stop();
    await settle();
    expect(h.recorded).to.deep.equal([2]);
    // Once stopped, neither pushes nor frames from the agent move anything.
    h.feed.live(frame(4), 4);
    h.feed.agentHeard();
    h.feed.stop();
    await settle();
    expect(h.written).to.deep.equal([1, 2, 3]);
    expect(h.recorded).to.deep.equal([2]);
  });

  it("records nothing on close when the agent was never heard after its writes", async () => {
    const h = new Harness({ pageSize: 100, recordDelayMs: 1, receiptWaitMs: 50 });
    h.stream = [1, 2, 3];
    h.delivered = 1;
    // Heard before anything was written: confirms only the position the connection started from.
    h.feed.agentHeard();
    h.feed.start();
    await settle();
    h.append(4);
    await settle();
    expect(h.written).to.deep.equal([2, 3, 4]);
    h.feed.stop();
    await settle();
    expect(h.recorded).to.deep.equal([]);
  });

  it("records a confirmation after the batching delay, once per batch, without waiting for the close", async () => {
    const h = new Harness({ pageSize: 100, recordDelayMs: 20, receiptWaitMs: 50 });
    h.feed.start();
    await settle();
    h.append(1);
    await settle();
    h.feed.agentHeard();
    h.append(2);
    await settle();
    h.feed.agentHeard();
    // Heard again with nothing new written: no further record is due.
    h.feed.agentHeard();
    // Past the batching delay (timers fire in order of their deadlines).
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(h.recorded).to.deep.equal([2]);
    h.append(3);
    await settle();
    h.feed.agentHeard();
    h.feed.stop();
    await settle();
    expect(h.recorded).to.deep.equal([2, 3]);
  });

  it("reports a backlog that cannot be read", async () => {
    const h = new Harness(undefined, true);
    h.feed.start();
    await settle();
    expect(h.failures.map(String)).to.deep.equal(["Error: store down"]);
    expect(h.written).to.deep.equal([]);
  });

  describe("across a delivery mode switch", () => {
    it("parks: sends nothing more, asks for a receipt, answers and records what the agent confirmed; released into WEBHOOK mode it carries nothing the webhook took", async () => {
      const h = new Harness();
      h.feed.start();
      await settle();
      h.append(1);
      h.append(2);
      await settle();
      const parked = h.feed.park();
      // Appended while the switch is under way, before the new mode is written: the webhook takes it.
      h.append(3);
      expect(await parked).to.equal(2);
      expect(h.receiptsAsked).to.equal(1);
      expect(h.recorded).to.deep.equal([2]);
      h.feed.release({ toWebhook: true, through: 3 });
      // In flight from before the switch: already the webhook's.
      h.feed.live(frame(3), 3);
      h.append(4, true);
      h.append(5, true);
      await settle();
      expect(h.written).to.deep.equal([1, 2]);
      expect(h.reads).to.have.length(1);
    });

    it("answers only what was confirmed before when the agent does not answer the receipt in time (the webhook repeats the rest)", async () => {
      const h = new Harness();
      h.answersReceipts = false;
      h.feed.start();
      await settle();
      h.append(1);
      await settle();
      h.feed.agentHeard();
      h.append(2);
      await settle();
      expect(await h.feed.park()).to.equal(1);
    });

    it("asks for no receipt when everything sent was confirmed already", async () => {
      const h = new Harness();
      h.stream = [1, 2];
      h.delivered = 2;
      h.feed.start();
      await settle();
      expect(await h.feed.park()).to.equal(2);
      expect(h.receiptsAsked).to.equal(0);
    });

    it("goes on from what it sent when the switch was not made, repeating and skipping nothing", async () => {
      const h = new Harness();
      h.feed.start();
      await settle();
      h.append(1);
      await settle();
      const parked = h.feed.park();
      h.append(2);
      await parked;
      h.feed.release({ toWebhook: false });
      await settle();
      h.append(3);
      await settle();
      expect(h.written).to.deep.equal([1, 2, 3]);
    });

    it("stops a replay under way when parked, and finishes it after a release without a switch", async () => {
      const h = new Harness({ pageSize: 2, recordDelayMs: 1, receiptWaitMs: 50 });
      h.stream = [1, 2, 3, 4];
      h.manualWrites = true;
      h.feed.start();
      await settle();
      expect(h.written).to.deep.equal([1, 2]);
      const parked = h.feed.park();
      h.completeWrites();
      await parked;
      await settle();
      expect(h.written).to.deep.equal([1, 2]);
      h.manualWrites = false;
      h.feed.release({ toWebhook: false });
      await settle();
      expect(h.written).to.deep.equal([1, 2, 3, 4]);
    });

    it("carries no entry the inbox queued for the webhook, and after the agent leaves WEBHOOK mode replays from the delivered position", async () => {
      const h = new Harness();
      h.feed.start();
      await settle();
      h.append(1);
      await settle();
      // A switch this gateway was not told of: the inbox marks what went to the webhook.
      h.append(2, true);
      h.append(3, true);
      await settle();
      expect(h.written).to.deep.equal([1]);
      // Back in WEBSOCKET mode: the switch moved the delivered position to before what the webhook had not delivered (3).
      h.delivered = 2;
      h.append(4);
      await settle();
      h.append(5);
      await settle();
      expect(h.written).to.deep.equal([1, 3, 4, 5]);
    });

    it("starts a connection of a WEBHOOK-mode agent with nothing to carry, and carries again once released out of it", async () => {
      const h = new Harness();
      h.stream = [1, 2, 3];
      h.delivered = 3;
      h.byWebhook = true;
      h.feed.start();
      await settle();
      h.append(4, true);
      await settle();
      expect(h.written).to.deep.equal([]);
      // The agent leaves WEBHOOK mode with 4 undelivered by the webhook.
      h.byWebhook = false;
      h.feed.release({ toWebhook: false });
      await settle();
      h.append(5);
      await settle();
      expect(h.written).to.deep.equal([4, 5]);
    });
  });
});
