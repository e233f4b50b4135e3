// Events recorded with the changes they report, until delivered to the update streams: one aggregate of the storage port (store.ts).

/**
 * An event waiting to reach its recipients' update streams (the outbox). It is written in the same
 * transaction as the change it reports, so a change is never durable without its event; the
 * engine then appends it to each recipient's stream and finishes it. A fan-out cut short (a crash,
 * a failed append) is finished again, at start-up or by the next write of its scope, and every
 * stream takes a given fan-out at most once (UpdateStreamStore.append refuses a second entry of it),
 * so a repeat is harmless.
 */
export interface FanOutRecord {
  /** Chosen by the engine (fan-out.ts), unique, increasing in the order a process records them. */
  fanOutId: bigint;
  /** What orders it: a conversation's events (its id), or the acting account's ("user:<id>"). */
  scope: string;
  recipients: number[];
  /** The protobuf binary form of the api.v1.SnUpdate, without sn. */
  entry: Uint8Array;
  /** The UserInfo and GroupInfo wire forms pushed along with the entry: JSON `{users?, groups?}`. */
  related: string;
  createdAt: number;
}

/**
 * A GROUP system message a group change calls for (the outbox's second kind): recorded in the
 * change's transaction, posted by the conversation actor, whose message write deletes it. While it
 * is recorded the message is not posted, so posting it again after a crash posts it once.
 */
export interface SystemMessageRecord {
  /** Chosen by the engine, from the same sequence as fan-out ids. */
  systemMessageId: bigint;
  conversationId: bigint;
  /** The protobuf binary form of the api.v1.MessageBody. */
  body: Uint8Array;
  /** Users who get the message besides the conversation's members (one who just left). */
  extraRecipients: number[];
  createdAt: number;
}

export type OutboxRecord = FanOutRecord | SystemMessageRecord;

/**
 * The events of a change, recorded in the change's own transaction; given what the change
 * answers, so a change that did nothing can record nothing. Writes that take it say so.
 */
export type EventsOf<Result> = (result: Result) => readonly OutboxRecord[];

export interface OutboxStore {
  /** Unfinished fan-outs, oldest first, at most `limit`; of one scope only when given. */
  pending(limit: number, scope?: string): Promise<FanOutRecord[]>;
  /** Marks the fan-out finished: every recipient's stream has it. The scope names where a partitioned outbox keeps it. */
  finish(fanOut: Pick<FanOutRecord, "fanOutId" | "scope">): Promise<void>;
  /** System messages recorded and not yet posted, oldest first, at most `limit`. */
  pendingSystemMessages(limit: number): Promise<SystemMessageRecord[]>;
  /** Whether the system message is still to be posted (it is kept with its conversation). */
  isSystemMessagePending(conversationId: bigint, systemMessageId: bigint): Promise<boolean>;
}
