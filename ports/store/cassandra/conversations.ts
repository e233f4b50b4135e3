// Conversations (DATA-MODEL.md §5.3, §6.1): the head's static columns, each user's state in a
// conversation, the mutes by conversation, and each user's list order rows. Read and cleared
// positions are max registers: every write of them carries USING TIMESTAMP derived from the value,
// so the largest value wins in any order with no read or LWT. A deleted conversation is one whose
// last message is not past the user's hidden_through: a new message lists it again by itself.
import type { ConversationKindValue, ConversationRecord, ConversationStore, UserConversationRecord } from "../store.js";
import type { CassandraContext } from "./context.js";
import { bigintOf, numberOf, type Cql, type Row, type Statement } from "./cql.js";
import { minuteOf, orderMoveStatements, orderRowStatements } from "./conversation-order.js";
import { commitWithEvents } from "./outbox-rows.js";

/** The head's fields a reader needs; `type` is absent on a head that a message write made for a conversation never created. */
interface Head {
  type: ConversationKindValue | undefined;
  createdAt: number;
  lastMessageId: bigint;
  lastMessageTime: number;
}

const headOf = (row: Row | undefined): Head | undefined => {
  if (!row) return undefined;
  const type = (row.type as number | null) || undefined;
  const createdAt = numberOf(row.created_at);
  return { type: type as ConversationKindValue | undefined, createdAt, lastMessageId: bigintOf(row.last_message_id), lastMessageTime: numberOf(row.last_message_time ?? row.created_at) };
};

export async function readHead(cql: Cql, conversationId: bigint): Promise<Head | undefined> {
  return headOf(await cql.row("SELECT type, created_at, last_message_id, last_message_time FROM conversations WHERE conversation_id = ? LIMIT 1", [conversationId]));
}

const toConversation = (conversationId: bigint, head: Head): ConversationRecord | undefined =>
  head.type === undefined ? undefined : { conversationId, type: head.type, lastMessageId: head.lastMessageId, lastMessageTime: head.lastMessageTime, createdAt: head.createdAt };

/**
 * Creates the conversation's head unless it exists (its first creation time is kept); answers the
 * head's last message time, where its members' list rows go. A head a message write made before
 * the conversation was created gets its type and creation time now; its sequence stays the
 * message writer's (this never writes last_message_id of an existing head).
 */
export async function createHead(cql: Cql, conversationId: bigint, type: ConversationKindValue, at: number): Promise<number> {
  const created = await cql.lwt(
    "INSERT INTO conversations (conversation_id, type, created_at, last_message_id, last_message_time, owner_epoch) VALUES (?, ?, ?, 0, ?, 0) IF NOT EXISTS",
    [conversationId, type, BigInt(at), BigInt(at)],
  );
  if (created.applied) return at;
  const existing = created.row!;
  const existingType = (existing.type as number | null) ?? null;
  if (!existingType) await cql.lwt("UPDATE conversations SET type = ?, created_at = ? WHERE conversation_id = ? IF type = ?", [type, BigInt(at), conversationId, existingType]);
  return numberOf(existing.last_message_time ?? at);
}

/**
 * The timestamp of a max-register write of `value`: positive (ScyllaDB refuses others) and ordered
 * like the values, so the largest value is the one kept.
 */
const registerTimestamp = (value: bigint) => value + 1n;

const readPositionStatement = (userId: number, conversationId: bigint, upTo: bigint): Statement => ({
  query: "UPDATE user_conversations USING TIMESTAMP ? SET last_read_message_id = ? WHERE user_id = ? AND conversation_id = ?",
  params: [registerTimestamp(upTo), upTo, userId, conversationId],
});

/** Deletes history up to `upTo` (never back) and counts it read: deleted messages cannot stay unread. */
const clearStatements = (userId: number, conversationId: bigint, upTo: bigint): Statement[] => [
  {
    query: "UPDATE user_conversations USING TIMESTAMP ? SET cleared_up_to = ? WHERE user_id = ? AND conversation_id = ?",
    params: [registerTimestamp(upTo), upTo, userId, conversationId],
  },
  readPositionStatement(userId, conversationId, upTo),
];

const toState = (userId: number, conversationId: bigint, row: Row | undefined, head: Head | undefined): UserConversationRecord => {
  const hiddenThrough = (row?.hidden_through as bigint | null | undefined) ?? null;
  return {
    userId,
    conversationId,
    isMuted: row?.is_muted === true,
    isDeleted: hiddenThrough !== null && (head?.lastMessageId ?? 0n) <= hiddenThrough,
    lastReadMessageId: bigintOf(row?.last_read_message_id),
    clearedUpTo: bigintOf(row?.cleared_up_to),
  };
};

/** The list's order: last message time, newest first, then conversation id, highest first (as SQLite orders it). */
const newestFirst = (x: { conversation: ConversationRecord }, y: { conversation: ConversationRecord }) =>
  y.conversation.lastMessageTime - x.conversation.lastMessageTime || Number(y.conversation.conversationId > x.conversation.conversationId) - Number(y.conversation.conversationId < x.conversation.conversationId);

/** The largest minute a conversation_order row can name (an int column). */
const maxMinute = 2 ** 31 - 1;

export function conversationStore(ctx: CassandraContext): ConversationStore {
  const { cql } = ctx;
  const readState = (userId: number, conversationId: bigint) =>
    cql.row("SELECT * FROM user_conversations WHERE user_id = ? AND conversation_id = ?", [userId, conversationId]);

  /**
   * The listed conversations among order rows read for one user: heads and states multi-read, rows
   * whose conversation moved later repaired (a move cut short), rows of another minute skipped.
   */
  async function listedAmong(userId: number, rows: readonly Row[]) {
    const ids = [...new Set(rows.map((row) => row.conversation_id as bigint))];
    const [heads, states] = await Promise.all([
      Promise.all(ids.map((id) => readHead(cql, id))),
      ids.length === 0 ? [] : cql.rows("SELECT * FROM user_conversations WHERE user_id = ? AND conversation_id IN ?", [userId, ids]),
    ]);
    const headById = new Map(ids.map((id, i) => [id, heads[i]]));
    const stateById = new Map(states.map((row) => [row.conversation_id as bigint, row]));
    const listed = new Map<bigint, { conversation: ConversationRecord; state: UserConversationRecord }>();
    const repairs: Statement[] = [];
    for (const row of rows) {
      const conversationId = row.conversation_id as bigint;
      const head = headById.get(conversationId);
      const conversation = head && toConversation(conversationId, head);
      if (!head || !conversation) continue;
      const rowMinute = row.order_minute as number;
      const headMinute = minuteOf(head.lastMessageTime);
      // A row ahead of its head is no move cut short (moves follow the head's write): left alone.
      if (rowMinute > headMinute) continue;
      if (rowMinute < headMinute) repairs.push(...orderMoveStatements([userId], conversationId, rowMinute * 60_000, head.lastMessageTime));
      listed.set(conversationId, { conversation, state: toState(userId, conversationId, stateById.get(conversationId), head) });
    }
    if (repairs.length > 0) await cql.writeAll(repairs);
    return [...listed.values()];
  }

  return {
    async getConversation(conversationId) {
      const head = await readHead(cql, conversationId);
      return head && toConversation(conversationId, head);
    },
    async getUserState(userId, conversationId) {
      // A missing row is the defaults: nothing is written for it.
      const [row, head] = await Promise.all([readState(userId, conversationId), readHead(cql, conversationId)]);
      return toState(userId, conversationId, row, head);
    },
    async mutedAmong(conversationId, userIds) {
      if (userIds.length === 0) return [];
      const muted = new Set((await cql.rows("SELECT user_id FROM conversation_mutes WHERE conversation_id = ?", [conversationId])).map((row) => row.user_id as number));
      return [...new Set(userIds)].filter((userId) => muted.has(userId));
    },
    async setMuted(userId, conversationId, muted, events) {
      await commitWithEvents(
        cql,
        undefined,
        [
          { query: "UPDATE user_conversations SET is_muted = ? WHERE user_id = ? AND conversation_id = ?", params: [muted, userId, conversationId] },
          muted
            ? { query: "INSERT INTO conversation_mutes (conversation_id, user_id) VALUES (?, ?)", params: [conversationId, userId] }
            : { query: "DELETE FROM conversation_mutes WHERE conversation_id = ? AND user_id = ?", params: [conversationId, userId] },
        ],
        events,
      );
    },
    async markDeleted(userId, conversationId, clearUpTo, events) {
      const head = await readHead(cql, conversationId);
      await commitWithEvents(
        cql,
        undefined,
        [
          { query: "UPDATE user_conversations SET hidden_through = ? WHERE user_id = ? AND conversation_id = ?", params: [head?.lastMessageId ?? 0n, userId, conversationId] },
          ...(clearUpTo > 0n ? clearStatements(userId, conversationId, clearUpTo) : []),
        ],
        events,
      );
    },
    async advanceRead(userId, conversationId, upTo, events) {
      const before = bigintOf((await readState(userId, conversationId))?.last_read_message_id);
      const position = upTo > before ? upTo : before;
      await commitWithEvents(cql, position, upTo > before ? [readPositionStatement(userId, conversationId, upTo)] : [], events);
      // A racing advance may have moved it further: the answer is the position after the call.
      const after = bigintOf((await readState(userId, conversationId))?.last_read_message_id);
      return after > position ? after : position;
    },
    async clearHistory(userId, conversationId, upTo, events) {
      await commitWithEvents(cql, undefined, upTo > 0n ? clearStatements(userId, conversationId, upTo) : [], events);
    },
    async recordMessage(conversationId, messageId, at, participants) {
      const before = await readHead(cql, conversationId);
      // No head: nothing to record (an LWT on it would be refused), as SQLite updates no row.
      if (!before) return;
      const { applied } = await cql.lwt("UPDATE conversations SET last_message_id = ?, last_message_time = ? WHERE conversation_id = ? IF last_message_id < ?", [
        messageId,
        BigInt(at),
        conversationId,
        messageId,
      ]);
      const moves = applied ? orderMoveStatements(participants, conversationId, before.lastMessageTime, at) : [];
      // Participants not listed yet are listed at the head's time either way.
      await cql.writeAll(moves.length > 0 ? moves : orderRowStatements(participants, conversationId, applied ? at : before.lastMessageTime));
    },
    async listForUser(userId, beforeTime, limit) {
      const found = new Map<bigint, { conversation: ConversationRecord; state: UserConversationRecord }>();
      const pageSize = Math.max(2 * limit, 32);
      let fromMinute = Math.min(minuteOf(beforeTime - 1), maxMinute);
      // Whole minutes at a time, newest first: inside a minute the order is by time, which only the heads know.
      while (fromMinute >= 0 && found.size < limit) {
        const page = await cql.rows("SELECT order_minute, conversation_id FROM conversation_order WHERE user_id = ? AND order_minute <= ? LIMIT ?", [userId, fromMinute, pageSize]);
        if (page.length === 0) break;
        let rows = page;
        if (page.length === pageSize) {
          // The page's last minute may go on past it: left for the next page, or read whole when it is the only one.
          const lastMinute = page[page.length - 1].order_minute as number;
          rows = page.filter((row) => (row.order_minute as number) > lastMinute);
          if (rows.length === 0) rows = await cql.rows("SELECT order_minute, conversation_id FROM conversation_order WHERE user_id = ? AND order_minute = ?", [userId, lastMinute]);
        }
        for (const entry of await listedAmong(userId, rows)) {
          if (entry.conversation.lastMessageTime < beforeTime && !entry.state.isDeleted) found.set(entry.conversation.conversationId, entry);
        }
        if (page.length < pageSize) break;
        fromMinute = (rows[rows.length - 1].order_minute as number) - 1;
      }
      return [...found.values()].sort(newestFirst).slice(0, limit);
    },
  };
}
