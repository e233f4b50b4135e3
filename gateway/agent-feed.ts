// What an agent's WebSocket connection carries: the entries of its stream it has not had yet,
// then the live ones, with no gap and no repeat at the seam between the two.
//
// The connection is registered for live pushes before the first backlog page is read. While the
// backlog is replayed, live sequenced pushes are not sent; the feed only notes the highest sn it
// heard. When a read reaches the end of the stored stream and nothing newer was heard, the feed
// turns live in the same tick: every entry stored after that read is announced after it, so it
// arrives live. An entry heard during the replay but stored after the read that ended it makes
// the feed read again. Live, an sn at or below the last one sent is skipped and an sn beyond the
// next one (a push that overtook another) sends the feed back to the store from where it is.
//
// The delivered position (where the next connection starts) covers only frames the agent
// confirmed. A write that completed only means the kernel took the bytes: when the agent's
// network dies, the socket stays open until the idle timeout, and everything written meanwhile,
// plus what sits in the send buffer, would count as delivered and never be replayed. The protocol
// has no acknowledgement, so the agent's heartbeat stands in for one: any frame from the agent
// that arrives after a write completed confirms that write. Its arrival shows the agent's end of
// the connection was alive after our bytes were on their way, and TCP hands bytes over in order
// or not at all, so they reach the agent unless the connection dies within about one round trip
// of that ping: the only window left for a loss. Agents ping every 30 s, so a connection that
// dies replays what it carried since the last ping, received or not; delivery is at least once,
// and agents drop an sn they have already seen. Confirmed positions are recorded in batches, and
// on close only what was confirmed (a close, clean or not, confirms nothing by itself).
// Ephemeral pushes go straight through and are never replayed.
//
// While the agent is in WEBHOOK mode its sequenced entries go to the webhook and the socket
// carries none of them: the inbox marks each live push whose entry it queued for the webhook
// (`toWebhook`), and a backlog read says so too. A switch of the delivery mode moves the agent's
// entries from one route to the other with nothing sent twice that the socket delivered:
// - into WEBHOOK mode, before the new mode is written, the engine parks the agent's feeds: they
//   stop sending, ask the agent for a receipt of what they sent (a WebSocket ping: its pong
//   confirms everything written before it) and answer the confirmed position, from which the
//   webhook takes over; the release then tells them through which sn the webhook took it;
// - out of it, the feeds start again from the delivered position, which the switch moved back to
//   before what the webhook had not delivered.
// What remains at least once: entries the socket was sent but the agent did not confirm within
// AgentFeedPolicy.receiptWaitMs (a socket that died mid-write, or an agent too slow to answer a
// ping), which the webhook sends again; and a switch whose park or release a gateway never got
// (it died meanwhile), whose parked feeds read the mode again after parkTimeoutMs.
import type { JsonObject } from "@bufbuild/protobuf";
import type { AgentBacklog, AgentBacklogParams, FeedRelease, MarkDeliveredParams } from "../shared/agent-delivery.js";
import { nextPushId, UpdateFrame, type PushFrame } from "./frame-codec.js";

export interface AgentFeedPort {
  backlog(params: AgentBacklogParams): Promise<AgentBacklog>;
  markDelivered(params: MarkDeliveredParams): Promise<void>;
}

/** The connection as the feed sees it. */
export interface FeedSink {
  /** Whether more can be queued without nearing the slow-consumer limit. */
  readonly hasRoom: boolean;
  /** Queues a push frame; `onWritten` runs when the socket handed it to the network. */
  writePush(frame: PushFrame, onWritten: () => void): void;
  /** Asks the agent's end to show it read everything queued so far; its answer reaches agentHeard(). */
  askForReceipt(): void;
}

export interface AgentFeedPolicy {
  /** Entries per backlog read. */
  pageSize: number;
  /** How long confirmed positions are gathered before the delivered position is recorded. */
  recordDelayMs: number;
  /** How long parking for a mode switch waits for the agent to confirm what was sent to it. */
  receiptWaitMs: number;
}

export const defaultAgentFeedPolicy: AgentFeedPolicy = { pageSize: 100, recordDelayMs: 200, receiptWaitMs: 2_000 };

export interface AgentFeedHooks {
  /** The backlog could not be read: the connection cannot promise order any more. */
  replayFailed(err: unknown): void;
  /** The delivered position could not be recorded (the next connection repeats some entries). */
  recordFailed(err: unknown): void;
}

export class AgentFeed {
  /** True from construction until the first replay ends, and during any later one. */
  private replaying = true;
  /** Highest sn queued on the socket (or, in WEBHOOK mode, taken by the webhook). */
  private lastSent = 0;
  /** Whether the first read set the positions from the delivered position. */
  private hasBaseline = false;
  /** Highest live sn heard while replaying. */
  private heard = 0;
  /** Highest sn the socket handed to the network, the highest the agent confirmed, the highest recorded. */
  private written = 0;
  private confirmed = 0;
  private recorded = 0;
  /** The agent's entries go to its webhook: the socket carries none. */
  private toWebhook = false;
  /** A mode switch is under way: nothing sequenced is sent until it is released. */
  private parked = false;
  /** Counts replays: a read of an older one (cut short by a park or a newer replay) sends nothing. */
  private generation = 0;
  private readonly receiptWaiters = new Set<() => void>();
  private recordTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly stoppedSignal: Promise<void>;
  private signalStopped!: () => void;

  constructor(
    private readonly agentUserId: number,
    private readonly sink: FeedSink,
    private readonly port: AgentFeedPort,
    private readonly hooks: AgentFeedHooks,
    private readonly policy: AgentFeedPolicy = defaultAgentFeedPolicy,
  ) {
    this.stoppedSignal = new Promise((resolve) => (this.signalStopped = resolve));
  }

  /** Replays what the agent has not had, from its delivered position, then goes live. */
  start(): void {
    this.replay(undefined);
  }

  /** A sequenced push for this agent; `toWebhook`: its entry went to the agent's webhook queue. */
  live(frame: PushFrame, sn: number, toWebhook = false): void {
    if (this.stopped || this.parked) return;
    if (toWebhook) {
      this.toWebhook = true;
      this.lastSent = Math.max(this.lastSent, sn);
      return;
    }
    if (this.replaying) {
      this.heard = Math.max(this.heard, sn);
      return;
    }
    if (sn <= this.lastSent) return;
    if (this.toWebhook) {
      // The agent left WEBHOOK mode (a switch this gateway was not told of): the socket carries
      // its entries again from the delivered position, which the switch moved back.
      this.toWebhook = false;
      this.heard = sn;
      this.replaying = true;
      this.replay(undefined);
      return;
    }
    if (sn > this.lastSent + 1) {
      this.heard = sn;
      this.replaying = true;
      this.replay(this.lastSent);
      return;
    }
    void this.send(frame, sn);
  }

  /** A frame from the agent arrived: every write completed before it counts as received. */
  agentHeard(): void {
    if (this.stopped || this.written <= this.confirmed) return;
    this.confirmed = this.written;
    for (const wake of this.receiptWaiters) wake();
    this.scheduleRecord();
  }

  /**
   * A switch into WEBHOOK mode is about to be written: stops sending, waits (at most
   * receiptWaitMs) for the agent to confirm what was sent, records it, and answers the confirmed
   * position. Idempotent.
   */
  async park(): Promise<number> {
    if (this.stopped) return this.confirmed;
    this.parked = true;
    // A replay under way stops at its next step.
    this.generation += 1;
    const target = this.lastSent;
    if (!this.toWebhook && target > this.confirmed) {
      this.sink.askForReceipt();
      await new Promise<void>((resolve) => {
        const done = () => {
          if (!this.stopped && this.confirmed < target) return;
          clearTimeout(timer);
          this.receiptWaiters.delete(done);
          resolve();
        };
        const timer = setTimeout(() => {
          this.receiptWaiters.delete(done);
          resolve();
        }, this.policy.receiptWaitMs);
        this.receiptWaiters.add(done);
        void this.stoppedSignal.then(done);
      });
    }
    this.record();
    return this.confirmed;
  }

  /** How the switch ended: the webhook took the entries through `through`, or the socket carries them again. */
  release(outcome: FeedRelease): void {
    if (this.stopped) return;
    const wasParked = this.parked;
    this.parked = false;
    if (outcome.toWebhook) {
      this.toWebhook = true;
      this.replaying = false;
      this.generation += 1;
      this.lastSent = Math.max(this.lastSent, outcome.through);
      return;
    }
    if (!wasParked && !this.toWebhook) return;
    // From what this socket was sent when the switch did not happen; from the delivered position
    // when the agent leaves WEBHOOK mode (or the first read had not answered yet).
    const from = this.toWebhook || !this.hasBaseline ? undefined : this.lastSent;
    this.toWebhook = false;
    this.replaying = true;
    this.replay(from);
  }

  /** The connection closed: records how far the agent confirmed. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.signalStopped();
    this.record();
  }

  private replay(from: number | undefined): void {
    const generation = ++this.generation;
    this.readBacklog(from, generation).catch((err: unknown) => {
      if (generation !== this.generation) return;
      this.replaying = false;
      if (!this.stopped) this.hooks.replayFailed(err);
    });
  }

  /** Whether a replay must stop: the socket is gone, a switch parked the feed, or a newer replay began. */
  private cutShort(generation: number): boolean {
    return this.stopped || this.parked || generation !== this.generation;
  }

  private async readBacklog(from: number | undefined, generation: number): Promise<void> {
    let afterSn = from;
    for (;;) {
      const page = await this.port.backlog({ userId: this.agentUserId, afterSn, limit: this.policy.pageSize });
      if (this.stopped || generation !== this.generation) return;
      if (afterSn === undefined) {
        // A read from the delivered position: everything up to it was had.
        this.written = this.confirmed = this.recorded = page.afterSn;
        // A push queued for the webhook may have come first (the switch raced the read): its sn stays.
        this.lastSent = this.toWebhook ? Math.max(this.lastSent, page.afterSn) : page.afterSn;
        this.hasBaseline = true;
      }
      if (this.parked) return;
      if (page.byWebhook) {
        this.toWebhook = true;
        this.lastSent = Math.max(this.lastSent, page.afterSn);
        this.replaying = false;
        return;
      }
      afterSn = page.afterSn;
      let lastWrite: Promise<void> | undefined;
      for (const update of page.updates) {
        const sn = update.snUpdate?.sn ?? 0;
        afterSn = Math.max(afterSn, sn);
        if (sn <= this.lastSent) continue;
        // Backpressure: a backlog of large entries (cards, long markdown) must not look like a
        // slow reader, so the replay lets the socket drain before it queues more.
        if (lastWrite && !this.sink.hasRoom) await Promise.race([lastWrite, this.stoppedSignal]);
        if (this.cutShort(generation) || this.toWebhook) return;
        lastWrite = this.send(new UpdateFrame(nextPushId(), update as JsonObject), sn);
      }
      // The next page is read once this one is on the network (or the socket is gone).
      if (lastWrite) await Promise.race([lastWrite, this.stoppedSignal]);
      if (this.cutShort(generation)) return;
      if (this.toWebhook) {
        // A push the inbox queued for the webhook arrived meanwhile: the webhook has the rest.
        this.replaying = false;
        return;
      }
      if (!page.hasMore && this.heard <= afterSn) {
        // Turning live here, in the tick of the check, leaves no moment for a push to fall between.
        this.replaying = false;
        return;
      }
    }
  }

  private send(frame: PushFrame, sn: number): Promise<void> {
    this.lastSent = sn;
    return new Promise((resolve) =>
      this.sink.writePush(frame, () => {
        this.written = Math.max(this.written, sn);
        resolve();
      }),
    );
  }

  private scheduleRecord(): void {
    this.recordTimer ??= setTimeout(() => this.record(), this.policy.recordDelayMs);
  }

  private record(): void {
    clearTimeout(this.recordTimer);
    this.recordTimer = undefined;
    if (this.confirmed <= this.recorded) return;
    this.recorded = this.confirmed;
    this.port.markDelivered({ userId: this.agentUserId, sn: this.recorded }).catch((err: unknown) => this.hooks.recordFailed(err));
  }
}
