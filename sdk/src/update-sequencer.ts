// Turns what arrives from the server (live pushes, GetDifference pages, across any number of
// connections) into one ordered stream for the application: every sequenced entry exactly once,
// in sn order.
//
// Each user's stream numbers its entries 1, 2, 3… with no gaps. The sequencer remembers the last
// sn it delivered. A live entry with exactly the next sn is delivered; one at or below it was
// delivered already (a push racing a catch-up read) and is dropped; one beyond it means entries
// were missed, and the sequencer reads the stream from its last sn with GetDifference, page by
// page, before going on. A new connection always starts with such a read, since pushes made
// while no connection was open are never repeated. GetDifference answers updateTooLong when the
// last sn is older than the server retains: the application reloads its state (onResync) and the
// stream continues from the latest sn the server names.
//
// Agents have no GetDifference: on each connection the gateway itself replays what the agent has
// not confirmed, and an entry may come twice across connections, while an sn can skip (entries
// older than the server retains are never replayed). Without a difference reader the sequencer
// drops what it delivered already and accepts a skip.
//
// Work runs one item at a time, in arrival order, and each handler is awaited before the next
// item: the application sees entries in order even if it handles them asynchronously. Ephemeral
// entries (stream deltas, card actions) go through the same queue, so a delta never overtakes
// the START entry it belongs to. Work is tagged with the connection it came from; when that
// connection ends, what it left queued is dropped, to be read again by the next catch-up.
import type { GetDifferenceResponse } from "../../shared/gen/api/v1/sync_pb.js";
import type { Update } from "../../shared/gen/api/v1/updates_pb.js";
import type { UserInfo } from "../../shared/gen/shared/v1/common_pb.js";
import type { GroupInfo } from "../../shared/gen/shared/v1/group_pb.js";
import type { NonSnUpdate, SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";

/** Users and groups a pushed entry refers to (empty for entries read by GetDifference). */
export interface Related {
  users: UserInfo[];
  groups: GroupInfo[];
}

export type DifferencePage = Pick<GetDifferenceResponse, "updates" | "sn" | "hasMore" | "updateTooLong">;

export interface UpdateHandlers {
  /** A sequenced entry: each exactly once, in sn order. */
  onUpdate(entry: SnUpdate, related: Related): void | Promise<void>;
  /** An ephemeral entry (stream delta, card action, card action answer), in arrival order among the rest. */
  onEphemeral?(entry: NonSnUpdate, related: Related): void | Promise<void>;
  /**
   * The entries after the last delivered sn are no longer retained: reload local state from the
   * API (ListConversations, ListContacts…). Entries continue after `latestSn`.
   */
  onResync?(latestSn: number): void | Promise<void>;
  /** A handler threw (the entry still counts as delivered), or the connection had trouble. */
  onError?(err: unknown): void;
}

export type SnVerdict = "next" | "duplicate" | "gap";

/** How an arriving sn relates to the last one delivered. */
export function snVerdict(lastSn: number, sn: number): SnVerdict {
  if (sn <= lastSn) return "duplicate";
  return sn === lastSn + 1 ? "next" : "gap";
}

export interface SequencerOptions {
  /** The last sn the application has handled (0 for a stream never read). */
  initialSn: number;
  /** GetDifference; absent where the server replays on connect (agents). */
  difference?: (sn: number) => Promise<DifferencePage>;
  handlers: UpdateHandlers;
  /** A catch-up read failed: the connection it was for cannot promise order any more. */
  onCatchUpFailed(err: unknown): void;
}

type Work = { epoch: number } & ({ kind: "catch-up" } | { kind: "push"; update: Update });

const noRelated: Related = { users: [], groups: [] };

export class UpdateSequencer {
  private delivered: number;
  private epoch = 0;
  private readonly queue: Work[] = [];
  private running = false;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly options: SequencerOptions) {
    this.delivered = options.initialSn;
  }

  /** The last sn delivered to the application: where a later session resumes. */
  get lastSn(): number {
    return this.delivered;
  }

  /** A connection is ready for pushes; answers its tag. With a difference reader, it first catches up. */
  connected(): number {
    this.epoch += 1;
    if (this.options.difference) this.enqueue({ epoch: this.epoch, kind: "catch-up" });
    return this.epoch;
  }

  /** An Update pushed on the connection tagged `epoch`. */
  pushed(epoch: number, update: Update): void {
    this.enqueue({ epoch, kind: "push", update });
  }

  /** The current connection ended: what it left queued is dropped. */
  disconnected(): void {
    this.epoch += 1;
  }

  /** Resolves once nothing is queued or running. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private enqueue(work: Work): void {
    this.queue.push(work);
    if (!this.running) void this.pump();
  }

  private async pump(): Promise<void> {
    this.running = true;
    while (this.queue.length > 0) {
      const work = this.queue.shift()!;
      if (work.epoch !== this.epoch) continue;
      try {
        if (work.kind === "catch-up") await this.catchUp();
        else await this.apply(work.update);
      } catch (err) {
        this.epoch += 1;
        this.options.onCatchUpFailed(err);
      }
    }
    this.running = false;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private async apply(update: Update): Promise<void> {
    const related = { users: update.users, groups: update.groups };
    const payload = update.update;
    if (payload.case === "nonSnUpdate") {
      const ephemeral: NonSnUpdate = payload.value;
      await this.run(() => this.options.handlers.onEphemeral?.(ephemeral, related));
      return;
    }
    if (payload.case !== "snUpdate") return;
    const entry = payload.value;
    const verdict = snVerdict(this.delivered, entry.sn);
    if (verdict === "duplicate") return;
    if (verdict === "gap" && this.options.difference) {
      // The read covers this entry too; it arrives from the page, then this push is a duplicate.
      await this.catchUp();
      return;
    }
    await this.deliver(entry, related);
  }

  private async catchUp(): Promise<void> {
    const difference = this.options.difference!;
    for (;;) {
      const page = await difference(this.delivered);
      if (page.updateTooLong) {
        await this.run(() => this.options.handlers.onResync?.(page.sn));
        if (!this.options.handlers.onResync) this.options.handlers.onError?.(new Error(`update stream entries after sn ${this.delivered} are no longer retained; continuing from sn ${page.sn}`));
        this.delivered = page.sn;
      } else {
        for (const entry of page.updates) {
          if (entry.sn > this.delivered) await this.deliver(entry, noRelated);
        }
        this.delivered = Math.max(this.delivered, page.sn);
      }
      if (!page.hasMore) return;
    }
  }

  private async deliver(entry: SnUpdate, related: Related): Promise<void> {
    await this.run(() => this.options.handlers.onUpdate(entry, related));
    this.delivered = entry.sn;
  }

  /** Runs an application handler; its failure is reported and does not stop the stream. */
  private async run(handler: () => void | Promise<void>): Promise<void> {
    try {
      await handler();
    } catch (err) {
      this.options.handlers.onError?.(err);
    }
  }
}
