// Where a user's update stream ends, and the write timestamps of its rows (DATA-MODEL.md §5.4).
// Shared by the update log, which appends, and the webhook queue, which rolls forward the hand-off
// an agent's last append left in its stream.
import type { Cql } from "./cql.js";

/** Epochs past this would carry stream timestamps beyond int64; a shard changes hands far less often. */
const maxStreamEpoch = 2 ** 30;

const epochBase = (epoch: number): bigint => {
  if (!Number.isInteger(epoch) || epoch < 0 || epoch >= maxStreamEpoch) throw new Error(`epoch ${epoch} is outside the update streams' timestamps`);
  return 2n ** 56n + BigInt(epoch) * 2n ** 32n;
};

/**
 * The write timestamp of an owner's rows in a stream: its epoch, above any wall clock (2^56 µs is
 * the year 4253), so a newer epoch's cells and tombstones win over an older epoch's in whatever
 * order they land; then the batch's highest sn (below 2^31), which orders one epoch's writes of the
 * same cell (the head's statics).
 */
export const streamWriteTimestamp = (epoch: number, sn: number): bigint => epochBase(epoch) + BigInt(sn);

/** The epoch a stream row was written under, from its write timestamp (WRITETIME). */
export const epochOfStreamWrite = (timestamp: bigint): number => Number((timestamp - 2n ** 56n) >> 32n);

/** Where an owner's claim of a stream writes its tombstones: below everything of its own epoch, above everything of an older one. */
export const streamClaimTimestamp = (epoch: number): bigint => epochBase(epoch) - 1n;

/** Pruning removes sns no owner writes again: above every epoch's timestamps, so nothing older comes back. */
export const streamPruneTimestamp = epochBase(maxStreamEpoch - 1) + 2n ** 32n;

export interface StreamHead {
  /** The newest bucket: the next append writes it, unless it is full. */
  firstSn: number;
  latestSn: number;
  /** The bucket partitions the head was read from, newest first: the ones an older owner may still be writing. */
  readBuckets: number[];
  /** Its `stream_buckets` row exists. */
  listed: boolean;
  /** `pending_handoffs` of the bucket the last append wrote (an agent's webhook hand-off, §5.6), as stored. */
  pendingHandoffs: unknown;
}

/**
 * The stream's head as stored: the statics of its newest bucket, or of the one before when the
 * newest is listed but was never written (a writer stopped between listing and writing it, which is
 * why pruning never drops the bucket before the newest whole). An empty stream starts at bucket 1.
 */
export async function readStreamHead(cql: Cql, userId: number): Promise<StreamHead> {
  const listed = (await cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ? LIMIT 2", [userId])).map((row) => row.first_sn as number);
  if (listed.length === 0) return { firstSn: 1, latestSn: 0, readBuckets: [], listed: false, pendingHandoffs: null };
  const staticsOf = (firstSn: number) => cql.row("SELECT latest_sn, pending_handoffs FROM stream_entries WHERE user_id = ? AND first_sn = ? LIMIT 1", [userId, firstSn]);
  const newest = await staticsOf(listed[0]);
  if (newest && newest.latest_sn !== null) {
    return { firstSn: listed[0], latestSn: newest.latest_sn as number, readBuckets: listed.slice(0, 1), listed: true, pendingHandoffs: newest.pending_handoffs };
  }
  const previous = listed.length > 1 ? await staticsOf(listed[1]) : undefined;
  return {
    firstSn: listed[0],
    latestSn: (previous?.latest_sn as number | null | undefined) ?? 0,
    readBuckets: listed,
    listed: true,
    pendingHandoffs: previous?.pending_handoffs ?? null,
  };
}
