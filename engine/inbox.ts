// The inbox actor: one per user (sharded by userId), owner of that user's update stream.
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
// Ownership: appends for a user run one at a time through the user's mailbox under the fence of
// the stream's lease (ownership.ts), and the store refuses an sn that is already taken, so a
// second owner (during a reshard) cannot fork the stream: one whose lease moved on is refused,
// and a stale cached sn is reloaded and retried.
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import { UserInfoSchema, type UserInfo } from "../shared/gen/shared/v1/common_pb.js";
import {
  GetCurrentStateRequestSchema,
  GetCurrentStateResponseSchema,
  GetDifferenceRequestSchema,
  GetDifferenceResponseSchema,
} from "../shared/gen/api/v1/sync_pb.js";
import { CardActionPayloadSchema, NonSnUpdateSchema, SnUpdateSchema, type CardActionPayload } from "../shared/gen/shared/v1/updates_pb.js";
import { type UpdateJson } from "../shared/gen/api/v1/updates_pb.js";
import { AgentDeliveryActions, type AgentBacklogParams, type DeliveryModeChangedParams, type MarkDeliveredParams } from "../shared/agent-delivery.js";
import { BusEvents, type AgentChangedEvent, type PushEvent, type WebhookQueuedEvent } from "../shared/bus.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { toWire, type WireMessage } from "../shared/wire.js";
import { WebhookRouting, agentBacklog } from "./agent-delivery.js";
import type { EngineDeps } from "./deps.js";
import { Mailboxes } from "./mailbox.js";
import { userStreamKey } from "./ownership.js";
import { OwnershipLostError, type Fence } from "./store/store.js";
import { requireUser, rpcAction } from "./rpc-action.js";

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

/**
 * A stream entry encoded once for every recipient: its wire form and its protobuf binary form
 * (base64, so any serializer carries it), both without sn. Each inbox only prefixes its own sn:
 * protobuf fields may come in any order, so `sn` bytes + entry bytes is a valid SnUpdate.
 */
export interface EncodedEntry {
  wire: WireMessage;
  binary: string;
}

export function encodeEntry(update: MessageInitShape<typeof SnUpdateSchema>["update"]): EncodedEntry {
  const entry = create(SnUpdateSchema, { update } as MessageInitShape<typeof SnUpdateSchema>);
  return { wire: toWire(SnUpdateSchema, entry), binary: Buffer.from(toBinary(SnUpdateSchema, entry)).toString("base64") };
}

/** Field 1 (sn), varint wire type, followed by the sn. */
function snPrefix(sn: number): Uint8Array {
  const bytes = [0x08];
  for (let value = sn; ; value >>>= 7) {
    if (value < 0x80) {
      bytes.push(value);
      break;
    }
    bytes.push((value & 0x7f) | 0x80);
  }
  return Uint8Array.from(bytes);
}

export interface AppendParams {
  userId: number;
  /** The entries, without sn; the inbox assigns it. */
  entries: EncodedEntry[];
  /** UserInfo wire forms referenced by the entries, pushed along with them. */
  users?: WireMessage[];
  /** GroupInfo wire forms referenced by the entries. */
  groups?: WireMessage[];
  /** The recorded fan-out the one entry comes from (decimal); a stream takes each fan-out once. */
  fanOutId?: string;
  /** The fan-out is delivered again (it may have reached this stream before). */
  again?: boolean;
}

export interface CardActionParams {
  /** The agent that sent the card. */
  userId: number;
  /** CardActionPayload wire form. */
  cardAction: WireMessage;
  /** The submitting user's UserInfo wire form. */
  users?: WireMessage[];
}

/** The `users` and `groups` fields of an Update's wire form (omitted when empty, as proto3 JSON does). */
function relatedParts(params: { users?: WireMessage[]; groups?: WireMessage[] }): WireMessage {
  return {
    ...(params.users?.length ? { users: params.users } : {}),
    ...(params.groups?.length ? { groups: params.groups } : {}),
  };
}

export class Inbox {
  private readonly mailboxes = new Mailboxes();
  private readonly latestSn = new Map<number, number>();
  readonly webhooks: WebhookRouting;

  constructor(
    private readonly deps: EngineDeps,
    private readonly publish: (event: PushEvent) => void,
    private readonly webhookQueued: (agentUserId: number) => void = () => {},
  ) {
    this.webhooks = new WebhookRouting(deps.store, deps.clock, webhookQueued);
  }

  private async currentSn(userId: number): Promise<number> {
    const cached = this.latestSn.get(userId);
    if (cached !== undefined) return cached;
    const latest = await this.deps.store.updates.latestSn(userId);
    if (this.latestSn.size >= InboxPolicy.cachedUsers) this.latestSn.delete(this.latestSn.keys().next().value!);
    this.latestSn.set(userId, latest);
    return latest;
  }

  /**
   * Writes entries at the next sn values; a stale cached sn (another owner wrote) is reloaded.
   * With `webhookRelated` (the user is a WEBHOOK-mode agent) the webhook bodies, which carry the
   * sn, are queued in the same write (see agent-delivery.ts). Answers the sn values and how many
   * bodies were queued; no sn values when the stream already took the fan-out it is delivered again.
   */
  private async store(userId: number, entries: EncodedEntry[], webhookRelated: WireMessage | undefined, fanOut: { id: bigint; again: boolean } | undefined): Promise<{ sns: number[]; queued: number }> {
    const bodies = entries.map((entry) => Buffer.from(entry.binary, "base64"));
    for (let attempt = 0; attempt < 4; attempt++) {
      const base = await this.currentSn(userId);
      const now = this.deps.clock.now();
      const sns = entries.map((_, index) => base + index + 1);
      const rows = sns.map((sn, index) => ({ sn, payload: Buffer.concat([snPrefix(sn), bodies[index]]), createdAt: now }));
      const handoff = webhookRelated && this.webhooks.handoff(entries.map((entry, index) => ({ sn: sns[index], wire: entry.wire })), webhookRelated, now);
      const outcome = await this.deps.store.updates.appendUpdates(userId, rows, handoff, fanOut, { fence: await this.fence(userId) });
      if (outcome === "ok") return { sns, queued: handoff?.bodies.length ?? 0 };
      if (outcome === "duplicate") return { sns: [], queued: 0 };
      this.latestSn.delete(userId);
    }
    throw new ParleyError(Errors.unavailable, { reason: "update stream contention" });
  }

  /**
   * The fence of the user's stream (see ownership.ts). A write refused under it means another
   * node took the stream over: this one forgets the shard and the caller may try again.
   */
  private async fence(userId: number): Promise<Fence> {
    return this.deps.ownership.fence(userStreamKey(userId));
  }

  private ownershipLost(userId: number, err: OwnershipLostError): ParleyError {
    this.deps.ownership.lost(err.fence);
    this.latestSn.delete(userId);
    return new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: String(err.fence.shard) }, "another node took this update stream over; try again");
  }

  /** Appends entries to the user's stream in order, pushes each live, answers their sn values. */
  append(params: AppendParams): Promise<number[]> {
    const { userId } = params;
    return this.mailboxes.run(userId, async () => {
      // The Update's wire form is assembled directly: every part already is proto3 JSON.
      const related = relatedParts(params);
      const byWebhook = await this.webhooks.sendsByWebhook(userId, () => this.currentSn(userId));
      const fanOut = params.fanOutId === undefined ? undefined : { id: BigInt(params.fanOutId), again: params.again ?? false };
      const { sns, queued } = await this.store(userId, params.entries, byWebhook ? related : undefined, fanOut).catch((err: unknown) => {
        throw err instanceof OwnershipLostError ? this.ownershipLost(userId, err) : err;
      });
      if (queued > 0) this.webhookQueued(userId);
      const latest = sns[sns.length - 1] ?? (await this.currentSn(userId));
      this.latestSn.set(userId, latest);
      sns.forEach((sn, index) => {
        this.publish({ userIds: [userId], update: { ...related, snUpdate: { sn, ...params.entries[index].wire } } });
      });
      const first = sns[0] ?? latest;
      if (Math.floor(latest / InboxPolicy.pruneEvery) > Math.floor((first - 1) / InboxPolicy.pruneEvery) && latest > InboxPolicy.retainedUpdates) {
        await this.deps.store.updates.pruneUpdates(userId, latest - InboxPolicy.retainedUpdates);
      }
      return sns;
    });
  }

  /**
   * Delivers a card action to the agent that sent the card: live on its sockets, and for a
   * WEBHOOK-mode agent queued for its webhook, in the agent's mailbox, so the route is read and
   * the job queued with no mode switch in between. It is the only ephemeral entry agents get by
   * webhook; every other one is a plain broadcast (see pushEphemeral below).
   */
  async deliverCardAction(params: CardActionParams): Promise<void> {
    const { userId } = params;
    const update = { ...relatedParts(params), nonSnUpdate: { cardAction: params.cardAction } };
    this.publish({ userIds: [userId], update });
    await this.mailboxes.run(userId, async () => {
      if (!(await this.webhooks.sendsByWebhook(userId, () => this.currentSn(userId)))) return;
      await this.deps.store.webhookJobs.enqueue(userId, JSON.stringify(update), this.deps.clock.now());
      this.webhookQueued(userId);
    });
  }

  /** Carries out a change of the agent's delivery mode or URL, between two of its appends. */
  deliveryModeChanged(agentUserId: number): Promise<void> {
    return this.mailboxes.run(agentUserId, () => this.webhooks.modeChanged(agentUserId, () => this.currentSn(agentUserId)));
  }

  async currentState(userId: number): Promise<number> {
    return this.mailboxes.run(userId, () => this.currentSn(userId));
  }

  async difference(userId: number, sn: number) {
    if (sn < 0) throw new ParleyError(Errors.invalidSn);
    const latest = await this.currentState(userId);
    if (sn === latest) return { updates: [], sn: latest, hasMore: false, updateTooLong: false };
    const oldest = await this.deps.store.updates.oldestRetainedSn(userId);
    const lostEntries = oldest === undefined ? latest > sn : sn + 1 < oldest;
    if (sn > latest || lostEntries) return { updates: [], sn: latest, hasMore: false, updateTooLong: true };
    const stored = await this.deps.store.updates.readUpdates(userId, sn, InboxPolicy.differencePageSize);
    const updates = stored.map((row) => fromBinary(SnUpdateSchema, row.payload));
    const last = updates[updates.length - 1]?.sn ?? sn;
    return { updates, sn: last, hasMore: last < latest, updateTooLong: false };
  }
}

/**
 * Pushes an ephemeral entry (a stream delta, a card action answer) live to the users'
 * connections: nothing is stored and no sn is assigned, so no inbox is involved. One broadcast,
 * encoded once, reaches every gateway, which picks the connections it holds.
 */
export function pushEphemeral(
  ctx: Pick<Context, "broadcast">,
  userIds: readonly number[],
  entry: MessageInitShape<typeof NonSnUpdateSchema>["update"],
  users: UserInfo[] = [],
): void {
  const update: UpdateJson = {
    ...relatedParts({ users: users.map((user) => toWire(UserInfoSchema, user)) }),
    nonSnUpdate: toWire(NonSnUpdateSchema, { update: entry } as MessageInitShape<typeof NonSnUpdateSchema>),
  } as UpdateJson;
  void ctx.broadcast(BusEvents.push, { userIds: [...userIds], update } satisfies PushEvent);
}

/** Delivers a card action to the agent that sent the card, through the agent's inbox actor (see deliverCardAction). */
export async function deliverCardAction(ctx: Pick<Context, "call">, agentUserId: number, cardAction: CardActionPayload, submitter: UserInfo | undefined): Promise<void> {
  const params: CardActionParams = {
    userId: agentUserId,
    cardAction: toWire(CardActionPayloadSchema, cardAction),
    users: submitter ? [toWire(UserInfoSchema, submitter)] : [],
  };
  await ctx.call("inbox.deliverCardAction", params);
}

const shardByUser = { strategy: "Shard", strategyOptions: { shardKey: "userId" } };
/** "inbox.x" → "x": the shared action names are full, the service declares them unqualified. */
const actionName = (fullName: string) => fullName.slice(fullName.indexOf(".") + 1);
const shardByCaller = { strategy: "Shard", strategyOptions: { shardKey: "caller.userId" } };

export function inboxService(deps: EngineDeps): ServiceSchema {
  let inbox: Inbox;
  return {
    name: "inbox",
    created() {
      inbox = new Inbox(
        deps,
        (event) => void this.broker.broadcast(BusEvents.push, event),
        (agentUserId) => void this.broker.broadcast(BusEvents.webhookQueued, { agentUserId } satisfies WebhookQueuedEvent),
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
      append: { ...shardByUser, handler: async (ctx: Context<AppendParams>) => ({ sns: await inbox.append(ctx.params) }) },
      deliverCardAction: {
        ...shardByUser,
        handler: async (ctx: Context<CardActionParams>) => {
          await inbox.deliverCardAction(ctx.params);
          return {};
        },
      },
      [actionName(AgentDeliveryActions.backlog)]: {
        ...shardByUser,
        handler: (ctx: Context<AgentBacklogParams>) => agentBacklog(deps.store, ctx.params.userId, ctx.params.afterSn, ctx.params.limit),
      },
      [actionName(AgentDeliveryActions.modeChanged)]: {
        ...shardByUser,
        handler: async (ctx: Context<DeliveryModeChangedParams>) => {
          await inbox.deliveryModeChanged(ctx.params.userId);
          return {};
        },
      },
      [actionName(AgentDeliveryActions.markDelivered)]: {
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
    },
  };
}
