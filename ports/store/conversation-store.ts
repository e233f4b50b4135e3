// Conversations, and each participant's own state of one (read position, pin, mute, deletions): one aggregate of the storage port (store.ts).
import type { EventsOf } from "./outbox-store.js";

export const ConversationKind = { private: 1, group: 2 } as const;

export type ConversationKindValue = (typeof ConversationKind)[keyof typeof ConversationKind];

export interface ConversationRecord {
  conversationId: bigint;
  type: ConversationKindValue;
  lastMessageId: bigint;
  /** When the last message arrived; the creation time while there is none (the list's sort key). */
  lastMessageTime: number;
  createdAt: number;
}

export interface UserConversationRecord {
  userId: number;
  conversationId: bigint;
  isMuted: boolean;
  isDeleted: boolean;
  lastReadMessageId: bigint;
  /** Messages with ids up to this one are deleted for this user (DeleteHistory, clearing). */
  clearedUpTo: bigint;
}

export interface ConversationStore {
  /** The conversation, or undefined. */
  getConversation(conversationId: bigint): Promise<ConversationRecord | undefined>;
  /** The user's state in the conversation, created with defaults if missing. */
  getUserState(userId: number, conversationId: bigint): Promise<UserConversationRecord>;
  /** Those of the users who muted the conversation, in one read (creates no state). */
  mutedAmong(conversationId: bigint, userIds: readonly number[]): Promise<number[]>;
  /** Sets the mute flag, with its events. */
  setMuted(userId: number, conversationId: bigint, muted: boolean, events?: EventsOf<void>): Promise<void>;
  /**
   * Hides the conversation for the user, with its events; with clearUpTo > 0 also deletes history
   * up to it, and what is deleted is read (the read position moves to it, never back).
   */
  markDeleted(userId: number, conversationId: bigint, clearUpTo: bigint, events?: EventsOf<void>): Promise<void>;
  /** Moves the read position forward only, with its events; answers the position after the call. */
  advanceRead(userId: number, conversationId: bigint, upTo: bigint, events?: EventsOf<bigint>): Promise<bigint>;
  /**
   * Deletes history up to the id (never moves back) for the user, with its events; what is
   * deleted is read (the read position moves to it, never back).
   */
  clearHistory(userId: number, conversationId: bigint, upTo: bigint, events?: EventsOf<void>): Promise<void>;
  /**
   * Records a new last message and lists the conversation again for every participant who had
   * deleted it (there is no explicit restore).
   */
  recordMessage(conversationId: bigint, messageId: bigint, at: number, participants: readonly number[]): Promise<void>;
  /** The user's listed (not deleted) conversations with lastMessageTime < beforeTime, newest first. */
  listForUser(userId: number, beforeTime: number, limit: number): Promise<{ conversation: ConversationRecord; state: UserConversationRecord }[]>;
}
