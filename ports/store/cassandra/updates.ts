// Update streams in Cassandra (DATA-MODEL.md §5.4). Each event is stored once in `update_events`
// with the set of (user, sn) entries holding it; a user's stream is a run of bucket partitions
// `stream_entries ((user_id, first_sn), sn)` listed in `stream_buckets`, the newest carrying the
// stream's head in static columns (latest_sn, pending_handoffs). Only the owner of a user's shard
// writes the user's stream, one append at a time, so it assigns sns itself and an append is one
// plain single-partition batch per user: no Paxos round. Owners are kept apart by write
// timestamps: every stream row carries its writer's epoch (stream-head.ts), and an owner's first
// write of a stream in its epoch claims it, shadowing whatever an older owner writes past the head
// it read. A fenced append confirms its ownership after writing, before it answers (FenceHolder).
// What can be checked before writing refuses the whole append with nothing written: each user's
// sn values against its head (cached by this handle, read when not known), events the stream
// already holds (`repeats`: a stream holds an event once), and event ids met with other bytes.
import cassandra from "cassandra-driver";
import { shardOf, userStreamKey } from "../../../shared/shards.js";
import { OwnershipLostError, type AppendOutcome, type Fence, type FenceHolder, type LoggedEvent, type UpdateAppend, type UpdateStreamStore, type WebhookHandoff } from "../store.js";
import type { CassandraContext } from "./context.js";
import { bytesOf, type Row, type Statement } from "./cql.js";
import { readStreamHead, streamClaimTimestamp, streamPruneTimestamp, streamWriteTimestamp } from "./stream-head.js";
import { agentDeliveryOf, decodePendingHandoff, encodePendingHandoff, type PendingHandoff } from "./webhook-jobs.js";

const { Tuple } = cassandra.types;

export interface UpdateLogOptions {
  /** Entries a bucket takes before an append opens the next one (an append's entries of one user never straddle two). */
  bucketSize?: number;
}

/** Where a user's stream ends, as this handle knows it. */
interface KnownHead {
  /** The newest bucket (the one the next append writes, unless it is full). */
  firstSn: number;
  latestSn: number;
  /** Its stream_buckets row exists. */
  listed: boolean;
  /** The epoch this head was learnt under (0 unfenced): a different fence means another owner may have written since. */
  epoch: number;
  /**
   * Bucket partitions an older owner may still write past the head, to be claimed by this handle's
   * first write of the stream in `epoch`; empty once claimed.
   */
  unclaimed: number[];
}

/** One user's part of an append: its entries in sn order, its fence and hand-off. */
interface UserWrite {
  userId: number;
  sns: number[];
  eventIds: bigint[];
  epoch: number;
  handoff?: PendingHandoff;
}

/** One user's batch, ready to write (prepareAppend). */
interface PreparedAppend {
  userId: number;
  /** The bucket partition's key, as the driver hashes it to find its replicas. */
  partition: Buffer;
  statements: Statement[];
  /** The stream's head once the batch landed. */
  head: KnownHead;
}

/**
 * Stream partitions written by one request. A request per recipient's stream was most of a group
 * message's driver work; Cassandra warns about an unlogged batch across more than 10 partitions
 * (unlogged_batch_across_partitions_warn_threshold), so that is the most one request carries.
 */
const streamPartitionsPerBatch = 10;

/** The serialized key of a stream_entries partition ((user_id int, first_sn int)): each component length-prefixed and followed by a zero byte. */
export function streamPartitionKey(userId: number, firstSn: number): Buffer {
  const key = Buffer.alloc(14);
  key.writeUInt16BE(4, 0);
  key.writeInt32BE(userId, 2);
  key.writeUInt16BE(4, 7);
  key.writeInt32BE(firstSn, 9);
  return key;
}

/** Heads a handle remembers; past it the oldest are read again. */
const rememberedHeads = 100_000;

const holderOf = (userId: number, sn: number) => new Tuple(userId, sn);
const holderUser = (holder: unknown) => (holder as InstanceType<typeof Tuple>).get(0) as number;
const holderSn = (holder: unknown) => (holder as InstanceType<typeof Tuple>).get(1) as number;
const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

export function updateLogStore(ctx: CassandraContext, options: UpdateLogOptions = {}): UpdateStreamStore {
  const { cql } = ctx;
  const bucketSize = options.bucketSize ?? 1024;
  const delivery = agentDeliveryOf(ctx);
  const heads = new Map<number, KnownHead>();

  const rememberHead = (userId: number, head: KnownHead) => {
    if (!heads.has(userId) && heads.size >= rememberedHeads) heads.delete(heads.keys().next().value!);
    heads.set(userId, head);
  };

  /** The user's bucket first_sn values, oldest first (a stream keeps ~retained/bucketSize of them). */
  async function bucketsOf(userId: number): Promise<number[]> {
    return (await cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ?", [userId])).map((row) => row.first_sn as number).reverse();
  }

  /** The event the user's stream holds at `sn`, or undefined (never written, pruned, or shadowed by a newer owner). */
  async function entryAt(userId: number, sn: number): Promise<bigint | undefined> {
    const bucket = (await bucketsOf(userId)).filter((firstSn) => firstSn <= sn).pop();
    if (bucket === undefined) return undefined;
    const row = await cql.row("SELECT event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn = ?", [userId, bucket, sn]);
    return row?.event_id as bigint | undefined;
  }

  /**
   * Heads for an append: remembered ones learnt under the same epoch, the others read (after the
   * fence was granted, so the read sees everything an earlier owner acknowledged), with the
   * hand-offs their last appends left (to settle before this append replaces them).
   */
  async function headsFor(writes: readonly UserWrite[]): Promise<{ headOf: Map<number, KnownHead>; unsettled: Map<number, PendingHandoff> }> {
    const headOf = new Map<number, KnownHead>();
    const unsettled = new Map<number, PendingHandoff>();
    await Promise.all(
      writes.map(async ({ userId, epoch }) => {
        const cached = heads.get(userId);
        if (cached && cached.epoch === epoch) {
          headOf.set(userId, cached);
          return;
        }
        const stored = await readStreamHead(cql, userId);
        headOf.set(userId, { firstSn: stored.firstSn, latestSn: stored.latestSn, listed: stored.listed, epoch, unclaimed: stored.readBuckets.length > 0 ? stored.readBuckets : [stored.firstSn] });
        const handoff = decodePendingHandoff(stored.pendingHandoffs);
        if (handoff) unsettled.set(userId, handoff);
      }),
    );
    return { headOf, unsettled };
  }

  /**
   * One user's write, made ready: the statements of its batch on the bucket it goes to (the next
   * one, listed first, when the newest is full), and the head once they landed. The first write of
   * the stream in an epoch claims it: a range tombstone past the head in each bucket an older owner
   * may write, the head restated, and the listings past the newest bucket dropped, all just below
   * the epoch's own timestamps, so that what an older owner lands after the head was read is never
   * visible, whenever it lands. Claims of other buckets and a new listing are written here, before
   * the batch.
   */
  async function prepareAppend(write: UserWrite, head: KnownHead): Promise<PreparedAppend> {
    const { userId, sns, eventIds, epoch } = write;
    const latestSn = sns[sns.length - 1];
    const at = streamWriteTimestamp(epoch, latestSn);
    const claimAt = streamClaimTimestamp(epoch);
    const full = head.latestSn - head.firstSn + 1 >= bucketSize;
    const firstSn = full ? head.latestSn + 1 : head.firstSn;
    const claims = (bucket: number): Statement[] => [
      { query: "DELETE FROM stream_entries USING TIMESTAMP ? WHERE user_id = ? AND first_sn = ? AND sn > ?", params: [claimAt, userId, bucket, head.latestSn] },
      { query: "UPDATE stream_entries USING TIMESTAMP ? SET latest_sn = ?, pending_handoffs = null WHERE user_id = ? AND first_sn = ?", params: [claimAt, head.latestSn, userId, bucket] },
    ];
    const claimed = new Set(head.unclaimed);
    // A bucket opened in this epoch may hold an older owner's rows past the head too.
    if (full) claimed.add(firstSn);
    const elsewhere = [...claimed].filter((bucket) => bucket !== firstSn);
    const claiming: Promise<void>[] = [];
    if (head.unclaimed.length > 0) {
      claiming.push(cql.write("DELETE FROM stream_buckets USING TIMESTAMP ? WHERE user_id = ? AND first_sn > ?", [claimAt, userId, Math.max(...head.unclaimed)]));
    }
    claiming.push(...elsewhere.map((bucket) => cql.partitionBatch(claims(bucket))));
    await Promise.all(claiming);
    // Listed before its entries land, so a reader never misses them.
    if (full || !head.listed) await cql.write("INSERT INTO stream_buckets (user_id, first_sn) VALUES (?, ?) USING TIMESTAMP ?", [userId, firstSn, at]);
    return {
      userId,
      partition: streamPartitionKey(userId, firstSn),
      statements: [
        ...(claimed.has(firstSn) ? claims(firstSn) : []),
        {
          query: "UPDATE stream_entries USING TIMESTAMP ? SET latest_sn = ?, pending_handoffs = ? WHERE user_id = ? AND first_sn = ?",
          params: [at, latestSn, write.handoff ? encodePendingHandoff(write.handoff) : null, userId, firstSn],
        },
        ...sns.map((sn, index) => ({ query: "INSERT INTO stream_entries (user_id, first_sn, sn, event_id) VALUES (?, ?, ?, ?) USING TIMESTAMP ?", params: [userId, firstSn, sn, eventIds[index], at] })),
      ],
      head: { firstSn, latestSn, listed: true, epoch, unclaimed: [] },
    };
  }

  /**
   * Writes the users' batches, several partitions to a request where the same replicas hold them
   * (see streamPartitionsPerBatch); each partition's statements still land as one mutation.
   */
  async function writeAppends(prepared: readonly PreparedAppend[]): Promise<PromiseSettledResult<void>[]> {
    const byReplicas = new Map<string, PreparedAppend[][]>();
    for (const one of prepared) {
      const replicas = cql.replicasOf(one.partition);
      const groups = byReplicas.get(replicas) ?? [[]];
      byReplicas.set(replicas, groups);
      if (groups[groups.length - 1].length >= streamPartitionsPerBatch) groups.push([]);
      groups[groups.length - 1].push(one);
    }
    const batches = [...byReplicas.values()].flat();
    return Promise.allSettled(batches.map((batch) => cql.partitionBatch(batch.flatMap((one) => one.statements))));
  }

  /**
   * Throws OwnershipLostError unless the writer still owns every fence after its write: no takeover
   * revoked one (the revocation is written before the takeover, so a read that misses it began
   * before the new owner could read the stream, and that read sees this write), and by its own view
   * it still holds and trusts each (a release, or an expiry by its clock, comes later still).
   */
  async function confirm(fences: readonly Fence[], holder: FenceHolder): Promise<void> {
    const revoked = new Map((await cql.rows("SELECT shard, epoch FROM lease_revocations WHERE instance = ?", [holder.instance])).map((row) => [row.shard as number, row.epoch as number]));
    const lost = fences.find((fence) => (revoked.get(fence.shard) ?? -1) >= fence.epoch) ?? holder.untrusted(fences);
    if (lost) throw new OwnershipLostError(lost);
  }

  /** Removes (user, sn) holders from events; an event left with none is deleted unless an append re-referenced it meanwhile. */
  async function dropHolders(holders: Map<bigint, unknown[]>): Promise<void> {
    await Promise.all(
      [...holders].map(async ([eventId, pairs]) => {
        await cql.write("UPDATE update_events SET holders = holders - ? WHERE event_id = ?", [pairs, eventId]);
        const row = await cql.row("SELECT holders FROM update_events WHERE event_id = ?", [eventId]);
        const left = row?.holders as Set<unknown> | null | undefined;
        if (row && (!left || left.size === 0)) await cql.lwt("DELETE FROM update_events WHERE event_id = ? IF holders = null", [eventId]);
      }),
    );
  }

  /**
   * The users whose streams already hold an event the append gives them, or are given one twice.
   * A stream holds an event once (§5.4). Every entry's (user, sn) pair is added to its event's
   * `holders` before the entry is written, so once a head at latest_sn X is known, the pairs read
   * after it name every entry up to X (a pair may also be left by a writer that died before its
   * write, or whose write a newer owner shadowed: the stream confirms it). Nothing lands in the
   * stream after the check but this owner's own writes (one append at a time), and an older owner's
   * land shadowed: the check is exact without a condition of its own. Extra reads only where a pair
   * names the user, i.e. for a repeat.
   */
  async function repeats(writes: readonly UserWrite[], headOf: ReadonlyMap<number, KnownHead>, held: ReadonlyMap<bigint, unknown[]>): Promise<Set<number>> {
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

  return {
    async latestSn(userId) {
      return (await readStreamHead(cql, userId)).latestSn;
    },

    async latestSns(userIds) {
      const found = new Map<number, number>();
      const read = await Promise.all(userIds.map((userId) => readStreamHead(cql, userId)));
      userIds.forEach((userId, index) => found.set(userId, read[index].latestSn));
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
        return { userId, sns: entries.map((e) => e.sn), eventIds: entries.map((e) => e.eventId), epoch: fenceByShard.get(shardOf(userStreamKey(userId)))?.epoch ?? 0 };
      });

      // Checks that refuse the whole append, nothing written. A writer that confirms afterwards
      // (holder) skips the read of the leases; the others are checked against them first.
      const [, { headOf, unsettled }] = await Promise.all([write.holder ? undefined : ctx.checkFences(write.fences), headsFor(writes)]);
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

      // Hand-offs ride in their agent's batch (rolled forward from there if this process stops before writing them).
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
      const readied = await Promise.allSettled(writes.map((userWrite) => prepareAppend(userWrite, headOf.get(userWrite.userId)!)));
      const prepared = readied.flatMap((outcome) => (outcome.status === "fulfilled" ? [outcome.value] : []));
      const settled = prepared.length === writes.length ? await writeAppends(prepared) : readied;
      const failure = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === "rejected");
      if (failure) {
        // Some batches may have landed: the caller learns the append failed and finishes the
        // fan-outs again, which find what landed (holders); every head it touched is read again.
        for (const { userId } of writes) heads.delete(userId);
        throw failure.reason;
      }
      for (const { userId, head } of prepared) rememberHead(userId, head);
      if (write.holder && write.fences && write.fences.length > 0) {
        await confirm(write.fences, write.holder).catch((err: unknown) => {
          for (const { userId } of writes) heads.delete(userId);
          throw err;
        });
      }
      // A hand-off of an agent without entries here has no batch to ride in: written once the append stands whole.
      await Promise.all([...handoffs].map(([agentUserId, handoff]) => delivery.handOff(agentUserId, handoff)));
      return { ok: true };
    },

    async holders(eventId, userIds) {
      if (userIds.length === 0) return [];
      const row = await cql.row("SELECT holders FROM update_events WHERE event_id = ?", [eventId]);
      const wanted = new Set(userIds);
      const claimed = [...((row?.holders as Set<unknown> | null | undefined) ?? [])].filter((holder) => wanted.has(holderUser(holder)));
      // The pairs are added before the streams' batches, so a writer that died in between (or whose
      // batch a newer owner shadowed) left pairs whose stream never took the entry: only the stream
      // itself says it holds it. This runs when a fan-out is delivered again, not on the way of a
      // first delivery.
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

    // Its tombstones outrank every owner's writes (streamPruneTimestamp): the sns it drops are below
    // any an owner writes again, and a bucket it drops whole is one no owner writes again.
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
          await cql.write("DELETE FROM stream_entries USING TIMESTAMP ? WHERE user_id = ? AND first_sn = ?", [streamPruneTimestamp, userId, firstSn]);
          await cql.write("DELETE FROM stream_buckets USING TIMESTAMP ? WHERE user_id = ? AND first_sn = ?", [streamPruneTimestamp, userId, firstSn]);
        } else {
          // The bucket upToSn falls in: one range tombstone; its static head stays.
          const rows = await cql.rows("SELECT sn, event_id FROM stream_entries WHERE user_id = ? AND first_sn = ? AND sn >= ? AND sn <= ?", [userId, firstSn, firstSn, upToSn]);
          if (rows.length === 0) continue;
          note(rows);
          await cql.write("DELETE FROM stream_entries USING TIMESTAMP ? WHERE user_id = ? AND first_sn = ? AND sn <= ?", [streamPruneTimestamp, userId, firstSn, upToSn]);
        }
      }
      // After the entries: a crash in between leaves an event held by a pruned entry (kept too long), never an entry without its event.
      await dropHolders(pruned);
    },
  };
}
