// Acknowledged means complete. A change that produces an event records the event (a fan-out: one
// entry for a list of recipients) in the same transaction as the change itself, and only then
// appends it to the recipients' update streams. So once a change is committed, its events are
// durable; if the appends are cut short (a crash, a failed append), the fan-out is still recorded
// and is finished again:
// - at start-up, before the server serves anything, every recorded fan-out is finished;
// - within a running process, a scope (a conversation) whose fan-out failed is settled before
//   its next write and before its next delivery, so a client's retry (SendMessage with the same
//   clientMessageId) finishes it and later events of the scope still follow it in every stream;
// - a periodic sweep finishes what neither reached.
// Each stream takes a given fan-out at most once: the store refuses a stream's second entry of an
// event (UpdateStreamStore.append), whatever engines deliver it at once; a fan-out delivered again
// asks the inbox to skip the streams that hold it (a first delivery need not, and the check is
// not free), and a fan-out still being delivered by this process is never delivered again beside it.
//
// Delivery runs after the change's writer moved on (a conversation's mailbox is released once the
// message is durable), one scope's fan-outs one after another in the order they were recorded:
// the next event of a scope never overtakes the previous one, and after a failure it waits until
// the failed one is finished. A delivery takes every fan-out of its scope that queued behind the
// one before it (a busy group's messages share one write) and is one call to the inbox of each node
// owning some of their recipients (recipientsByOwner), which appends them with other fan-outs in
// one write. A large scope's delivery starts at the end of the turn, so the fan-outs recorded in
// the same turn share it even when none is under way (turnWaitFromRecipients).
//
// The outbox has a second kind: a GROUP system message a group change calls for, recorded with the
// change and posted by the conversation actor (which owns message ids), whose message write
// deletes the record; it is posted at start-up and by the sweep like a fan-out is finished.
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { Context } from "moleculer";
import { GroupInfoSchema, type GroupInfo } from "../../shared/gen/shared/v1/group_pb.js";
import { UserInfoSchema, type UserInfo } from "../../shared/gen/shared/v1/common_pb.js";
import { MessageBodySchema, type MessageBody } from "../../shared/gen/shared/v1/message_pb.js";
import { SnUpdateSchema } from "../../shared/gen/shared/v1/updates_pb.js";
import { failureReasonOf } from "../../shared/background.js";
import { Errors, parleyErrorParts } from "../../shared/errors.js";
import { toWire, type WireMessage } from "../../shared/wire.js";
import { sequencedPush, type AppendFanOutsParams, type FanOutAppend, type SystemMessageParams } from "./fan-out-contracts.js";
import { Mailboxes } from "../../shared/mailbox.js";
import { encodeEntry, type EncodedEntry } from "./stream-entry.js";
import type { Clock } from "../../shared/clock.js";
import type { FanOutIds } from "./fan-out-ids.js";
import type { LiveDelivery } from "./live-router.js";
import type { FanOutRecord, Store, SystemMessageRecord } from "../../ports/store/store.js";
import { fanOutFailures, fanOutsDelivered, fanOutsInFlight, fanOutUnfinishedScopes } from "../../shared/metrics.js";
import { callEngine } from "../engine-actions.js";

type Update = MessageInitShape<typeof SnUpdateSchema>["update"];

const deliveredFirst = fanOutsDelivered.bind({ delivery: "first" });
const deliveredAgain = fanOutsDelivered.bind({ delivery: "again" });

export const FanOutPolicy = {
  /** Recorded fan-outs read per page when finishing them. */
  pageSize: 100,
  /** A fan-out older than this that is still recorded was cut short; the sweep finishes it. */
  sweepAfterMs: 30_000,
  /** How often each engine looks for fan-outs cut short. */
  sweepIntervalMs: 30_000,
  /**
   * How long a delivery goes on trying when a recipient's stream is moving (its engine died, hung
   * or handed it over): the new owner takes it within a few hundred milliseconds, so the change
   * that waits for its delivery (a send) is answered instead of failing.
   */
  movingStreamRetryMs: 3_000,
  /** The wait between those tries. */
  movingStreamPauseMs: 150,
  /**
   * A scope's fan-outs that queued behind its delivery under way go in the next one together, up
   * to this many stream entries: one inbox write then touches each recipient's stream once for
   * all of them, where a write each cost SQLite a third of a busy group's CPU.
   */
  entriesPerDelivery: 5_000,
  /**
   * A fan-out to at least this many recipients starts its delivery at the end of the turn, so
   * that the scope's fan-outs recorded in the same turn go with it: with few sends in flight none
   * queue behind a delivery under way, and a group of 200 at 8 in flight, each message delivered
   * alone, cost 15% more CPU per delivery. A small scope's fan-outs rarely share a turn, and
   * waiting would only delay their pushes: they go at once.
   */
  turnWaitFromRecipients: 32,
} as const;

/**
 * Whether an append failed because the recipients' streams are between owners: the engine it went
 * to left (or was taken for gone) before answering, none was there, or the one reached no longer
 * owns them. Another try, regrouped by the owners known then, reaches the new owner; the stream
 * refuses an entry it already holds, so a try that did land is not doubled.
 */
function isStreamMoving(err: unknown): boolean {
  const reason = failureReasonOf(err);
  return reason === "ownership" || reason === "unreachable" || parleyErrorParts(err)?.entry === Errors.unavailable;
}

/** The scope of an event that belongs to no conversation: the account whose action caused it. */
export const accountScope = (userId: number) => `user:${userId}`;

/** Whether a recorded fan-out or system message (its id, when it was recorded) was cut short. */
type CutShort = (id: bigint, recordedAt: number) => boolean;

/** A conversation's scope is its id; its fan-outs are finished in its actor's mailbox. */
const isConversationScope = (scope: string) => /^\d+$/.test(scope);

/** A fan-out ready to record and deliver: the entry encoded once for every recipient. */
export interface PreparedFanOut {
  record: FanOutRecord;
  entry: EncodedEntry;
  users: WireMessage[];
  groups: WireMessage[];
}

interface RelatedJson {
  users?: WireMessage[];
  groups?: WireMessage[];
}

/**
 * The recipients in groups by the engine node that owns their streams (shard-owners.ts), each
 * group appended by one call to that node; a group without a node goes to whichever engine the
 * broker picks. Embedded, one node owns every stream: one group.
 */
export type RecipientsByOwner = (recipients: readonly number[]) => Map<string | undefined, number[]>;

const oneOwner: RecipientsByOwner = (recipients) => new Map(recipients.length === 0 ? [] : [[undefined, [...recipients]]]);

/** A fan-out handed to its scope's next delivery, and whoever waits for it. */
interface QueuedFanOut {
  fanOut: PreparedFanOut;
  /** The deliverer's pushes, when it pushes this fan-out itself (see deliver). */
  pushVia?: LiveDelivery;
  delivered(): void;
  failed(err: unknown): void;
}

/** A scope's next delivery, still taking fan-outs while the one before it runs. */
interface OpenDelivery {
  queued: QueuedFanOut[];
  entries: number;
}

/** A fan-out as the inbox owning `recipients` appends it. */
function appendOf(fanOut: PreparedFanOut, recipients: number[], again: boolean, pushedByDeliverer: boolean): FanOutAppend {
  return { fanOutId: String(fanOut.record.fanOutId), entry: fanOut.entry, users: fanOut.users, groups: fanOut.groups, recipients, again, ...(pushedByDeliverer ? { pushedByDeliverer } : {}) };
}

/** The prepared form of a recorded fan-out (the entry decoded once to get its wire form). */
function preparedOf(record: FanOutRecord): PreparedFanOut {
  const related = JSON.parse(record.related) as RelatedJson;
  const entry = fromBinary(SnUpdateSchema, record.entry);
  return {
    record,
    entry: { wire: toWire(SnUpdateSchema, create(SnUpdateSchema, entry)), binary: Buffer.from(record.entry).toString("base64") },
    users: related.users ?? [],
    groups: related.groups ?? [],
  };
}

/** The events of one change: prepared as the change's store write asks for them (EventsOf), delivered once it committed. */
export class EventBatch {
  private readonly prepared: (PreparedFanOut | SystemMessageRecord)[] = [];

  constructor(private readonly fanOuts: FanOuts) {}

  /** Prepares an event and answers its record, for the change's write to record. */
  add(scope: string, recipients: readonly number[], update: Update, users: UserInfo[] = [], groups: GroupInfo[] = []): FanOutRecord {
    const fanOut = this.fanOuts.prepare(scope, recipients, update, users, groups);
    this.prepared.push(fanOut);
    return fanOut.record;
  }

  /** Prepares a system message for the conversation and answers its record, for the change's write to record. */
  systemMessage(conversationId: bigint, body: MessageBody, extraRecipients: number[] = []): SystemMessageRecord {
    const record = this.fanOuts.prepareSystemMessage(conversationId, body, extraRecipients);
    this.prepared.push(record);
    return record;
  }

  /** Delivers the events and posts the system messages, in the order they were added; call it after the change's write succeeded. */
  async deliver(ctx: Pick<Context, "call">): Promise<void> {
    for (const item of this.prepared.splice(0)) {
      if ("systemMessageId" in item) await this.fanOuts.postSystemMessage(ctx, item);
      else await this.fanOuts.deliver(ctx, item);
    }
  }
}

export class FanOuts {
  /** Scopes with a fan-out that failed in this process and is still recorded. */
  private readonly unfinishedScopes = new Set<string>();
  /** Fan-outs this process is delivering now. */
  private readonly inFlight = new Set<bigint>();
  /** Each scope's deliveries, one after another. */
  private readonly scopes = new Mailboxes();
  /** Per scope, the delivery queued behind the one under way that later fan-outs may still join. */
  private readonly openDeliveries = new Map<string, OpenDelivery>();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: FanOutIds,
    private readonly recipientsByOwner: RecipientsByOwner = oneOwner,
  ) {}

  /** Exposes this engine's fan-out backlog at /metrics until the answered call takes it back. */
  sampleBacklog(): () => void {
    const stops = [fanOutsInFlight.sample({}, () => this.inFlight.size), fanOutUnfinishedScopes.sample({}, () => this.unfinishedScopes.size)];
    return () => stops.forEach((stop) => stop());
  }

  /** An event as a fan-out with its id, encoded once for all its recipients. */
  prepare(scope: string, recipients: readonly number[], update: Update, users: UserInfo[] = [], groups: GroupInfo[] = []): PreparedFanOut {
    const entry = encodeEntry(update);
    const related: RelatedJson = {
      users: users.map((user) => toWire(UserInfoSchema, user)),
      groups: groups.map((group) => toWire(GroupInfoSchema, group)),
    };
    return {
      record: {
        fanOutId: this.ids.next(),
        scope,
        recipients: [...new Set(recipients)],
        entry: Buffer.from(entry.binary, "base64"),
        related: JSON.stringify(related),
        createdAt: this.clock.now(),
      },
      entry,
      users: related.users!,
      groups: related.groups!,
    };
  }

  /** A system message as the outbox records it. */
  prepareSystemMessage(conversationId: bigint, body: MessageBody, extraRecipients: number[]): SystemMessageRecord {
    return { systemMessageId: this.ids.next(), conversationId, body: toBinary(MessageBodySchema, body), extraRecipients, createdAt: this.clock.now() };
  }

  /**
   * Has the conversation actor post a recorded system message; posting one already posted does
   * nothing (the actor finds it no longer recorded).
   */
  async postSystemMessage(ctx: Pick<Context, "call">, record: SystemMessageRecord): Promise<void> {
    const params: SystemMessageParams = {
      request: { conversationId: String(record.conversationId) },
      body: toWire(MessageBodySchema, fromBinary(MessageBodySchema, record.body)),
      extraRecipients: record.extraRecipients,
      systemMessageId: String(record.systemMessageId),
    };
    await callEngine(ctx, "messages.postSystemMessage", params);
  }

  /** Posts the recorded system messages not posted yet (all, or those that were cut short), oldest first. */
  async postRecordedSystemMessages(ctx: Pick<Context, "call">, cutShort: CutShort = () => true): Promise<number> {
    let posted = 0;
    for (;;) {
      const listed = await this.store.outbox.pendingSystemMessages(FanOutPolicy.pageSize);
      const page = listed.filter((record) => cutShort(record.systemMessageId, record.createdAt));
      for (const record of page) await this.postSystemMessage(ctx, record);
      posted += page.length;
      if (listed.length < FanOutPolicy.pageSize || page.length === 0) return posted;
    }
  }

  /** A batch for the events of one change (see EventBatch), once ids can be drawn for them. */
  async batch(): Promise<EventBatch> {
    await this.ready();
    return new EventBatch(this);
  }

  /**
   * Resolves once this process may draw fan-out ids: at once while its id slot is trusted, else
   * once it renewed or claimed one (after a pause, or a clock that jumped). Ids are drawn
   * synchronously inside a change's write, so the change waits here first.
   */
  ready(): Promise<void> {
    return this.ids.ready();
  }

  /**
   * Delivers a fan-out just recorded, after the scope's earlier ones; resolves once every
   * recipient's stream has it and it is marked finished. When an append fails the fan-out stays
   * recorded (to be finished later, before the scope's next event) and the error is thrown.
   * `pushVia`: the deliverer's own pushes, through which each inbox's part goes live as soon as
   * the inbox answers, ahead of anything the deliverer pushes after this resolves; without it,
   * each inbox pushes its part.
   */
  deliver(ctx: Pick<Context, "call">, fanOut: PreparedFanOut, pushVia?: LiveDelivery): Promise<void> {
    const { fanOutId, scope, recipients } = fanOut.record;
    this.inFlight.add(fanOutId);
    return new Promise<void>((delivered, failed) => {
      const queued: QueuedFanOut = { fanOut, pushVia, delivered, failed };
      const open = this.openDeliveries.get(scope);
      // One the deliverer pushes goes alone: its inbox answer comes before its push is sent, and
      // a fan-out after it in the same write would be pushed by the inbox before it.
      if (!pushVia && open && open.entries + recipients.length <= FanOutPolicy.entriesPerDelivery) {
        open.queued.push(queued);
        open.entries += recipients.length;
        return;
      }
      const delivery: OpenDelivery = { queued: [queued], entries: recipients.length };
      if (pushVia) this.openDeliveries.delete(scope);
      else this.openDeliveries.set(scope, delivery);
      const waitsForTurnEnd = !pushVia && recipients.length >= FanOutPolicy.turnWaitFromRecipients;
      void this.scopes.run(scope, async () => {
        if (waitsForTurnEnd) await new Promise((turnEnded) => setImmediate(turnEnded));
        await this.deliverQueued(ctx, scope, delivery);
      });
    });
  }

  /** One delivery of a scope: its fan-outs appended together, in the order they were queued. */
  private async deliverQueued(ctx: Pick<Context, "call">, scope: string, delivery: OpenDelivery): Promise<void> {
    if (this.openDeliveries.get(scope) === delivery) this.openDeliveries.delete(scope);
    const { queued } = delivery;
    try {
      // An earlier event of the scope failed: it goes first. Those recorded after these are
      // delivered by their own turn (the change recording one may not have handed it over yet).
      if (this.unfinishedScopes.has(scope)) await this.finishScope(ctx, scope, queued[0].fanOut.record.fanOutId);
      await this.append(ctx, queued, false);
      for (const { delivered } of queued) delivered();
    } catch (err) {
      for (const { failed } of queued) failed(err);
    } finally {
      for (const { fanOut } of queued) this.inFlight.delete(fanOut.record.fanOutId);
    }
  }

  /**
   * Appends the fan-outs (of one scope, in order) to their recipients' streams, one call per node
   * owning some, then marks them finished. `again`: an earlier delivery may have reached some streams.
   */
  private async append(ctx: Pick<Context, "call">, queued: readonly Pick<QueuedFanOut, "fanOut" | "pushVia">[], again: boolean): Promise<void> {
    try {
      // Counted from the first failure: one that took long to come (a hung engine, taken for gone
      // only after its silence) still leaves the new owner its time.
      let triesUntil: number | undefined;
      for (let retry = again; ; retry = true) {
        try {
          const byOwner = new Map<string | undefined, { fanOuts: FanOutAppend[]; of: Pick<QueuedFanOut, "fanOut" | "pushVia">[] }>();
          for (const item of queued) {
            for (const [nodeID, owned] of this.recipientsByOwner(item.fanOut.record.recipients)) {
              const part = byOwner.get(nodeID) ?? { fanOuts: [], of: [] };
              byOwner.set(nodeID, part);
              part.fanOuts.push(appendOf(item.fanOut, owned, retry, item.pushVia !== undefined));
              part.of.push(item);
            }
          }
          await Promise.all(
            [...byOwner].map(async ([nodeID, part]) => {
              const params: AppendFanOutsParams = { fanOuts: part.fanOuts };
              const { appended } = await callEngine(ctx, "sync.appendFanOuts", params, nodeID === undefined ? undefined : { nodeID });
              // A part taken on an earlier try was pushed then: a stream holding it answers no sn now.
              part.of.forEach(({ fanOut, pushVia }, index) => {
                if (pushVia && appended[index].sns.length > 0) void pushVia.send(sequencedPush(fanOut, appended[index]));
              });
            }),
          );
          break;
        } catch (err) {
          triesUntil ??= performance.now() + FanOutPolicy.movingStreamRetryMs;
          if (!isStreamMoving(err) || performance.now() >= triesUntil) throw err;
          await new Promise((resolve) => setTimeout(resolve, FanOutPolicy.movingStreamPauseMs));
        }
      }
      for (const { fanOut } of queued) await this.store.outbox.finish(fanOut.record);
    } catch (err) {
      this.unfinishedScopes.add(queued[0].fanOut.record.scope);
      fanOutFailures.inc(queued.length);
      throw err;
    }
    (again ? deliveredAgain : deliveredFirst).inc(queued.length);
  }

  /** Finishes the scope's recorded fan-outs (those recorded before `before`, when given), in order. */
  private async finishScope(ctx: Pick<Context, "call">, scope: string, before?: bigint): Promise<void> {
    this.unfinishedScopes.delete(scope);
    try {
      await this.finishRecorded(ctx, { scope, before });
    } catch (err) {
      this.unfinishedScopes.add(scope);
      throw err;
    }
  }

  /**
   * Finishes the scope's fan-outs that failed earlier in this process, after its deliveries under
   * way, so a new event of the scope follows them. Called by the scope's writer before it writes.
   */
  async settle(ctx: Pick<Context, "call">, scope: string): Promise<void> {
    if (!this.unfinishedScopes.has(scope)) return;
    await this.scopes.run(scope, async () => {
      if (this.unfinishedScopes.has(scope)) await this.finishScope(ctx, scope);
    });
  }

  /** Resolves once the scope's deliveries under way have ended, whatever their outcome. */
  async delivered(scope: string): Promise<void> {
    await this.scopes.run(scope, async () => {});
  }

  /**
   * Finishes every recorded fan-out of the scope in its delivery order (after the deliveries under
   * way). Its writer calls it while holding the scope, so no new event is recorded meanwhile.
   */
  async finishScopeInOrder(ctx: Pick<Context, "call">, scope: string): Promise<void> {
    await this.scopes.run(scope, () => this.finishScope(ctx, scope));
  }

  /**
   * Finishes the fan-outs and system messages that were cut short: recorded long enough ago, or
   * inherited with this process's id slot (see finishInherited). The sweep's leader runs it.
   */
  async sweep(ctx: Pick<Context, "call">): Promise<void> {
    const recordedBefore = this.clock.now() - FanOutPolicy.sweepAfterMs;
    await this.finishCutShort(ctx, (id, recordedAt) => recordedAt < recordedBefore || this.ids.inherited(id, recordedAt));
  }

  /**
   * Finishes what the earlier holder of this process's id slot recorded and left unfinished: that
   * holder is gone, so nothing else is delivering it. A restarted engine takes its own slot back,
   * so at start it finishes at once what its crash or stop cut short, where other records wait for
   * the sweep's age limit (another engine may be delivering them right now).
   */
  async finishInherited(ctx: Pick<Context, "call">): Promise<void> {
    await this.finishCutShort(ctx, (id, recordedAt) => this.ids.inherited(id, recordedAt));
  }

  /** A conversation's by its actor (which holds its writes meanwhile), others in their scope's delivery order. */
  private async finishCutShort(ctx: Pick<Context, "call">, cutShort: CutShort): Promise<void> {
    const found = (await this.store.outbox.pending(FanOutPolicy.pageSize)).filter((record) => cutShort(record.fanOutId, record.createdAt));
    for (const scope of new Set(found.map((record) => record.scope))) {
      if (isConversationScope(scope)) await callEngine(ctx, "messages.finishFanOuts", { request: { conversationId: scope } });
      else await this.scopes.run(scope, () => this.finishRecorded(ctx, { scope, cutShort }));
    }
    await this.postRecordedSystemMessages(ctx, cutShort);
  }

  /**
   * Delivers again the recorded fan-outs in the order they were recorded: all of them, one
   * scope's, those that were cut short or recorded before fan-out `before`; none this process is
   * delivering now. Answers how many it finished.
   */
  async finishRecorded(ctx: Pick<Context, "call">, filter: { scope?: string; cutShort?: CutShort; before?: bigint } = {}): Promise<number> {
    let finished = 0;
    for (;;) {
      const listed = await this.store.outbox.pending(FanOutPolicy.pageSize, filter.scope);
      const page = listed.filter(
        (record) =>
          !this.inFlight.has(record.fanOutId) &&
          (filter.cutShort === undefined || filter.cutShort(record.fanOutId, record.createdAt)) &&
          (filter.before === undefined || record.fanOutId < filter.before),
      );
      for (const record of page) {
        this.inFlight.add(record.fanOutId);
        try {
          await this.append(ctx, [{ fanOut: preparedOf(record) }], true);
        } finally {
          this.inFlight.delete(record.fanOutId);
        }
      }
      finished += page.length;
      // A page that is all in flight here (or too young) leaves nothing to do now.
      if (listed.length < FanOutPolicy.pageSize || page.length === 0) return finished;
    }
  }
}
