import type Database from "better-sqlite3";
import type { MessageRecord, MessageStore, MessageWriteOptions } from "../store.js";
import type { LastMessageWriter } from "./conversations.js";
import type { FenceCheck } from "./leases.js";
import type { OutboxWriter, Recorder } from "./outbox.js";

interface MessageRow {
  conversation_id: bigint;
  message_id: bigint;
  sender_id: bigint;
  client_message_id: bigint;
  body: Buffer;
  reply_to: Buffer | null;
  metadata: string;
  created_at: bigint;
  updated_at: bigint | null;
  edited: bigint;
}

const toMessage = (row: MessageRow): MessageRecord => ({
  conversationId: row.conversation_id,
  messageId: row.message_id,
  senderId: Number(row.sender_id),
  clientMessageId: row.client_message_id,
  body: new Uint8Array(row.body),
  replyTo: row.reply_to ? new Uint8Array(row.reply_to) : null,
  metadata: JSON.parse(row.metadata) as Record<string, string>,
  createdAt: Number(row.created_at),
  updatedAt: row.updated_at === null ? null : Number(row.updated_at),
  edited: row.edited === 1n,
});

function constraintCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null ? (err as { code?: string }).code : undefined;
}

export function messageStore(db: Database.Database, recordAsLast: LastMessageWriter, outbox: OutboxWriter, record: Recorder, requireFence: FenceCheck): MessageStore {
  const insert = db.prepare(`INSERT INTO messages (conversation_id, message_id, sender_id, client_message_id, body, reply_to, metadata, created_at, updated_at, edited)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const latest = db.prepare<[bigint], { id: bigint | null }>("SELECT MAX(message_id) AS id FROM messages WHERE conversation_id = ?").safeIntegers(true);
  const byId = db.prepare<[bigint, bigint], MessageRow>("SELECT * FROM messages WHERE conversation_id = ? AND message_id = ?").safeIntegers(true);
  const byClientId = db
    .prepare<[bigint, number, bigint], MessageRow>("SELECT * FROM messages WHERE conversation_id = ? AND sender_id = ? AND client_message_id = ?")
    .safeIntegers(true);
  const update = db.prepare("UPDATE messages SET body = ?, updated_at = ?, edited = ? WHERE conversation_id = ? AND message_id = ?");
  const openStream = db.prepare("INSERT OR IGNORE INTO open_streams (conversation_id, message_id, sender_id, started_at) VALUES (?, ?, ?, ?)");
  const closeStream = db.prepare("DELETE FROM open_streams WHERE conversation_id = ? AND message_id = ?");
  const openStreams = db
    .prepare<[number, number], { conversation_id: bigint; message_id: bigint; sender_id: bigint; started_at: bigint }>(
      "SELECT * FROM open_streams WHERE started_at <= ? ORDER BY started_at, conversation_id, message_id LIMIT ?",
    )
    .safeIntegers(true);
  /** The writes that travel with a message write. */
  const alongside = (conversationId: bigint, messageId: bigint, at: number, options: MessageWriteOptions | undefined) => {
    if (options?.recordAsLast) recordAsLast(conversationId, messageId, at, options.recordAsLast.participants);
    if (options?.fanOut) outbox.write(options.fanOut);
    if (options?.postsSystemMessage !== undefined) outbox.systemMessagePosted(options.postsSystemMessage);
  };
  const insertWithStream = db.transaction((m: MessageRecord, options: (MessageWriteOptions & { opensStream?: boolean }) | undefined) => {
    requireFence(options?.fence);
    insert.run(
      m.conversationId,
      m.messageId,
      m.senderId,
      m.clientMessageId,
      Buffer.from(m.body),
      m.replyTo ? Buffer.from(m.replyTo) : null,
      JSON.stringify(m.metadata),
      m.createdAt,
      m.updatedAt,
      m.edited ? 1 : 0,
    );
    if (options?.opensStream) openStream.run(m.conversationId, m.messageId, m.senderId, m.createdAt);
    alongside(m.conversationId, m.messageId, m.createdAt, options);
  });
  const updateWithStream = db.transaction(
    (
      conversationId: bigint,
      messageId: bigint,
      change: Pick<MessageRecord, "body" | "updatedAt" | "edited">,
      options: (Pick<MessageWriteOptions, "fanOut" | "fence"> & { closesStream?: boolean }) | undefined,
    ) => {
      requireFence(options?.fence);
      update.run(Buffer.from(change.body), change.updatedAt, change.edited ? 1 : 0, conversationId, messageId);
      if (options?.closesStream) closeStream.run(conversationId, messageId);
      alongside(conversationId, messageId, change.updatedAt ?? 0, options);
    },
  );
  const visibleBefore = db
    .prepare<[bigint, bigint, bigint, number, bigint, number], MessageRow>(
      `SELECT m.* FROM messages m WHERE m.conversation_id = ? AND m.message_id < ? AND m.message_id > ?
       AND NOT EXISTS (SELECT 1 FROM message_deletions d WHERE d.user_id = ? AND d.conversation_id = ? AND d.message_id = m.message_id)
       ORDER BY m.message_id DESC LIMIT ?`,
    )
    .safeIntegers(true);
  const visibleAfter = db
    .prepare<[bigint, bigint, number, bigint, number], MessageRow>(
      `SELECT m.* FROM messages m WHERE m.conversation_id = ? AND m.message_id > ?
       AND NOT EXISTS (SELECT 1 FROM message_deletions d WHERE d.user_id = ? AND d.conversation_id = ? AND d.message_id = m.message_id)
       ORDER BY m.message_id ASC LIMIT ?`,
    )
    .safeIntegers(true);
  const deletion = db.prepare<[number, bigint, bigint], { n: bigint }>(
    "SELECT COUNT(*) AS n FROM message_deletions WHERE user_id = ? AND conversation_id = ? AND message_id = ?",
  ).safeIntegers(true);
  const exists = db.prepare<[bigint, bigint], { n: bigint }>("SELECT COUNT(*) AS n FROM messages WHERE conversation_id = ? AND message_id = ?").safeIntegers(true);
  const insertDeletion = db.prepare("INSERT OR IGNORE INTO message_deletions (user_id, conversation_id, message_id) VALUES (?, ?, ?)");
  const deleteMany = db.transaction((userId: number, conversationId: bigint, ids: readonly bigint[], clearedUpTo: bigint) => {
    const deleted: bigint[] = [];
    for (const id of new Set(ids)) {
      if (id <= clearedUpTo || exists.get(conversationId, id)!.n === 0n) continue;
      if (insertDeletion.run(userId, conversationId, id).changes > 0) deleted.push(id);
    }
    return deleted;
  });

  return {
    async insertMessage(m, options) {
      try {
        insertWithStream(m, options);
        return { outcome: "ok" };
      } catch (err) {
        const code = constraintCode(err);
        if (code === "SQLITE_CONSTRAINT_PRIMARYKEY") return { outcome: "conflict" };
        if (code === "SQLITE_CONSTRAINT_UNIQUE") {
          const existing = byClientId.get(m.conversationId, m.senderId, m.clientMessageId);
          if (existing) return { outcome: "duplicate", existing: toMessage(existing) };
        }
        throw err;
      }
    },
    async latestMessageId(conversationId) {
      return latest.get(conversationId)?.id ?? 0n;
    },
    async getMessage(conversationId, messageId) {
      const row = byId.get(conversationId, messageId);
      return row && toMessage(row);
    },
    async findByClientMessageId(conversationId, senderId, clientMessageId) {
      const row = byClientId.get(conversationId, senderId, clientMessageId);
      return row && toMessage(row);
    },
    async updateMessage(conversationId, messageId, change, options) {
      updateWithStream(conversationId, messageId, change, options);
    },
    async listOpenStreams(startedBefore, limit) {
      return openStreams.all(startedBefore, limit).map((row) => ({
        conversationId: row.conversation_id,
        messageId: row.message_id,
        senderId: Number(row.sender_id),
        startedAt: Number(row.started_at),
      }));
    },
    async listVisible(userId, conversationId, direction, cursor, clearedUpTo, limit) {
      const rows =
        direction === "before"
          ? visibleBefore.all(conversationId, cursor, clearedUpTo, userId, conversationId, limit)
          : visibleAfter.all(conversationId, cursor > clearedUpTo ? cursor : clearedUpTo, userId, conversationId, limit);
      return rows.map(toMessage);
    },
    async isDeletedFor(userId, conversationId, messageId) {
      return deletion.get(userId, conversationId, messageId)!.n > 0n;
    },
    async deleteFor(userId, conversationId, messageIds, clearedUpTo, events) {
      return record(() => deleteMany(userId, conversationId, messageIds, clearedUpTo), events);
    },
  };
}
