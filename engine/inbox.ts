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
// Ownership: appends for a user run one at a time through the user's mailbox, and the store
// refuses an sn that is already taken, so a second owner (during a reshard) cannot fork the
// stream: the stale owner reloads the latest sn and retries.
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import { GroupInfoSchema, type GroupInfo } from "../shared/gen/api/v1/group_pb.js";
import { UserInfoSchema, type UserInfo } from "../shared/gen/api/v1/common_pb.js";
import {
  GetCurrentStateRequestSchema,
  GetCurrentStateResponseSchema,
  GetDifferenceRequestSchema,
  GetDifferenceResponseSchema,
} from "../shared/gen/api/v1/sync_pb.js";
import { NonSnUpdateSchema, SnUpdateSchema } from "../shared/gen/api/v1/updates_pb.js";
import { BusEvents, type PushEvent } from "../shared/bus.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { toWire, type WireMessage } from "../shared/wire.js";
import type { EngineDeps } from "./deps.js";
import { Mailboxes } from "./mailbox.js";
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
}

export interface PushEphemeralParams {
  userId: number;
  /** NonSnUpdate wire form. */
  entry: WireMessage;
  users?: WireMessage[];
  groups?: WireMessage[];
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

  constructor(
    private readonly deps: EngineDeps,
    private readonly publish: (event: PushEvent) => void,
  ) {}

  private async currentSn(userId: number): Promise<number> {
    const cached = this.latestSn.get(userId);
    if (cached !== undefined) return cached;
    const latest = await this.deps.store.updates.latestSn(userId);
    if (this.latestSn.size >= InboxPolicy.cachedUsers) this.latestSn.delete(this.latestSn.keys().next().value!);
    this.latestSn.set(userId, latest);
    return latest;
  }

  /** Writes entries at the next sn values; a stale cached sn (another owner wrote) is reloaded. */
  private async store(userId: number, entries: EncodedEntry[]): Promise<number[]> {
    const bodies = entries.map((entry) => Buffer.from(entry.binary, "base64"));
    for (let attempt = 0; attempt < 4; attempt++) {
      const base = await this.currentSn(userId);
      const now = this.deps.clock.now();
      const sns = entries.map((_, index) => base + index + 1);
      const rows = sns.map((sn, index) => ({ sn, payload: Buffer.concat([snPrefix(sn), bodies[index]]), createdAt: now }));
      if ((await this.deps.store.updates.appendUpdates(userId, rows)) === "ok") return sns;
      this.latestSn.delete(userId);
    }
    throw new ParleyError(Errors.unavailable, { reason: "update stream contention" });
  }

  /** Appends entries to the user's stream in order, pushes each live, answers their sn values. */
  append(params: AppendParams): Promise<number[]> {
    const { userId } = params;
    return this.mailboxes.run(userId, async () => {
      const sns = await this.store(userId, params.entries);
      const latest = sns[sns.length - 1] ?? (await this.currentSn(userId));
      this.latestSn.set(userId, latest);
      // The Update's wire form is assembled directly: every part already is proto3 JSON.
      const related = relatedParts(params);
      params.entries.forEach((entry, index) => {
        this.publish({ userId, update: { ...related, snUpdate: { sn: sns[index], ...entry.wire } } });
      });
      const first = sns[0] ?? latest;
      if (Math.floor(latest / InboxPolicy.pruneEvery) > Math.floor((first - 1) / InboxPolicy.pruneEvery) && latest > InboxPolicy.retainedUpdates) {
        await this.deps.store.updates.pruneUpdates(userId, latest - InboxPolicy.retainedUpdates);
      }
      return sns;
    });
  }

  /** Pushes an ephemeral entry live to the user's connections; nothing is stored. */
  pushEphemeral(params: PushEphemeralParams): void {
    this.publish({ userId: params.userId, update: { ...relatedParts(params), nonSnUpdate: params.entry } });
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

/** Appends entries to a user's update stream through the inbox actor that owns it. */
export async function appendToStream(
  ctx: Pick<Context, "call">,
  userId: number,
  entries: MessageInitShape<typeof SnUpdateSchema>["update"][],
  users: UserInfo[] = [],
): Promise<number[]> {
  const params: AppendParams = {
    userId,
    entries: entries.map(encodeEntry),
    users: users.map((user) => toWire(UserInfoSchema, user)),
  };
  const { sns } = (await ctx.call("inbox.append", params)) as { sns: number[] };
  return sns;
}

/**
 * Appends the same entry to several users' streams. The entry is encoded once for all of them;
 * each user's inbox actor assigns its own sn. Resolves when every stream has it.
 */
export async function fanOut(
  ctx: Pick<Context, "call">,
  userIds: readonly number[],
  entry: MessageInitShape<typeof SnUpdateSchema>["update"],
  users: UserInfo[] = [],
  groups: GroupInfo[] = [],
): Promise<void> {
  const entries = [encodeEntry(entry)];
  const related = users.map((user) => toWire(UserInfoSchema, user));
  const relatedGroups = groups.map((group) => toWire(GroupInfoSchema, group));
  await Promise.all(userIds.map((userId) => ctx.call("inbox.append", { userId, entries, users: related, groups: relatedGroups } satisfies AppendParams)));
}

/** Pushes the same ephemeral entry to several users' live connections, encoded once. */
export async function fanOutEphemeral(
  ctx: Pick<Context, "call">,
  userIds: readonly number[],
  entry: MessageInitShape<typeof NonSnUpdateSchema>["update"],
  users: UserInfo[] = [],
): Promise<void> {
  const wire = toWire(NonSnUpdateSchema, { update: entry } as MessageInitShape<typeof NonSnUpdateSchema>);
  const related = users.map((user) => toWire(UserInfoSchema, user));
  await Promise.all(userIds.map((userId) => ctx.call("inbox.pushEphemeral", { userId, entry: wire, users: related } satisfies PushEphemeralParams)));
}

/** Pushes an ephemeral entry to a user's live connections through the inbox actor. */
export async function pushEphemeral(ctx: Pick<Context, "call">, userId: number, entry: MessageInitShape<typeof NonSnUpdateSchema>["update"], users: UserInfo[] = []): Promise<void> {
  const params: PushEphemeralParams = {
    userId,
    entry: toWire(NonSnUpdateSchema, { update: entry } as MessageInitShape<typeof NonSnUpdateSchema>),
    users: users.map((user) => toWire(UserInfoSchema, user)),
  };
  await ctx.call("inbox.pushEphemeral", params);
}

const shardByUser = { strategy: "Shard", strategyOptions: { shardKey: "userId" } };
const shardByCaller = { strategy: "Shard", strategyOptions: { shardKey: "caller.userId" } };

export function inboxService(deps: EngineDeps): ServiceSchema {
  let inbox: Inbox;
  return {
    name: "inbox",
    created() {
      inbox = new Inbox(deps, (event) => void this.broker.broadcast(BusEvents.push, event));
    },
    actions: {
      append: { ...shardByUser, handler: async (ctx: Context<AppendParams>) => ({ sns: await inbox.append(ctx.params) }) },
      pushEphemeral: {
        handler: (ctx: Context<PushEphemeralParams>) => {
          inbox.pushEphemeral(ctx.params);
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
