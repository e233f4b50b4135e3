// A user's conversation list order (DATA-MODEL.md §6.1): one row per (user, minute of the
// conversation's last message, conversation). A conversation moves in its participants' lists
// only when that minute changes, so a busy group costs one move a minute, not one per message.
// A row whose minute no longer matches the conversation's head is stale and skipped by readers.
import type { Statement } from "./cql.js";

export const minuteOf = (ms: number) => Math.floor(ms / 60_000);

/** The rows that list the conversation at `time` for these users (a new conversation, new members). */
export function orderRowStatements(userIds: readonly number[], conversationId: bigint, time: number): Statement[] {
  return userIds.map((userId) => ({
    query: "INSERT INTO conversation_order (user_id, order_minute, conversation_id) VALUES (?, ?, ?)",
    params: [userId, minuteOf(time), conversationId],
  }));
}

/** Moves the conversation from `previousTime`'s minute to `time`'s in each user's list; nothing when the minute is the same. */
export function orderMoveStatements(userIds: readonly number[], conversationId: bigint, previousTime: number | undefined, time: number): Statement[] {
  if (previousTime !== undefined && minuteOf(previousTime) === minuteOf(time)) return [];
  const removals =
    previousTime === undefined
      ? []
      : userIds.map((userId) => ({
          query: "DELETE FROM conversation_order WHERE user_id = ? AND order_minute = ? AND conversation_id = ?",
          params: [userId, minuteOf(previousTime), conversationId],
        }));
  return [...removals, ...orderRowStatements(userIds, conversationId, time)];
}
