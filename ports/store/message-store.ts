// Messages, and the streamed ones still open: one aggregate of the storage port (store.ts).
import type { FencedWrite } from "./lease-store.js";
import type { EventsOf, FanOutRecord } from "./outbox-store.js";

export interface MessageRecord {
  conversationId: bigint;
  messageId: bigint;
  senderId: number;
  clientMessageId: bigint;
  /** The protobuf binary form of the api.v1.MessageBody. */
  body: Uint8Array;
  /** The protobuf binary form of the api.v1.ReplyContext, or null. */
  replyTo: Uint8Array | null;
  metadata: Record<string, string>;
  createdAt: number;
  updatedAt: number | null;
  edited: boolean;
}

export interface OpenStreamRecord {
  conversationId: bigint;
  messageId: bigint;
  senderId: number;
  startedAt: number;
}

/** What a message write does in the same transaction besides the message itself. */
export interface MessageWriteOptions extends FencedWrite {
  /** Records the message as the conversation's last (ConversationStore.recordMessage). */
  recordAsLast?: { participants: readonly number[] };
  /** Records the event reporting the write. */
  fanOut?: FanOutRecord;
  /** The message is this recorded system message: the write deletes its record. */
  postsSystemMessage?: bigint;
}

export interface MessageStore {
  /**
   * Stores a new message. Answers "conflict" when its id is taken (the writer's sequence is
   * stale) and "duplicate" with the stored message when (conversation, sender, clientMessageId)
   * already exists. A stale fence throws OwnershipLostError (nothing written), before either.
   */
  insertMessage(message: MessageRecord, options?: MessageWriteOptions & { opensStream?: boolean }): Promise<{ outcome: "ok" } | { outcome: "conflict" } | { outcome: "duplicate"; existing: MessageRecord }>;
  /** The highest message id of the conversation, 0n when none. */
  latestMessageId(conversationId: bigint): Promise<bigint>;
  /** The message, or undefined. */
  getMessage(conversationId: bigint, messageId: bigint): Promise<MessageRecord | undefined>;
  /** The message the sender sent with this client id, or undefined. */
  findByClientMessageId(conversationId: bigint, senderId: number, clientMessageId: bigint): Promise<MessageRecord | undefined>;
  /**
   * Replaces body and edit fields of a stored message; `closesStream` ends its open-stream entry in
   * the same write. A stale fence throws OwnershipLostError (nothing written).
   */
  updateMessage(
    conversationId: bigint,
    messageId: bigint,
    change: Pick<MessageRecord, "body" | "updatedAt" | "edited">,
    options?: Pick<MessageWriteOptions, "fanOut" | "fence"> & { closesStream?: boolean },
  ): Promise<void>;
  /**
   * Stream messages still open (inserted with `opensStream`, not yet closed) that started at or
   * before `startedBefore`, oldest first: the ones an owner that restarted no longer holds.
   */
  listOpenStreams(startedBefore: number, limit: number): Promise<OpenStreamRecord[]>;
  /**
   * Messages visible to the user (not deleted by them, above their cleared position), in the
   * given direction: "before" answers ids < cursor descending, "after" ids > cursor ascending.
   */
  listVisible(userId: number, conversationId: bigint, direction: "before" | "after", cursor: bigint, clearedUpTo: bigint, limit: number): Promise<MessageRecord[]>;
  /** Whether the user deleted this message (DeleteMessages). */
  isDeletedFor(userId: number, conversationId: bigint, messageId: bigint): Promise<boolean>;
  /** Deletes the existing, not yet deleted messages for the user, with its events; answers the ids it deleted, each once. */
  deleteFor(userId: number, conversationId: bigint, messageIds: readonly bigint[], clearedUpTo: bigint, events?: EventsOf<bigint[]>): Promise<bigint[]>;
}
