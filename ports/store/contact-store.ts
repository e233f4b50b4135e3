// Contacts, friend requests and blocks: one aggregate of the storage port (store.ts).
import type { EventsOf } from "./outbox-store.js";

export const FriendRequestStatus = { pending: 1, accepted: 2, rejected: 3 } as const;

export type FriendRequestStatusValue = (typeof FriendRequestStatus)[keyof typeof FriendRequestStatus];

export interface FriendRequestRecord {
  requestId: number;
  fromUserId: number;
  toUserId: number;
  message: string;
  status: FriendRequestStatusValue;
  createdAt: number;
}

export interface ContactRecord {
  ownerId: number;
  contactId: number;
  alias: string | null;
  createdAt: number;
}

export interface BlockRecord {
  blockerId: number;
  blockedId: number;
  blockedAt: number;
}

export interface BlockOutcome {
  blocked: boolean;
  contactRemoved: boolean;
}

export interface ContactStore {
  /** Creates a PENDING request, with its events, and answers it with its id (increasing). */
  createFriendRequest(fromUserId: number, toUserId: number, message: string, createdAt: number, events?: EventsOf<FriendRequestRecord>): Promise<FriendRequestRecord>;
  /** The request with this id, or undefined. */
  getFriendRequest(requestId: number): Promise<FriendRequestRecord | undefined>;
  /** A PENDING request between the two users in either direction, or undefined. */
  findPendingBetween(a: number, b: number): Promise<FriendRequestRecord | undefined>;
  /**
   * Moves a PENDING request to `status`, with its events; answers false (changing nothing) when it
   * was not PENDING any more. Accepting also connects the two users (see `connect`).
   */
  resolveFriendRequest(requestId: number, status: FriendRequestStatusValue, handledAt: number, events?: EventsOf<boolean>): Promise<boolean>;
  /**
   * Makes `a` and `b` contacts on both sides and ensures their PRIVATE conversation (with both
   * participants' state), with its events; sides that exist are kept.
   */
  connect(a: number, b: number, conversationId: bigint, at: number, events?: EventsOf<void>): Promise<void>;
  /** PENDING requests addressed to the user created before `beforeTime`, newest first. */
  listPendingRequests(toUserId: number, beforeTime: number, limit: number): Promise<FriendRequestRecord[]>;

  /** Removes one side of a contact relationship, with its events; answers whether it existed. */
  removeContact(ownerId: number, contactId: number, events?: EventsOf<boolean>): Promise<boolean>;
  /** `ownerId`'s record of `contactId`, or undefined. */
  getContact(ownerId: number, contactId: number): Promise<ContactRecord | undefined>;
  /** Contacts with id > afterId in ascending id order, at most `limit`. */
  listContacts(ownerId: number, afterId: number, limit: number): Promise<ContactRecord[]>;
  /** How many contacts the owner has. */
  countContacts(ownerId: number): Promise<number>;
  /** Sets (or with null clears) the alias, with its events; answers false when not a contact. */
  setAlias(ownerId: number, contactId: number, alias: string | null, events?: EventsOf<boolean>): Promise<boolean>;
  /** The owners who have `contactId` among their contacts. */
  listContactOwners(contactId: number): Promise<number[]>;

  /**
   * Records a block, with its events: the blocker's contact side of the blocked user and every
   * PENDING request between them go with it. Answers whether the block is new (false changes
   * nothing) and whether a contact side was removed.
   */
  block(blockerId: number, blockedId: number, blockedAt: number, events?: EventsOf<BlockOutcome>): Promise<BlockOutcome>;
  /** Removes a block, with its events; answers whether it existed. */
  unblock(blockerId: number, blockedId: number, events?: EventsOf<boolean>): Promise<boolean>;
  /** Whether either user blocked the other. */
  isBlockedEitherWay(a: number, b: number): Promise<boolean>;
  /** The ids among `userIds` that `userId` blocked or that blocked `userId`. */
  blockedAmong(userId: number, userIds: readonly number[]): Promise<Set<number>>;
  /** The user's blocklist, newest first. */
  listBlocked(blockerId: number): Promise<BlockRecord[]>;
}
