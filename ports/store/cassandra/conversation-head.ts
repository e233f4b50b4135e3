// The conversation head on the message path (DATA-MODEL.md §5.10): the static columns one LWT per
// message commits through, and the roll-forward of the write that LWT committed. A group's changes
// commit through its conversation's head too (§5.9), under the same owner epoch.
//
// A message write is durable once its head LWT applies: the LWT stores the whole write in
// `pending_write`. Its rows (the message, its client id, its outbox fan-out, its open stream, its
// list moves) are written right after, idempotently, and the message row LAST: a message row that
// exists means every other row of its write exists too. Whoever reads a head whose pending write
// has no (or an older) message row writes its rows again. `pending_write` is never cleared (that
// would be a second Paxos round): the next LWT replaces it.
//
// The adapter keeps, per conversation it wrote or read, the head as it last saw it. Every LWT is
// conditioned on that snapshot (sequence and owner epoch), so an LWT that applies knows nobody
// wrote the head since, and hence that the pending write it replaces was rolled forward (by the
// read that filled the snapshot, or by this handle's own write, which rolls forward before it
// answers). A refused LWT reloads the snapshot at LOCAL_SERIAL, rolling forward what it finds.
import { Mailboxes } from "../../../shared/mailbox.js";
import type { FanOutRecord, MessageRecord } from "../store.js";
import { bytesOf, numberOf, type Cql, type Row, type Statement } from "./cql.js";
import type { CassandraContext } from "./context.js";
import { orderMoveStatements } from "./conversation-order.js";
import { fanOutStatements } from "./outbox-rows.js";
import { sweepEntry } from "./sweep-index.js";

/** Messages per `messages` partition: `bucket = message_id >> 12` (ids are dense per conversation). */
export const bucketOf = (messageId: bigint): number => Number(messageId >> 12n);
/**
 * Whether a message id can name a stored message: positive, with a bucket an `int` holds. Ids are
 * dense from 1, so one past 2^43 is never assigned; asked for by a client, it names nothing (the
 * driver would throw on its bucket instead of finding no row).
 */
export const isStorableMessageId = (messageId: bigint): boolean => messageId > 0n && messageId >> 12n <= BigInt(2 ** 31 - 1);

/** A write committed by a head LWT, kept in `pending_write` until its rows exist. */
export type PendingWrite =
  | {
      kind: "insert";
      message: MessageRecord;
      fanOut?: FanOutRecord;
      opensStream: boolean;
      /** With recordAsLast: the participants whose lists move, from the previous last message time. */
      listMove?: { participants: number[]; previousTime: number | undefined };
    }
  | {
      kind: "update";
      conversationId: bigint;
      messageId: bigint;
      /** The message as the update leaves it; null when it does not exist (only the fan-out and stream close are written). */
      message: MessageRecord | null;
      fanOut?: FanOutRecord;
      closesStream: boolean;
    }
  | {
      /** A group change of the group's conversation (groups.ts): its rows and outbox records. */
      kind: "group";
      statements: Statement[];
      /** Their write timestamp (µs), fixed at commit: writing them again never overrides what was written after them. */
      at: bigint;
    };

/** The head as this handle last saw it: what its next LWT is conditioned on. */
export interface HeadSnapshot {
  /** The highest message id written (the sequence); null before the first message. */
  latestMessageId: bigint | null;
  /** The epoch of the last fenced write; null when nobody fenced a write yet. */
  ownerEpoch: number | null;
  /** The listed last message time (set by the conversation's creation and by recordAsLast). */
  lastMessageTime: number | undefined;
  pending: PendingWrite | undefined;
}

export const messageColumns =
  "conversation_id, bucket, message_id, sender_id, client_message_id, body, reply_to, metadata, created_at, updated_at, edited";

export function messageOf(row: Row): MessageRecord {
  const metadata = row.metadata as Map<string, string> | null;
  return {
    conversationId: row.conversation_id as bigint,
    messageId: row.message_id as bigint,
    senderId: row.sender_id as number,
    clientMessageId: row.client_message_id as bigint,
    body: bytesOf(row.body),
    replyTo: row.reply_to === null ? null : bytesOf(row.reply_to),
    metadata: metadata ? Object.fromEntries(metadata) : {},
    createdAt: numberOf(row.created_at),
    updatedAt: row.updated_at === null ? null : numberOf(row.updated_at),
    edited: row.edited === true,
  };
}

export function messageRowStatement(m: MessageRecord): Statement {
  return {
    query: `INSERT INTO messages (${messageColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    params: [
      m.conversationId,
      bucketOf(m.messageId),
      m.messageId,
      m.senderId,
      m.clientMessageId,
      Buffer.from(m.body),
      m.replyTo ? Buffer.from(m.replyTo) : null,
      new Map(Object.entries(m.metadata)),
      BigInt(m.createdAt),
      m.updatedAt === null ? null : BigInt(m.updatedAt),
      m.edited,
    ],
  };
}

export async function readMessage(cql: Cql, conversationId: bigint, messageId: bigint, serial = false): Promise<MessageRecord | undefined> {
  if (!isStorableMessageId(messageId)) return undefined;
  const row = await cql.row(`SELECT ${messageColumns} FROM messages WHERE conversation_id = ? AND bucket = ? AND message_id = ?`, [conversationId, bucketOf(messageId), messageId], {
    serial,
  });
  return row && messageOf(row);
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

/** How many heads a handle remembers; a forgotten one costs a LOCAL_SERIAL read on its next write. */
const snapshotCapacity = 50_000;

export class ConversationHeads {
  private readonly snapshots = new Map<bigint, HeadSnapshot>();
  private readonly writers = new Mailboxes();

  constructor(private readonly cql: Cql) {}

  /**
   * Runs a head write (its LWT and its roll-forward) after this handle's earlier ones of the same
   * conversation. Its LWT then never replaces a pending write whose rows this handle is still
   * writing, and a group change does not keep losing its LWT to the messages its node writes to
   * the group meanwhile (the conversation actor serialises only those).
   */
  exclusive<T>(conversationId: bigint, work: () => Promise<T>): Promise<T> {
    return this.writers.run(String(conversationId), work);
  }

  /** The snapshot to condition the next write on: remembered, or read (and rolled forward). */
  async known(conversationId: bigint): Promise<HeadSnapshot> {
    return this.snapshots.get(conversationId) ?? this.reload(conversationId);
  }

  /**
   * Reads the head at LOCAL_SERIAL (so an LWT in flight is seen), writes the rows of its pending
   * write if they are missing, and remembers it.
   */
  async reload(conversationId: bigint): Promise<HeadSnapshot> {
    const row = await this.cql.row("SELECT latest_message_id, last_message_time, owner_epoch, pending_write FROM conversations WHERE conversation_id = ? LIMIT 1", [conversationId], {
      serial: true,
    });
    const head: HeadSnapshot = {
      latestMessageId: (row?.latest_message_id as bigint | null | undefined) ?? null,
      ownerEpoch: (row?.owner_epoch as number | null | undefined) ?? null,
      lastMessageTime: row?.last_message_time === null || row?.last_message_time === undefined ? undefined : numberOf(row.last_message_time),
      pending: row?.pending_write ? decodePendingWrite(row.pending_write as Buffer) : undefined,
    };
    if (head.pending) await this.rollForwardIfMissing(head.pending);
    this.remember(conversationId, head);
    return head;
  }

  /** Reads the head's pending write (LOCAL_QUORUM) and writes its rows if they are missing; for readers that did not write the head. */
  async settle(conversationId: bigint): Promise<PendingWrite | undefined> {
    const row = await this.cql.row("SELECT pending_write FROM conversations WHERE conversation_id = ? LIMIT 1", [conversationId]);
    const pending = row?.pending_write ? decodePendingWrite(row.pending_write as Buffer) : undefined;
    if (pending) await this.rollForwardIfMissing(pending);
    return pending;
  }

  /** The head after this handle's LWT applied. */
  remember(conversationId: bigint, head: HeadSnapshot): void {
    this.snapshots.delete(conversationId);
    this.snapshots.set(conversationId, head);
    if (this.snapshots.size > snapshotCapacity) this.snapshots.delete(this.snapshots.keys().next().value!);
  }

  forget(conversationId: bigint): void {
    this.snapshots.delete(conversationId);
  }

  /** Writes the rows of a committed write: everything else first, the message row last (it marks the write complete). */
  async rollForward(write: PendingWrite): Promise<void> {
    if (write.kind === "group") return this.cql.batch(write.statements, { timestamp: write.at });
    await this.cql.writeAll(sideStatements(write));
    if (!write.message) return;
    const row = messageRowStatement(write.message);
    await this.cql.write(row.query, row.params);
  }

  private async rollForwardIfMissing(write: PendingWrite): Promise<void> {
    if (await this.isRolledForward(write)) return;
    await this.rollForward(write);
  }

  /** Whether the write's message row is there as the write left it (an update of a missing message is always written again: harmless). */
  private async isRolledForward(write: PendingWrite): Promise<boolean> {
    // A group change has no row that marks it written: it is written again, harmlessly (its fixed
    // timestamp), and rarely, since its own system message's write usually replaces it at once.
    if (write.kind === "group" || !write.message) return false;
    const stored = await readMessage(this.cql, write.message.conversationId, write.message.messageId);
    if (!stored) return false;
    if (write.kind === "insert") return true;
    return stored.updatedAt === write.message.updatedAt && stored.edited === write.message.edited && sameBytes(stored.body, write.message.body);
  }
}

/** The rows of a committed message write besides the message row. */
function sideStatements(write: Exclude<PendingWrite, { kind: "group" }>): Statement[] {
  const statements: Statement[] = [];
  if (write.fanOut) statements.push(...fanOutStatements(write.fanOut));
  if (write.kind === "insert") {
    const m = write.message;
    if (m.clientMessageId > 0n) {
      statements.push({
        query: "INSERT INTO message_client_ids (conversation_id, sender_id, client_message_id, message_id) VALUES (?, ?, ?, ?)",
        params: [m.conversationId, m.senderId, m.clientMessageId, m.messageId],
      });
    }
    if (write.opensStream) {
      statements.push(sweepEntry("open_streams", String(m.conversationId)), {
        query: "INSERT INTO open_streams (conversation_id, message_id, sender_id, started_at) VALUES (?, ?, ?, ?)",
        params: [m.conversationId, m.messageId, m.senderId, BigInt(m.createdAt)],
      });
    }
    if (write.listMove) statements.push(...orderMoveStatements(write.listMove.participants, m.conversationId, write.listMove.previousTime, m.createdAt));
  } else if (write.closesStream) {
    statements.push({ query: "DELETE FROM open_streams WHERE conversation_id = ? AND message_id = ?", params: [write.conversationId, write.messageId] });
  }
  return statements;
}

// pending_write is JSON: ids as decimal strings (they pass 2^53), bytes as base64.
type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

const messageJson = (m: MessageRecord): Json => ({
  conversationId: String(m.conversationId),
  messageId: String(m.messageId),
  senderId: m.senderId,
  clientMessageId: String(m.clientMessageId),
  body: Buffer.from(m.body).toString("base64"),
  replyTo: m.replyTo ? Buffer.from(m.replyTo).toString("base64") : null,
  metadata: m.metadata,
  createdAt: m.createdAt,
  updatedAt: m.updatedAt,
  edited: m.edited,
});

const messageFromJson = (j: Record<string, Json>): MessageRecord => ({
  conversationId: BigInt(j.conversationId as string),
  messageId: BigInt(j.messageId as string),
  senderId: j.senderId as number,
  clientMessageId: BigInt(j.clientMessageId as string),
  body: new Uint8Array(Buffer.from(j.body as string, "base64")),
  replyTo: j.replyTo === null ? null : new Uint8Array(Buffer.from(j.replyTo as string, "base64")),
  metadata: j.metadata as Record<string, string>,
  createdAt: j.createdAt as number,
  updatedAt: j.updatedAt as number | null,
  edited: j.edited as boolean,
});

const fanOutJson = (f: FanOutRecord): Json => ({
  fanOutId: String(f.fanOutId),
  scope: f.scope,
  recipients: f.recipients,
  entry: Buffer.from(f.entry).toString("base64"),
  related: f.related,
  createdAt: f.createdAt,
});

const fanOutFromJson = (j: Record<string, Json>): FanOutRecord => ({
  fanOutId: BigInt(j.fanOutId as string),
  scope: j.scope as string,
  recipients: j.recipients as number[],
  entry: new Uint8Array(Buffer.from(j.entry as string, "base64")),
  related: j.related as string,
  createdAt: j.createdAt as number,
});

/** A statement parameter as JSON: int64 values and bytes tagged, the rest as they are. */
function paramJson(value: unknown): Json {
  if (typeof value === "bigint") return { int64: String(value) };
  if (value instanceof Uint8Array) return { bytes: Buffer.from(value).toString("base64") };
  if (Array.isArray(value)) return value.map(paramJson);
  if (value === null || typeof value === "number" || typeof value === "string" || typeof value === "boolean") return value;
  throw new Error(`conversation head: a pending write cannot keep a parameter of type ${typeof value}`);
}

function paramFromJson(j: Json): unknown {
  if (Array.isArray(j)) return j.map(paramFromJson);
  if (j === null || typeof j !== "object") return j;
  return "int64" in j ? BigInt(j.int64 as string) : Buffer.from(j.bytes as string, "base64");
}

export function encodePendingWrite(write: PendingWrite): Buffer {
  if (write.kind === "group") {
    const statements = write.statements.map((statement): Json => ({ query: statement.query, params: statement.params.map(paramJson) }));
    return Buffer.from(JSON.stringify({ kind: "group", statements, at: String(write.at) }));
  }
  const json: Json =
    write.kind === "insert"
      ? {
          kind: "insert",
          message: messageJson(write.message),
          fanOut: write.fanOut ? fanOutJson(write.fanOut) : null,
          opensStream: write.opensStream,
          listMove: write.listMove ? { participants: write.listMove.participants, previousTime: write.listMove.previousTime ?? null } : null,
        }
      : {
          kind: "update",
          conversationId: String(write.conversationId),
          messageId: String(write.messageId),
          message: write.message ? messageJson(write.message) : null,
          fanOut: write.fanOut ? fanOutJson(write.fanOut) : null,
          closesStream: write.closesStream,
        };
  return Buffer.from(JSON.stringify(json));
}

export function decodePendingWrite(bytes: Buffer): PendingWrite {
  const j = JSON.parse(bytes.toString("utf8")) as Record<string, Json>;
  const fanOut = j.fanOut ? fanOutFromJson(j.fanOut as Record<string, Json>) : undefined;
  if (j.kind === "insert") {
    const move = j.listMove as { participants: number[]; previousTime: number | null } | null;
    return {
      kind: "insert",
      message: messageFromJson(j.message as Record<string, Json>),
      fanOut,
      opensStream: j.opensStream as boolean,
      listMove: move ? { participants: move.participants, previousTime: move.previousTime ?? undefined } : undefined,
    };
  }
  if (j.kind === "update") {
    return {
      kind: "update",
      conversationId: BigInt(j.conversationId as string),
      messageId: BigInt(j.messageId as string),
      message: j.message ? messageFromJson(j.message as Record<string, Json>) : null,
      fanOut,
      closesStream: j.closesStream as boolean,
    };
  }
  if (j.kind === "group") {
    const statements = (j.statements as { query: string; params: Json[] }[]).map((statement) => ({ query: statement.query, params: statement.params.map(paramFromJson) }));
    return { kind: "group", statements, at: BigInt(j.at as string) };
  }
  throw new Error(`conversation head: unknown pending write kind ${String(j.kind)}`);
}

const headsOfContext = new WeakMap<CassandraContext, ConversationHeads>();

/** The one head cache of a store handle, shared by its message and outbox parts. */
export function conversationHeads(ctx: CassandraContext): ConversationHeads {
  let heads = headsOfContext.get(ctx);
  if (!heads) {
    heads = new ConversationHeads(ctx.cql);
    headsOfContext.set(ctx, heads);
  }
  return heads;
}
