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
import type { JsonObject } from "@bufbuild/protobuf";
import type { AgentBacklog, AgentBacklogParams, MarkDeliveredParams } from "../shared/agent-delivery.js";
import { nextPushId } from "./connection.js";
import { UpdateFrame, type PushFrame } from "./frame-codec.js";

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
}

export interface AgentFeedPolicy {
  /** Entries per backlog read. */
  pageSize: number;
  /** How long confirmed positions are gathered before the delivered position is recorded. */
  recordDelayMs: number;
}

export const defaultAgentFeedPolicy: AgentFeedPolicy = { pageSize: 100, recordDelayMs: 200 };

export interface AgentFeedHooks {
  /** The backlog could not be read: the connection cannot promise order any more. */
  replayFailed(err: unknown): void;
  /** The delivered position could not be recorded (the next connection repeats some entries). */
  recordFailed(err: unknown): void;
}

export class AgentFeed {
  /** True from construction until the first replay ends, and during any later one. */
  private replaying = true;
  /** Highest sn queued on the socket. */
  private lastSent = 0;
  /** Highest live sn heard while replaying. */
  private heard = 0;
  /** Highest sn the socket handed to the network, the highest the agent confirmed, the highest recorded. */
  private written = 0;
  private confirmed = 0;
  private recorded = 0;
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

  /** A sequenced push for this agent. */
  live(frame: PushFrame, sn: number): void {
    if (this.stopped) return;
    if (this.replaying) {
      this.heard = Math.max(this.heard, sn);
      return;
    }
    if (sn <= this.lastSent) return;
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
    this.scheduleRecord();
  }

  /** The connection closed: records how far the agent confirmed. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.signalStopped();
    this.record();
  }

  private replay(from: number | undefined): void {
    this.readBacklog(from).catch((err: unknown) => {
      this.replaying = false;
      if (!this.stopped) this.hooks.replayFailed(err);
    });
  }

  private async readBacklog(from: number | undefined): Promise<void> {
    let afterSn = from;
    for (;;) {
      const page = await this.port.backlog({ userId: this.agentUserId, afterSn, limit: this.policy.pageSize });
      if (this.stopped) return;
      if (afterSn === undefined) {
        // The first read of a connection: everything up to the delivered position was had.
        this.lastSent = this.written = this.confirmed = this.recorded = page.afterSn;
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
        if (this.stopped) return;
        lastWrite = this.send(new UpdateFrame(nextPushId(), update as JsonObject), sn);
      }
      // The next page is read once this one is on the network (or the socket is gone).
      if (lastWrite) await Promise.race([lastWrite, this.stoppedSignal]);
      if (this.stopped) return;
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
