// Conversation ids and message ids are int64 (a PRIVATE id packs two user ids), so every
// statement here reads integers as bigint (safeIntegers) and converts the small ones back.
import type Database from "better-sqlite3";
import type { ConversationKindValue, ConversationRecord, ConversationStore, UserConversationRecord } from "../store.js";
import type { Recorder } from "./outbox.js";

interface ConversationRow {
  conversation_id: bigint;
  type: bigint;
  last_message_id: bigint;
  last_message_time: bigint;
  created_at: bigint;
}

interface StateRow {
  user_id: bigint;
  conversation_id: bigint;
  is_muted: bigint;
  is_deleted: bigint;
  last_read_message_id: bigint;
  cleared_up_to: bigint;
}

const toConversation = (row: ConversationRow): ConversationRecord => ({
  conversationId: row.conversation_id,
  type: Number(row.type) as ConversationKindValue,
  lastMessageId: row.last_message_id,
  lastMessageTime: Number(row.last_message_time),
  createdAt: Number(row.created_at),
});

const toState = (row: StateRow): UserConversationRecord => ({
  userId: Number(row.user_id),
  conversationId: row.conversation_id,
  isMuted: row.is_muted === 1n,
  isDeleted: row.is_deleted === 1n,
  lastReadMessageId: row.last_read_message_id,
  clearedUpTo: row.cleared_up_to,
});

/**
 * Records a conversation's new last message: shared with the message store, so that a message
 * and its place in the conversation list commit in one transaction.
 */
export function lastMessageWriter(db: Database.Database) {
  // Every participant's state row exists and is not deleted, in one statement for all of them
  // (two per participant made a 200-member group message cost 400 statements).
  const ensureStates = db.prepare(
    `INSERT INTO user_conversations (user_id, conversation_id) SELECT value, ? FROM json_each(?) WHERE true
     ON CONFLICT (user_id, conversation_id) DO UPDATE SET is_deleted = 0 WHERE is_deleted = 1`,
  );
  const recordMessage = db.prepare("UPDATE conversations SET last_message_id = ?, last_message_time = ? WHERE conversation_id = ? AND last_message_id < ?");
  return db.transaction((conversationId: bigint, messageId: bigint, at: number, participants: readonly number[]) => {
    recordMessage.run(messageId, at, conversationId, messageId);
    if (participants.length > 0) ensureStates.run(conversationId, JSON.stringify(participants));
  });
}

export type LastMessageWriter = ReturnType<typeof lastMessageWriter>;

export function conversationStore(db: Database.Database, recordLastMessage: LastMessageWriter, record: Recorder): ConversationStore {
  const insertState = db.prepare("INSERT OR IGNORE INTO user_conversations (user_id, conversation_id) VALUES (?, ?)");
  const conversation = db.prepare<[bigint], ConversationRow>("SELECT * FROM conversations WHERE conversation_id = ?").safeIntegers(true);
  const state = db.prepare<[number, bigint], StateRow>("SELECT * FROM user_conversations WHERE user_id = ? AND conversation_id = ?").safeIntegers(true);
  const setMuted = db.prepare("UPDATE user_conversations SET is_muted = ? WHERE user_id = ? AND conversation_id = ?");
  const mutedAmong = db
    .prepare<[bigint, string], { user_id: bigint }>(
      "SELECT user_id FROM user_conversations WHERE conversation_id = ? AND is_muted = 1 AND user_id IN (SELECT value FROM json_each(?))",
    )
    .safeIntegers(true);
  const markDeleted = db.prepare("UPDATE user_conversations SET is_deleted = 1 WHERE user_id = ? AND conversation_id = ?");
  const clear = db.prepare("UPDATE user_conversations SET cleared_up_to = MAX(cleared_up_to, ?) WHERE user_id = ? AND conversation_id = ?");
  const advanceRead = db.prepare(
    "UPDATE user_conversations SET last_read_message_id = MAX(last_read_message_id, ?) WHERE user_id = ? AND conversation_id = ?",
  );
  const list = db
    .prepare<[number, number, number], ConversationRow & { s_user_id: bigint; is_muted: bigint; is_deleted: bigint; last_read_message_id: bigint; cleared_up_to: bigint }>(
      `SELECT c.*, s.user_id AS s_user_id, s.is_muted, s.is_deleted, s.last_read_message_id, s.cleared_up_to
       FROM user_conversations s JOIN conversations c ON c.conversation_id = s.conversation_id
       WHERE s.user_id = ? AND s.is_deleted = 0 AND c.last_message_time < ?
       ORDER BY c.last_message_time DESC, c.conversation_id DESC LIMIT ?`,
    )
    .safeIntegers(true);

  /** Deletes history up to `upTo` (never back) and counts it read: deleted messages cannot stay unread. */
  const clearAndRead = (userId: number, conversationId: bigint, upTo: bigint) => {
    insertState.run(userId, conversationId);
    clear.run(upTo, userId, conversationId);
    advanceRead.run(upTo, userId, conversationId);
  };
  const getState = (userId: number, conversationId: bigint) => {
    insertState.run(userId, conversationId);
    return toState(state.get(userId, conversationId)!);
  };

  return {
    async getConversation(conversationId) {
      const row = conversation.get(conversationId);
      return row && toConversation(row);
    },
    async getUserState(userId, conversationId) {
      return getState(userId, conversationId);
    },
    async mutedAmong(conversationId, userIds) {
      if (userIds.length === 0) return [];
      return mutedAmong.all(conversationId, JSON.stringify(userIds)).map((row) => Number(row.user_id));
    },
    async setMuted(userId, conversationId, muted, events) {
      record(() => {
        insertState.run(userId, conversationId);
        setMuted.run(muted ? 1 : 0, userId, conversationId);
      }, events);
    },
    async markDeleted(userId, conversationId, clearUpTo, events) {
      record(() => {
        clearAndRead(userId, conversationId, clearUpTo);
        markDeleted.run(userId, conversationId);
      }, events);
    },
    async advanceRead(userId, conversationId, upTo, events) {
      return record(() => {
        insertState.run(userId, conversationId);
        advanceRead.run(upTo, userId, conversationId);
        return getState(userId, conversationId).lastReadMessageId;
      }, events);
    },
    async clearHistory(userId, conversationId, upTo, events) {
      record(() => clearAndRead(userId, conversationId, upTo), events);
    },
    async recordMessage(conversationId, messageId, at, participants) {
      recordLastMessage(conversationId, messageId, at, participants);
    },
    async listForUser(userId, beforeTime, limit) {
      return list.all(userId, beforeTime, limit).map((row) => ({
        conversation: toConversation(row),
        state: toState({ ...row, user_id: row.s_user_id }),
      }));
    },
  };
}
