// The inbox actor: the owner of users' update streams (each user's stream has one owner node).
//
// How a client stays in sync. Every state change that concerns a user appends one SnUpdate to
// the user's stream and gets the next `sn`: 1, 2, 3… with no gaps, ever. Online clients receive
// each entry live; a client that sees an sn other than its last sn + 1 knows it missed entries
// and calls GetDifference(lastSn), which answers the entries after it in order, in pages
// (`hasMore` means: call again with the returned sn). The server keeps the latest
// `retainedUpdates` entries per user; a client whose sn is older than what is retained (or ahead
// of the stream, which happens only when server data was lost) gets `updateTooLong`: it must drop
// its local state, reload it (ListConversations, ListContacts…) and continue from the returned sn,
// which is the latest. GetCurrentState gives that baseline for a first sync.
//
// Batched appends (group commit). An event arrives as a fan-out: one entry for a list of
// recipients. Every write of this node's streams runs through one queue, one write at a time:
// the fan-outs that arrived meanwhile are taken together, in arrival order, and committed in one
// store transaction (the entry stored once per event, one small row per recipient). sn values
// are assigned here, from the cached latest sn of each user, so they are dense per user and in
// arrival order. Each fan-out then goes to the gateways as one push carrying every recipient's sn.
//
// Ownership: a write carries the fences of the leases on its streams' shards (ownership.ts), and
// the store refuses it whole when one is stale, so a node whose lease moved on writes nothing; it
// forgets the shard and its callers retry through the new owner. The store also refuses an sn
// already taken, and an event a stream already holds: a writer with a stale cached sn reloads
// those users' latest sn, reads again which streams hold its fan-outs, and retries.
import type { Context, ServiceSchema } from "moleculer";
import {
  GetCurrentStateRequestSchema,
  GetCurrentStateResponseSchema,
  GetDifferenceRequestSchema,
  GetDifferenceResponseSchema,
} from "../../shared/gen/api/v1/sync_pb.js";
import { type UpdateJson } from "../../shared/gen/api/v1/updates_pb.js";
import { type AgentBacklogParams, type DeliveryModeChangedParams, type FeedRelease, type MarkDeliveredParams } from "../../shared/agent-delivery.js";
import { BusEvents, type AgentChangedEvent, type LiveEvent } from "../../shared/bus.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import { WebhookRouting, agentFeedPage } from "../agents/event-routing.js";
import type { EngineDeps } from "../deps.js";
import { Mailboxes } from "../../shared/mailbox.js";
import { userStreamKey } from "../../shared/shards.js";
import { routeToOwner } from "../shard-owners.js";
import { requireUser, rpcAction } from "../rpc-action.js";
import { OwnershipLostError, type Fence, type LoggedEvent, type StreamEntry, type WebhookHandoff } from "../../ports/store/store.js";
import { snUpdateOf } from "../delivery/stream-entry.js";
import { relatedParts, sequencedPush, type AppendedFanOut, type AppendFanOutsAnswer, type AppendFanOutsParams, type FanOutAppend } from "../delivery/fan-out-contracts.js";
import type { CardActionParams, EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

export const InboxPolicy = {
  /** Entries kept per user; older ones are pruned and answer updateTooLong. */
  retainedUpdates: 10_000,
  /** Entries per GetDifference page. */
  differencePageSize: 100,
  /** Pruning runs when an append crosses a multiple of this sn. */
  pruneEvery: 500,
  /** Users whose latest sn is cached in memory. */
  cachedUsers: 100_000,
} as const;

/** Per fan-out, each recipient that took it with its sn (a stream that already held it is absent). */
type AppendedSns = AppendedFanOut["sns"][];

interface WaitingAppend {
  fanOuts: FanOutAppend[];
  resolve(appended: AppendedFanOut[]): void;
  reject(err: unknown): void;
}

export class Inbox {
  /** Every write of this node's streams, one at a time: appends, mode switches, card actions queued for webhooks. */
  private readonly writer = new Mailboxes();
  /** Fan-outs waiting for the next append. */
  private readonly waiting: WaitingAppend[] = [];
  private appendQueued = false;
  /**
   * Each user's latest sn as this node wrote or read it, with the fence of the lease it held then:
   * only the lease's holder appends, so the entry is true exactly while that fence is still held.
   * An entry outliving its lease (the shard moved away, maybe to come back later) is never used.
   */
  private readonly latestSn = new Map<number, { sn: number; fence: Fence }>();
  readonly webhooks: WebhookRouting;

  constructor(
    private readonly deps: EngineDeps,
    /** Sends a push; a promise, when answered, settles once it was delivered or failed. */
    private readonly publish: (event: LiveEvent) => Promise<void> | void,
    private readonly webhookQueued: (agentUserId: number) => void = () => {},
  ) {
    this.webhooks = new WebhookRouting(deps.store, deps.clock, webhookQueued);
  }

  private serially<T>(work: () => Promise<T>): Promise<T> {
    return this.writer.run(0, work);
  }

  private remember(userId: number, sn: number, fence: Fence | undefined): void {
    if (!fence) return;
    if (!this.latestSn.has(userId) && this.latestSn.size >= InboxPolicy.cachedUsers) this.latestSn.delete(this.latestSn.keys().next().value!);
    this.latestSn.set(userId, { sn, fence });
  }

  private cachedSn(userId: number): number | undefined {
    const cached = this.latestSn.get(userId);
    if (!cached) return undefined;
    if (this.deps.ownership.holds(cached.fence)) return cached.sn;
    this.latestSn.delete(userId);
    return undefined;
  }

  /**
   * The latest sn of each user, from the cache or, for those not cached, one read. Only the writer
   * calls it; what it reads is cached under the user's fence (by user), when the writer holds one.
   */
  private async latestSnsOf(userIds: readonly number[], fences: ReadonlyMap<number, Fence> = new Map()): Promise<Map<number, number>> {
    const found = new Map<number, number>();
    const missing: number[] = [];
    for (const userId of userIds) {
      const cached = this.cachedSn(userId);
      if (cached === undefined) missing.push(userId);
      else found.set(userId, cached);
    }
    if (missing.length > 0) {
      for (const [userId, sn] of await this.deps.store.updates.latestSns(missing)) {
        found.set(userId, sn);
        this.remember(userId, sn, fences.get(userId));
      }
    }
    return found;
  }

  private async currentSn(userId: number, fences?: ReadonlyMap<number, Fence>): Promise<number> {
    return (await this.latestSnsOf([userId], fences)).get(userId) ?? 0;
  }

  /**
   * Appends the fan-outs to their recipients' streams, in order, together with every fan-out that
   * arrives before the next write starts; once they are stored, pushes each whose deliverer does
   * not push it itself. Answers once stored: the pushes are under way, and what a client misses
   * of them it finds by sn.
   */
  appendFanOuts(fanOuts: FanOutAppend[]): Promise<AppendedFanOut[]> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ fanOuts, resolve, reject });
      if (this.appendQueued) return;
      this.appendQueued = true;
      // The rest of this turn's fan-outs join the write; a write in progress delays it further.
      setImmediate(() => void this.serially(() => this.appendWaiting()));
    });
  }

  private async appendWaiting(): Promise<void> {
    this.appendQueued = false;
    const taken = this.waiting.splice(0);
    try {
      const appended = await this.append(taken.flatMap((waiting) => waiting.fanOuts));
      let at = 0;
      for (const waiting of taken) {
        waiting.resolve(appended.slice(at, at + waiting.fanOuts.length));
        at += waiting.fanOuts.length;
      }
    } catch (err) {
      // Nothing of the write was stored: every fan-out in it stays recorded, to be finished again.
      for (const waiting of taken) waiting.reject(err);
    }
  }

  /** One write for all the fan-outs: entries, webhook hand-offs, then the pushes and any pruning. */
  private async append(fanOuts: readonly FanOutAppend[]): Promise<AppendedFanOut[]> {
    let recipients = await this.recipientsLacking(fanOuts);
    // Retries only ever drop recipients, so these cover every attempt.
    const users = [...new Set(recipients.flat())];
    const { fences, fenceOfUser } = await this.fencesOf(users);
    const byWebhook = await this.webhooks.webhookUsers(users, (userId) => this.currentSn(userId, fenceOfUser));
    for (let attempt = 0; attempt < 4; attempt++) {
      // A conflict means another write reached these streams meanwhile, possibly with this very
      // fan-out, finished again by another engine (the store refuses a stream an event twice):
      // who holds it is read again, for a first delivery too.
      if (attempt > 0) recipients = await this.recipientsLacking(fanOuts, true);
      const events: LoggedEvent[] = fanOuts.flatMap((fanOut, index) => (recipients[index].length ? [{ eventId: BigInt(fanOut.fanOutId), entry: Buffer.from(fanOut.entry.binary, "base64") }] : []));
      const before = await this.latestSnsOf(users, fenceOfUser);
      const next = new Map(before);
      const sns: AppendedSns = recipients.map((userIds) =>
        userIds.map((userId) => {
          const sn = next.get(userId)! + 1;
          next.set(userId, sn);
          return [userId, sn];
        }),
      );
      const entries: StreamEntry[] = sns.flatMap((pairs, index) => pairs.map(([userId, sn]) => ({ userId, sn, eventId: BigInt(fanOuts[index].fanOutId) })));
      const now = this.deps.clock.now();
      const handoffs = this.handoffs(fanOuts, sns, byWebhook, next, now);
      const outcome = await this.deps.store.updates.append({ events, entries, handoffs, createdAt: now, fences, holder: this.deps.ownership.fenceHolder }).catch((err: unknown) => {
        throw err instanceof OwnershipLostError ? this.ownershipLost(err) : err;
      });
      if (!outcome.ok) {
        for (const userId of outcome.conflicts) this.latestSn.delete(userId);
        continue;
      }
      for (const [userId, sn] of next) this.remember(userId, sn, fenceOfUser.get(userId));
      const appended = sns.map((pairs): AppendedFanOut => {
        // A WEBHOOK-mode agent's entry went to its webhook route: its sockets are told not to carry it.
        const toWebhook = byWebhook.size > 0 ? pairs.flatMap(([userId]) => (byWebhook.has(userId) ? [userId] : [])) : [];
        return toWebhook.length > 0 ? { sns: pairs, toWebhook } : { sns: pairs };
      });
      fanOuts.forEach((fanOut, index) => {
        if (appended[index].sns.length > 0 && !fanOut.pushedByDeliverer) void this.publish(sequencedPush(fanOut, appended[index]));
      });
      for (const handoff of handoffs) if (handoff.bodies.length > 0) this.webhookQueued(handoff.agentUserId);
      for (const [userId, latest] of next) {
        const first = before.get(userId)! + 1;
        if (Math.floor(latest / InboxPolicy.pruneEvery) > Math.floor((first - 1) / InboxPolicy.pruneEvery) && latest > InboxPolicy.retainedUpdates) {
          await this.deps.store.updates.pruneUpdates(userId, latest - InboxPolicy.retainedUpdates);
        }
      }
      return appended;
    }
    throw new ParleyError(Errors.unavailable, { reason: "update stream contention" });
  }

  /**
   * Per fan-out, the recipients whose streams are to take it: for one delivered again (or every
   * one, `afterConflict`), those whose streams do not hold it yet; and a fan-out twice in one
   * write (two engines finishing the same recorded one at once) reaches each stream once. What is
   * read here may be stale by the time of the write; the store refuses a stream's second entry
   * of an event, which brings the write back here.
   */
  private async recipientsLacking(fanOuts: readonly FanOutAppend[], afterConflict = false): Promise<number[][]> {
    const takenInThisWrite = new Map<string, Set<number>>();
    const recipients: number[][] = [];
    for (const fanOut of fanOuts) {
      const unique = [...new Set(fanOut.recipients)];
      const held = fanOut.again || afterConflict ? new Set(await this.deps.store.updates.holders(BigInt(fanOut.fanOutId), unique)) : new Set<number>();
      const taken = takenInThisWrite.get(fanOut.fanOutId) ?? new Set<number>();
      takenInThisWrite.set(fanOut.fanOutId, taken);
      const lacking = unique.filter((userId) => !held.has(userId) && !taken.has(userId));
      for (const userId of lacking) taken.add(userId);
      recipients.push(lacking);
    }
    return recipients;
  }

  /**
   * The fences of the users' streams (see ownership.ts), one per shard, and each user's. A write
   * refused under one means another node took those streams over: this one forgets the shard and
   * the callers may try again.
   */
  private async fencesOf(userIds: readonly number[]): Promise<{ fences: Fence[]; fenceOfUser: Map<number, Fence> }> {
    const byShard = new Map<number, Promise<Fence>>();
    const shardOfUser = new Map<number, number>();
    for (const userId of userIds) {
      const key = userStreamKey(userId);
      const shard = this.deps.ownership.shardOf(key);
      shardOfUser.set(userId, shard);
      if (!byShard.has(shard)) byShard.set(shard, this.deps.ownership.fence(key));
    }
    const fences = await Promise.all(byShard.values());
    const fenceOfShard = new Map(fences.map((fence) => [fence.shard, fence]));
    return { fences, fenceOfUser: new Map([...shardOfUser].map(([userId, shard]) => [userId, fenceOfShard.get(shard)!])) };
  }

  private ownershipLost(err: OwnershipLostError): ParleyError {
    // The cached sns learned under the fence die with it (cachedSn).
    this.deps.ownership.lost(err.fence);
    return new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: String(err.fence.shard) }, "another node took these update streams over; try again");
  }

  /** What the write hands to the webhook queues of the WEBHOOK-mode agents among the recipients (see agents/event-routing.ts). */
  private handoffs(fanOuts: readonly FanOutAppend[], sns: AppendedSns, byWebhook: Set<number>, latest: Map<number, number>, now: number): WebhookHandoff[] {
    if (byWebhook.size === 0) return [];
    const bodies = new Map<number, string[]>([...byWebhook].map((agentUserId) => [agentUserId, []]));
    fanOuts.forEach((fanOut, index) => {
      for (const [userId, sn] of sns[index]) {
        const body = bodies.has(userId) ? this.webhooks.webhookBody(sn, fanOut.entry.wire, relatedParts(fanOut)) : undefined;
        if (body !== undefined) bodies.get(userId)!.push(body);
      }
    });
    return [...bodies].map(([agentUserId, queued]) => ({ agentUserId, bodies: queued, queuedAt: now, deliveredSn: latest.get(agentUserId)! }));
  }

  /**
   * Delivers a card action to the agent that sent the card: live on its sockets, and for a
   * WEBHOOK-mode agent queued for its webhook, in turn with the appends, so the route is read and
   * the job queued with no mode switch in between. It is the only ephemeral entry agents get by
   * webhook; every other one is a plain broadcast (see sendEphemeral, delivery/ephemeral.ts).
   */
  async deliverCardAction(params: CardActionParams): Promise<void> {
    const { userId } = params;
    const update = { ...relatedParts(params), nonSnUpdate: { cardAction: params.cardAction } } as UpdateJson;
    void this.publish({ userIds: [userId], update });
    await this.serially(async () => {
      if (!(await this.webhooks.webhookUsers([userId], (agentUserId) => this.currentSn(agentUserId))).has(userId)) return;
      await this.deps.store.webhookJobs.enqueue(userId, JSON.stringify(update), this.deps.clock.now());
      this.webhookQueued(userId);
    });
  }

  /** Carries out a change of the agent's delivery mode or URL, between two appends; answers what its sockets are to be told. */
  deliveryModeChanged(agentUserId: number): Promise<FeedRelease> {
    return this.serially(() => this.webhooks.modeChanged(agentUserId, () => this.currentSn(agentUserId)));
  }

  /**
   * The latest stored sn; read outside the writer, so a miss is not cached (the writer may be ahead
   * of the read). A node that is not the stream's holder (a call routed by an older view of the
   * cluster) reads the store.
   */
  async currentState(userId: number): Promise<number> {
    return this.cachedSn(userId) ?? (await this.deps.store.updates.latestSn(userId));
  }

  async difference(userId: number, sn: number) {
    if (sn < 0) throw new ParleyError(Errors.invalidSn);
    let latest = await this.currentState(userId);
    // Ahead of what this node knows: before telling the client to drop its state, the store decides
    // (a holder that has not yet learned its lease was taken over knows less than the store).
    if (sn > latest) latest = await this.deps.store.updates.latestSn(userId);
    if (sn === latest) return { updates: [], sn: latest, hasMore: false, updateTooLong: false };
    const oldest = await this.deps.store.updates.oldestRetainedSn(userId);
    const lostEntries = oldest === undefined ? latest > sn : sn + 1 < oldest;
    if (sn > latest || lostEntries) return { updates: [], sn: latest, hasMore: false, updateTooLong: true };
    const updates = (await this.deps.store.updates.readUpdates(userId, sn, InboxPolicy.differencePageSize)).map(snUpdateOf);
    const last = updates[updates.length - 1]?.sn ?? sn;
    return { updates, sn: last, hasMore: last < latest, updateTooLong: false };
  }
}

const shardByUser = routeToOwner("userId", "user");
const shardByCaller = routeToOwner("caller.userId", "user");

export function syncService(deps: EngineDeps): ServiceSchema {
  let inbox: Inbox;
  return {
    name: "sync",
    created() {
      inbox = new Inbox(
        deps,
        (event) => deps.live.send(event),
        (agentUserId) => deps.webhookQueued(agentUserId),
      );
    },
    events: {
      [BusEvents.agentChanged]: {
        handler(ctx: Context<AgentChangedEvent>) {
          inbox.webhooks.forgetAgent(ctx.params.agentUserId);
        },
      },
    },
    actions: {
      // Not sharded by user: a fan-out's recipients come in groups by owning node (recipientsByOwner
      // in fan-out.ts), each group to its node; embedded, this node owns them all.
      appendFanOuts: { handler: async (ctx: Context<AppendFanOutsParams>): Promise<AppendFanOutsAnswer> => ({ appended: await inbox.appendFanOuts(ctx.params.fanOuts) }) },
      deliverCardAction: {
        ...shardByUser,
        handler: async (ctx: Context<CardActionParams>) => {
          await inbox.deliverCardAction(ctx.params);
          return {};
        },
      },
      agentBacklog: {
        ...shardByUser,
        handler: (ctx: Context<AgentBacklogParams>) => agentFeedPage(deps.store, ctx.params.userId, ctx.params.afterSn, ctx.params.limit),
      },
      deliveryModeChanged: {
        ...shardByUser,
        handler: async (ctx: Context<DeliveryModeChangedParams>) => {
          const release = await inbox.deliveryModeChanged(ctx.params.userId);
          // Parked feeds (a switch into WEBHOOK) learn through which sn the webhook took over;
          // feeds of an agent that left WEBHOOK mode start again from the delivered position.
          await deps.live.releaseAgentFeeds(ctx.params.userId, release);
          return {};
        },
      },
      markDelivered: {
        handler: async (ctx: Context<MarkDeliveredParams>) => {
          await deps.store.webhookJobs.advanceDelivered(ctx.params.userId, ctx.params.sn);
          return {};
        },
      },
      getCurrentState: {
        ...shardByCaller,
        handler: rpcAction(GetCurrentStateRequestSchema, GetCurrentStateResponseSchema, async ({ caller }) => ({
          state: { latestSn: await inbox.currentState(requireUser(caller).userId) },
        })),
      },
      getDifference: {
        ...shardByCaller,
        handler: rpcAction(GetDifferenceRequestSchema, GetDifferenceResponseSchema, async ({ request, caller }) =>
          inbox.difference(requireUser(caller).userId, request.sn),
        ),
      },
    } satisfies ActionsOf<EngineActions, "sync">,
  };
}
