// Each user's update stream: events stored once, the entries that give each stream its sns: one aggregate of the storage port (store.ts).
import type { Fence } from "./lease-store.js";

/**
 * An event as the update streams keep it: its entry stored once, however many streams hold it. Each
 * stream holds it by reference (a StreamEntry), so a group event costs one entry plus one small
 * row per member.
 */
export interface LoggedEvent {
  /** The fan-out it comes from (fan-out ids are unique). */
  eventId: bigint;
  /** The protobuf binary form of the api.v1.SnUpdate, without sn. */
  entry: Uint8Array;
}

/** One position of one user's stream: the sn and the event it holds. */
export interface StreamEntry {
  userId: number;
  sn: number;
  eventId: bigint;
}

/** An entry of a user's stream as read back. */
export interface StoredUpdate {
  sn: number;
  /** The protobuf binary form of the api.v1.SnUpdate, without sn (the reader sets it from `sn`). */
  entry: Uint8Array;
}

/** What an append to a WEBHOOK-mode agent's stream hands to the webhook queue. */
export interface WebhookHandoff {
  agentUserId: number;
  /** Bodies to queue, in order (only the entries that are sent by webhook). */
  bodies: readonly string[];
  /** When they were queued (they are due at once). */
  queuedAt: number;
  /** The agent's delivered position moves here: the webhook took over every entry up to it. */
  deliveredSn: number;
}

/**
 * One write of the update streams, committed as a whole or not at all: events, the stream entries
 * that reference them (several users, several events), and the webhook hand-offs of the agents
 * among those users. An object, so that conditions on the write (an owner's fence) can join it.
 */
export interface UpdateAppend {
  /** Every event an entry references; an event already stored is referenced again, not rewritten. */
  events: readonly LoggedEvent[];
  entries: readonly StreamEntry[];
  handoffs?: readonly WebhookHandoff[];
  createdAt: number;
  /**
   * The owner's fences of the streams written (one per shard): a stale one throws
   * OwnershipLostError. Without `holder`, checked before anything is written. With it, a store may
   * write first and confirm after (Cassandra: no read of the leases, no condition per stream); what
   * a refused write left is then never an acknowledged entry, and is shadowed once the new owner
   * writes the stream.
   */
  fences?: readonly Fence[];
  /** The process writing under the fences, asked after the write whether it still owns them. */
  holder?: FenceHolder;
}

/**
 * How the writer of a fenced append proves, after writing and before the append answers, that it
 * still owned the streams: by the revocations a takeover of its unexpired lease records under its
 * instance first (LeaseStore), then by its own view (a lease released, lost or past its trust).
 */
export interface FenceHolder {
  /** LeaseHolder.instance of the writing process. */
  instance: string;
  /** The first of the fences this process no longer holds or trusts by its own clock; undefined when it trusts them all. */
  untrusted(fences: readonly Fence[]): Fence | undefined;
}

/** "ok", or the users whose sn values were taken or whose streams hold an event already (their writer's view is stale): nothing was written. */
export type AppendOutcome = { ok: true } | { ok: false; conflicts: number[] };

/**
 * Users' update streams. Shaped for a partitioned database: a user's entries are one partition
 * ordered by sn (sn -> event id), events are keyed by id. An event is kept while any stream still
 * holds it; how the adapter knows (reference counts, a scan) is its own affair.
 */
export interface UpdateStreamStore {
  /** The highest sn stored for the user, 0 when none. */
  latestSn(userId: number): Promise<number>;
  /** latestSn of each of these users, in one read. */
  latestSns(userIds: readonly number[]): Promise<Map<number, number>>;
  /** The lowest sn still retained for the user, or undefined when none is. */
  oldestRetainedSn(userId: number): Promise<number | undefined>;
  /**
   * Writes the append atomically. Fails with the users whose sn is already taken (or given twice),
   * or whose stream already holds an event given to it (or is given one event twice), and writes
   * nothing when any is: their writer's sequence, or what it read of the holders, is stale. A
   * stream never holds one event twice, whoever writes it. An event id met again with a different
   * entry is an error (ids are unique).
   */
  append(write: UpdateAppend): Promise<AppendOutcome>;
  /** Which of these users' streams (their retained entries) already hold the event. */
  holders(eventId: bigint, userIds: readonly number[]): Promise<number[]>;
  /** Entries with sn > afterSn in ascending order, at most `limit`. */
  readUpdates(userId: number, afterSn: number, limit: number): Promise<StoredUpdate[]>;
  /** Deletes the user's entries with sn <= upToSn (retention), and the events no stream holds any more. */
  pruneUpdates(userId: number, upToSn: number): Promise<void>;
}
