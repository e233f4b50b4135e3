// Update streams in Cassandra (DATA-MODEL.md §5.4). Each event is stored once in `update_events`
// with the set of (user, sn) entries holding it; a user's stream is a run of bucket partitions
// `stream_entries ((user_id, first_sn), sn)` listed in `stream_buckets`, the newest carrying the
// stream's head in static columns (latest_sn, owner_epoch, sealed, pending_handoffs). An append is
// one conditional batch per user on that user's newest bucket (P1). What can be checked before
// writing refuses the whole append with nothing written: the fences (the lease read), each user's
// sn values against its head (cached by this handle, read when not known), events the stream
// already holds (`repeats`: a stream holds an event once), and event ids met with other bytes.
// Only a writer racing between those checks and the LWTs (another owner with a newer
// epoch, refused by the LWT's epoch condition, or a second handle writing the same stream) can
// leave an append written for some users and not others.
import cassandra from "cassandra-driver";
import { shardOf, userStreamKey } from "../../ownership.js";
import { OwnershipLostError, type AppendOutcome, type Fence, type LoggedEvent, type UpdateAppend, type UpdateLogStore, type WebhookHandoff } from "../store.js";
import type { CassandraContext } from "./context.js";
import { bytesOf, type Row, type Statement } from "./cql.js";
import { agentDeliveryOf, decodePendingHandoff, encodePendingHandoff, type PendingHandoff } from "./webhook-jobs.js";

const { Tuple } = cassandra.types;

export interface UpdateLogOptions {
  /** Entries a bucket takes before an append opens the next one (an append's entries of one user never straddle two). */
  bucketSize?: number;
}

/** Where a user's stream ends, as its newest bucket says. */
interface StreamHead {
  /** The newest bucket (the one the next append writes, unless it is full). */
  firstSn: number;
  latestSn: number;
  ownerEpoch: number;
  /** The bucket's partition holds the head: appends are conditioned on latest_sn; otherwise the append opens it. */
  opened: boolean;
  /** Its stream_buckets row exists. */
  listed: boolean;
  /** The fence epoch this head was learnt under: a different fence means another owner may have written since. */
  fencedAt?: number;
}

/** One user's part of an append: its entries in sn order, its fence and hand-off. */
interface UserWrite {
  userId: number;
  sns: number[];
  eventIds: bigint[];
  fence: Fence | undefined;
  handoff?: PendingHandoff;
}

type UserOutcome = "applied" | "conflict" | { lost: Fence };

/** Heads a handle remembers; past it the oldest are read again. */
const rememberedHeads = 100_000;

const holderOf = (userId: number, sn: number) => new Tuple(userId, sn);
const holderUser = (holder: unknown) => (holder as InstanceType<typeof Tuple>).get(0) as number;
const holderSn = (holder: unknown) => (holder as InstanceType<typeof Tuple>).get(1) as number;
const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

export function updateLogStore(ctx: CassandraContext, options: UpdateLogOptions = {}): UpdateLogStore {
  const { cql } = ctx;
  const bucketSize = options.bucketSize ?? 1024;
  const delivery = agentDeliveryOf(ctx);
  const heads = new Map<number, StreamHead>();

  const rememberHead = (userId: number, head: StreamHead) => {
    if (!heads.has(userId) && heads.size >= rememberedHeads) heads.delete(heads.keys().next().value!);
    heads.set(userId, head);
  };

  /** The user's bucket first_sn values, oldest first (a stream keeps ~retained/bucketSize of them). */
  async function bucketsOf(userId: number): Promise<number[]> {
    return (await cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ?", [userId])).map((row) => row.first_sn as number).reverse();
  }

  /** The event the user's stream holds at `sn`, or undefined (never written, or pruned). */
  async function entryAt(userId: number, sn: number): Promise<bigint | undefined> {
    const bucket = (await bucketsOf(userId)).filter((firstSn) => firstSn <= sn).pop();
    if (bucket === undefined) return undefined;
    const row = await cql.row("SELECT event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn = ?", [userId, bucket, sn]);
    return row?.event_id as bigint | undefined;
  }

  /** The stream's head as stored, and the hand-off the newest bucket still holds. */
  async function readHead(userId: number, options: { serial?: boolean } = {}): Promise<{ head: StreamHead; handoff?: PendingHandoff }> {
    const staticsOf = (firstSn: number) =>
      cql.row("SELECT latest_sn, owner_epoch, sealed, pending_handoffs FROM stream_entries WHERE user_id = ? AND first_sn = ? LIMIT 1", [userId, firstSn], options);
    const listed = (await cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ? LIMIT 2", [userId])).map((row) => row.first_sn as number);
    if (listed.length === 0) return { head: { firstSn: 1, latestSn: 0, ownerEpoch: 0, opened: false, listed: false } };
    const newest = await staticsOf(listed[0]);
    if (newest && newest.latest_sn !== null) {
      const latestSn = newest.latest_sn as number;
      const ownerEpoch = (newest.owner_epoch as number | null) ?? 0;
      const handoff = decodePendingHandoff(newest.pending_handoffs);
      // Sealed but the next bucket not listed: a writer stopped while rolling over; the next append opens it.
      if (newest.sealed === true) return { head: { firstSn: latestSn + 1, latestSn, ownerEpoch, opened: false, listed: false }, handoff };
      return { head: { firstSn: listed[0], latestSn, ownerEpoch, opened: true, listed: true }, handoff };
    }
    // Listed but never written: a writer stopped between listing a bucket and opening it.
    const previous = listed.length > 1 ? await staticsOf(listed[1]) : undefined;
    const latestSn = (previous?.latest_sn as number | null | undefined) ?? 0;
    return { head: { firstSn: listed[0], latestSn, ownerEpoch: (previous?.owner_epoch as number | null | undefined) ?? 0, opened: false, listed: true } };
  }

  /**
   * Heads for an append: remembered ones learnt under the same fence, the others read, with the
   * hand-offs their last appends left (to settle once the fences are known to hold).
   */
  async function headsFor(writes: readonly UserWrite[]): Promise<{ headOf: Map<number, StreamHead>; unsettled: Map<number, PendingHandoff> }> {
    const headOf = new Map<number, StreamHead>();
    const unsettled = new Map<number, PendingHandoff>();
    await Promise.all(
      writes.map(async ({ userId, fence }) => {
        const cached = heads.get(userId);
        if (cached && (fence === undefined || cached.fencedAt === fence.epoch)) {
          headOf.set(userId, cached);
          return;
        }
        const { head, handoff } = await readHead(userId);
        headOf.set(userId, { ...head, fencedAt: fence?.epoch });
        if (handoff) unsettled.set(userId, handoff);
      }),
    );
    return { headOf, unsettled };
  }

  /** One user's conditional batch; opens (after sealing the full one) a bucket when needed. */
  async function appendFor(write: UserWrite, head: StreamHead): Promise<UserOutcome> {
    const { userId, sns, eventIds, fence } = write;
    const epoch = fence?.epoch;
    const latestSn = sns[sns.length - 1];
    const pending = write.handoff ? encodePendingHandoff(write.handoff) : null;
    const epochCondition = epoch === undefined ? "" : " AND owner_epoch <= ?";
    const epochParams = epoch === undefined ? [] : [epoch];
    const refusal = (row: Row | undefined): UserOutcome =>
      fence && row?.owner_epoch !== null && row?.owner_epoch !== undefined && (row.owner_epoch as number) > fence.epoch ? { lost: fence } : "conflict";
    const entryRows = (firstSn: number): Statement[] =>
      sns.map((sn, index) => ({ query: "INSERT INTO stream_entries (user_id, first_sn, sn, event_id) VALUES (?, ?, ?, ?)", params: [userId, firstSn, sn, eventIds[index]] }));

    if (head.opened && head.latestSn - head.firstSn + 1 < bucketSize) {
      const outcome = await cql.lwtBatch([
        {
          query: `UPDATE stream_entries SET latest_sn = ?, pending_handoffs = ?${epoch === undefined ? "" : ", owner_epoch = ?"}
                  WHERE user_id = ? AND first_sn = ? IF latest_sn = ? AND sealed = null${epochCondition}`,
          params: [latestSn, pending, ...epochParams, userId, head.firstSn, head.latestSn, ...epochParams],
        },
        ...entryRows(head.firstSn),
      ]);
      if (!outcome.applied) return refusal(outcome.row);
      rememberHead(userId, { ...head, latestSn, ownerEpoch: epoch ?? head.ownerEpoch });
      return "applied";
    }

    let firstSn = head.firstSn;
    let listed = head.listed;
    if (head.opened) {
      // Full: sealed first, so a writer that missed the rollover fails its condition instead of writing behind the new bucket.
      const sealed = await cql.lwt(`UPDATE stream_entries SET sealed = true WHERE user_id = ? AND first_sn = ? IF latest_sn = ? AND sealed = null${epochCondition}`, [
        userId,
        head.firstSn,
        head.latestSn,
        ...epochParams,
      ]);
      if (!sealed.applied) return refusal(sealed.row);
      firstSn = head.latestSn + 1;
      listed = false;
    }
    if (!listed) await cql.write("INSERT INTO stream_buckets (user_id, first_sn) VALUES (?, ?)", [userId, firstSn]);
    const ownerEpoch = epoch ?? head.ownerEpoch;
    const opened = await cql.lwtBatch([
      {
        query: "UPDATE stream_entries SET latest_sn = ?, owner_epoch = ?, pending_handoffs = ? WHERE user_id = ? AND first_sn = ? IF latest_sn = null",
        params: [latestSn, ownerEpoch, pending, userId, firstSn],
      },
      ...entryRows(firstSn),
    ]);
    if (!opened.applied) return "conflict";
    rememberHead(userId, { firstSn, latestSn, ownerEpoch, opened: true, listed: true, fencedAt: epoch });
    return "applied";
  }

  /** Removes (user, sn) holders from events; an event left with none is deleted unless an append re-referenced it meanwhile. */
  async function dropHolders(holders: Map<bigint, unknown[]>, deleteEmptied: (eventId: bigint) => boolean): Promise<void> {
    await Promise.all(
      [...holders].map(async ([eventId, pairs]) => {
        await cql.write("UPDATE update_events SET holders = holders - ? WHERE event_id = ?", [pairs, eventId]);
        if (!deleteEmptied(eventId)) return;
        const row = await cql.row("SELECT holders FROM update_events WHERE event_id = ?", [eventId]);
        const left = row?.holders as Set<unknown> | null | undefined;
        if (row && (!left || left.size === 0)) await cql.lwt("DELETE FROM update_events WHERE event_id = ? IF holders = null", [eventId]);
      }),
    );
  }

  /**
   * The users whose streams already hold an event the append gives them, or are given one twice.
   * A stream holds an event once (§5.4). Every entry's (user, sn) pair is added to its event's
   * `holders` before the entry's LWT, so once a head at latest_sn X is known, the pairs read after
   * it name every entry up to X (a pair may also be left by a writer that died before its LWT: the
   * stream confirms it). The user's LWT is conditioned on that same X, so an entry landing after
   * this check refuses the append instead: the check is exact without a condition of its own.
   * Extra reads only where a pair names the user, i.e. for a repeat.
   */
  async function repeats(writes: readonly UserWrite[], headOf: ReadonlyMap<number, StreamHead>, held: ReadonlyMap<bigint, unknown[]>): Promise<Set<number>> {
    // Each event's pairs by user: a write of many fan-outs to many users looks each up once.
    const snsOf = new Map<bigint, Map<number, number[]>>();
    for (const [eventId, holders] of held) {
      const byUser = new Map<number, number[]>();
      for (const holder of holders) byUser.set(holderUser(holder), [...(byUser.get(holderUser(holder)) ?? []), holderSn(holder)]);
      snsOf.set(eventId, byUser);
    }
    const repeating = new Set<number>();
    const confirm: { userId: number; sn: number; eventId: bigint }[] = [];
    for (const { userId, eventIds } of writes) {
      if (new Set(eventIds).size < eventIds.length) repeating.add(userId);
      const latestSn = headOf.get(userId)!.latestSn;
      for (const eventId of eventIds) {
        for (const sn of snsOf.get(eventId)?.get(userId) ?? []) if (sn <= latestSn) confirm.push({ userId, sn, eventId });
      }
    }
    const found = await Promise.all(confirm.map(({ userId, sn }) => entryAt(userId, sn)));
    confirm.forEach(({ userId, eventId }, index) => {
      if (found[index] === eventId) repeating.add(userId);
    });
    return repeating;
  }

  /**
   * The pairs of a refused user's entries that no writer can make true any more, to remove from
   * their events. Another writer may have added the very same pair (the same event at the same sn:
   * two engines finishing one fan-out) and applied it, or may still apply it while its head is
   * below that sn (a rollover under way, a later append): those pairs stay, or `repeats` and
   * `holders` would miss the entry and the stream could take the event twice. What stays without
   * an entry is only an event row kept too long. Read at LOCAL_SERIAL, so a head LWT in flight is
   * settled first. Runs only for refused users.
   */
  async function releasable({ userId, sns, eventIds }: UserWrite): Promise<[bigint, unknown][]> {
    const { head } = await readHead(userId, { serial: true });
    const decided = sns.flatMap((sn, index) => (head.opened && sn <= head.latestSn ? [{ sn, eventId: eventIds[index] }] : []));
    const found = await Promise.all(decided.map(({ sn }) => entryAt(userId, sn)));
    return decided.flatMap(({ sn, eventId }, index): [bigint, unknown][] => (found[index] === eventId ? [] : [[eventId, holderOf(userId, sn)]]));
  }

  return {
    async latestSn(userId) {
      return (await readHead(userId)).head.latestSn;
    },

    async latestSns(userIds) {
      const found = new Map<number, number>();
      const read = await Promise.all(userIds.map((userId) => readHead(userId)));
      userIds.forEach((userId, index) => found.set(userId, read[index].head.latestSn));
      return found;
    },

    async oldestRetainedSn(userId) {
      for (const firstSn of await bucketsOf(userId)) {
        const row = await cql.row("SELECT sn FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn >= ? LIMIT 1", [userId, firstSn, firstSn]);
        if (row) return row.sn as number;
      }
      return undefined;
    },

    async append(write: UpdateAppend): Promise<AppendOutcome> {
      const fenceByShard = new Map((write.fences ?? []).map((fence) => [fence.shard, fence]));
      const byUser = new Map<number, { sn: number; eventId: bigint }[]>();
      for (const entry of write.entries) {
        const entries = byUser.get(entry.userId) ?? [];
        entries.push({ sn: entry.sn, eventId: entry.eventId });
        byUser.set(entry.userId, entries);
      }
      const writes: UserWrite[] = [...byUser].map(([userId, entries]) => {
        entries.sort((a, b) => a.sn - b.sn);
        return { userId, sns: entries.map((e) => e.sn), eventIds: entries.map((e) => e.eventId), fence: fenceByShard.get(shardOf(userStreamKey(userId))) };
      });

      // Checks that refuse the whole append, nothing written.
      const [, { headOf, unsettled }] = await Promise.all([ctx.checkFences(write.fences), headsFor(writes)]);
      for (const { userId, fence } of writes) if (fence && headOf.get(userId)!.ownerEpoch > fence.epoch) throw new OwnershipLostError(fence);
      // The last append's hand-off, if its process stopped before writing it: settled before this append replaces it.
      await Promise.all([...unsettled].map(([agentUserId, handoff]) => delivery.settle(agentUserId, handoff)));
      const referenced = new Map<bigint, LoggedEvent>();
      const heldBy = new Map<bigint, unknown[]>();
      for (const entry of write.entries) heldBy.set(entry.eventId, [...(heldBy.get(entry.eventId) ?? []), holderOf(entry.userId, entry.sn)]);
      for (const event of write.events) if (heldBy.has(event.eventId) && !referenced.has(event.eventId)) referenced.set(event.eventId, event);
      const stored = await Promise.all(
        [...referenced.keys()].map((eventId) => cql.row("SELECT entry, holders FROM update_events WHERE event_id = ?", [eventId])),
      );
      // An event nobody holds any more (its deletion cut short) is free, as a deleted one is.
      const held = new Map<bigint, unknown[]>();
      [...referenced.values()].forEach((event, index) => {
        const row = stored[index];
        const holders = row?.holders as Set<unknown> | null | undefined;
        if (!row || !holders?.size) return;
        if (!sameBytes(bytesOf(row.entry), event.entry)) throw new Error(`event id ${event.eventId} is already stored with another entry`);
        held.set(event.eventId, [...holders]);
      });
      const repeating = await repeats(writes, headOf, held);
      const conflicts = writes
        .filter(({ userId, sns }) => repeating.has(userId) || sns[0] <= headOf.get(userId)!.latestSn || sns.some((sn, index) => index > 0 && sn === sns[index - 1]))
        .map(({ userId }) => userId);
      if (conflicts.length > 0) return { ok: false, conflicts };

      // Hand-offs ride in their agent's LWT (rolled forward from there if this process stops before writing them).
      const handoffs = new Map<number, PendingHandoff>();
      await Promise.all(
        (write.handoffs ?? []).map(async (handoff: WebhookHandoff) => {
          const [firstJobId, generation] = await Promise.all([
            delivery.reserve(handoff.agentUserId, handoff.bodies.length),
            delivery.generationOf(handoff.agentUserId),
          ]);
          handoffs.set(handoff.agentUserId, { firstJobId, bodies: handoff.bodies, queuedAt: handoff.queuedAt, deliveredSn: handoff.deliveredSn, generation });
        }),
      );
      for (const userWrite of writes) userWrite.handoff = handoffs.get(userWrite.userId);

      await cql.writeAll(
        [...referenced.values()].map((event) =>
          held.has(event.eventId)
            ? { query: "UPDATE update_events SET holders = holders + ? WHERE event_id = ?", params: [heldBy.get(event.eventId), event.eventId] }
            : {
                query: "UPDATE update_events SET entry = ?, created_at = ?, holders = holders + ? WHERE event_id = ?",
                params: [Buffer.from(event.entry), BigInt(write.createdAt), heldBy.get(event.eventId), event.eventId],
              },
        ),
      );
      const settled = await Promise.allSettled(writes.map((userWrite) => appendFor(userWrite, headOf.get(userWrite.userId)!)));
      // An LWT that failed (a timeout) may have applied: its head, read at LOCAL_SERIAL, tells (§1.4).
      const outcomes = await Promise.all(
        settled.map(async (outcome, index): Promise<UserOutcome> => {
          if (outcome.status === "fulfilled") return outcome.value;
          const { userId, sns } = writes[index];
          const { head } = await readHead(userId, { serial: true });
          return head.latestSn >= sns[sns.length - 1] ? "applied" : "conflict";
        }),
      );
      const failure = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === "rejected");

      const refused = writes.filter((_userWrite, index) => outcomes[index] !== "applied");
      for (const { userId } of refused) heads.delete(userId);
      if (refused.length > 0) {
        const released = new Map<bigint, unknown[]>();
        for (const [eventId, holder] of (await Promise.all(refused.map(releasable))).flat()) released.set(eventId, [...(released.get(eventId) ?? []), holder]);
        const refusedUsers = new Set(refused.map(({ userId }) => userId));
        const onlyRefused = (eventId: bigint) => !held.has(eventId) && heldBy.get(eventId)!.every((holder) => refusedUsers.has(holderUser(holder)));
        await dropHolders(released, onlyRefused);
      }
      const applied = new Set(writes.filter((_userWrite, index) => outcomes[index] === "applied").map(({ userId }) => userId));
      // A hand-off of an agent without entries here has no LWT to ride in: written once the append stands whole.
      await Promise.all(
        [...handoffs]
          .filter(([agentUserId]) => applied.has(agentUserId) || (!byUser.has(agentUserId) && refused.length === 0))
          .map(([agentUserId, handoff]) => delivery.handOff(agentUserId, handoff)),
      );
      if (failure) {
        // The caller learns the append failed; every head it touched is read again next time.
        for (const { userId } of writes) heads.delete(userId);
        throw failure.reason;
      }
      const lost = outcomes.find((outcome): outcome is { lost: Fence } => typeof outcome === "object");
      if (lost) throw new OwnershipLostError(lost.lost);
      const conflicted = refused.map(({ userId }) => userId);
      return conflicted.length > 0 ? { ok: false, conflicts: conflicted } : { ok: true };
    },

    async holders(eventId, userIds) {
      if (userIds.length === 0) return [];
      const row = await cql.row("SELECT holders FROM update_events WHERE event_id = ?", [eventId]);
      const wanted = new Set(userIds);
      const claimed = [...((row?.holders as Set<unknown> | null | undefined) ?? [])].filter((holder) => wanted.has(holderUser(holder)));
      // The pairs are added before the streams' LWTs, so a writer that died in between left pairs
      // whose stream never took the entry: only the stream itself says it holds it. This runs when
      // a fan-out is delivered again, not on the way of a first delivery.
      const held = await Promise.all(claimed.map(async (holder) => ((await entryAt(holderUser(holder), holderSn(holder))) === eventId ? holderUser(holder) : undefined)));
      return [...new Set(held.filter((userId): userId is number => userId !== undefined))];
    },

    async readUpdates(userId, afterSn, limit) {
      if (limit <= 0) return [];
      const buckets = await bucketsOf(userId);
      let start = 0;
      buckets.forEach((firstSn, index) => {
        if (firstSn <= afterSn + 1) start = index;
      });
      const entries: { sn: number; eventId: bigint }[] = [];
      for (let index = start; index < buckets.length && entries.length < limit; index++) {
        const rows = await cql.rows("SELECT sn, event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn > ? LIMIT ?", [
          userId,
          buckets[index],
          afterSn,
          limit - entries.length,
        ]);
        for (const row of rows) entries.push({ sn: row.sn as number, eventId: row.event_id as bigint });
      }
      const eventIds = [...new Set(entries.map((entry) => entry.eventId))];
      const events = await Promise.all(eventIds.map((eventId) => cql.row("SELECT entry FROM update_events WHERE event_id = ?", [eventId])));
      const entryOf = new Map(eventIds.map((eventId, index) => [eventId, events[index]]));
      // Pruning deletes entries before their events, so an entry without its event is only met if the event was lost; it is skipped, not served empty.
      return entries.filter((entry) => entryOf.get(entry.eventId)).map((entry) => ({ sn: entry.sn, entry: bytesOf(entryOf.get(entry.eventId)!.entry) }));
    },

    async pruneUpdates(userId, upToSn) {
      const buckets = await bucketsOf(userId);
      const pruned = new Map<bigint, unknown[]>();
      const note = (rows: Row[]) => {
        for (const row of rows) {
          const eventId = row.event_id as bigint;
          pruned.set(eventId, [...(pruned.get(eventId) ?? []), holderOf(userId, row.sn as number)]);
        }
      };
      for (let index = 0; index < buckets.length; index++) {
        const firstSn = buckets[index];
        const next = buckets[index + 1];
        if (firstSn > upToSn) break;
        // Entirely pruned: one partition tombstone, then its listing. Not the newest two: the one
        // before the newest keeps its static head for a newest bucket listed but not yet opened.
        if (index + 2 < buckets.length && next - 1 <= upToSn) {
          note(await cql.rows("SELECT sn, event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn >= ?", [userId, firstSn, firstSn]));
          await cql.write("DELETE FROM stream_entries WHERE user_id = ? AND first_sn = ?", [userId, firstSn]);
          await cql.write("DELETE FROM stream_buckets WHERE user_id = ? AND first_sn = ?", [userId, firstSn]);
        } else {
          // The bucket upToSn falls in: one range tombstone; its static head stays.
          const rows = await cql.rows("SELECT sn, event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn >= ? AND sn <= ?", [userId, firstSn, firstSn, upToSn]);
          if (rows.length === 0) continue;
          note(rows);
          await cql.write("DELETE FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn <= ?", [userId, firstSn, upToSn]);
        }
      }
      // After the entries: a crash in between leaves an event held by a pruned entry (kept too long), never an entry without its event.
      await dropHolders(pruned, () => true);
    },
  };
}
