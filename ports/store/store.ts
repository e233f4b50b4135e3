// The storage port: what the engine needs from a database, one interface per aggregate.
// Adapters: ./sqlite (embedded default). Every adapter must pass test/store-conformance.test.ts.
//
// Every method is async so that networked adapters fit the same port. Values are plain data. Ids that are int64 in the protocol are bigint here; user ids are int32
// numbers. Timestamps are Unix milliseconds as numbers.
import type { QueuedWebhook, WebhookQueue } from "../../shared/agent-delivery.js";

export const AccountType = { user: 1, agent: 2 } as const;
export type AccountTypeValue = (typeof AccountType)[keyof typeof AccountType];

export interface UserRecord {
  userId: number;
  accountType: AccountTypeValue;
  username: string;
  /** True once the owner chose a username; the generated default does not count. */
  usernameCustom: boolean;
  phone: string | null;
  email: string | null;
  nickname: string;
  avatarUrl: string;
  signature: string;
  passwordHash: string | null;
  createdAt: number;
}

export interface NewUser {
  accountType: AccountTypeValue;
  phone: string | null;
  email: string | null;
  nickname: string;
  createdAt: number;
}

export interface ProfileChange {
  nickname?: string;
  avatarUrl?: string;
  signature?: string;
}

export interface SessionRecord {
  userId: number;
  deviceId: string;
  deviceType: number;
  deviceName: string;
  deviceModel: string;
  osVersion: string;
  appVersion: string;
  loginIp: string;
  loginAt: number;
  lastActiveAt: number;
  accessTokenHash: string;
  accessExpiresAt: number;
  refreshTokenHash: string;
  refreshExpiresAt: number;
}

export interface PushTokenRecord {
  userId: number;
  deviceId: string;
  token: string;
  platform: number;
  isSandbox: boolean;
  updatedAt: number;
}

/** The password hash a conditional password write expects to replace; null for "no password set". */
export interface PasswordCondition {
  ifPasswordHash: string | null;
}

export interface UserStore {
  /** Public, active agents whose nickname, username or description contains the text (case-insensitive). */
  searchAgents(text: string, limit: number): Promise<UserRecord[]>;
  /** Creates an account with a generated default username (`u_<userId>`) and returns it. */
  createUser(user: NewUser): Promise<UserRecord>;
  /** The account with this id, or undefined. */
  getUser(userId: number): Promise<UserRecord | undefined>;
  /** The accounts among these ids that exist; order is not significant. */
  getUsers(userIds: readonly number[]): Promise<UserRecord[]>;
  /** The account whose email (already normalised) matches, or undefined. */
  findByEmail(email: string): Promise<UserRecord | undefined>;
  /** The account whose phone (already normalised) matches, or undefined. */
  findByPhone(phone: string): Promise<UserRecord | undefined>;
  /** The account with this username (exact, lowercase), or undefined. */
  findByUsername(username: string): Promise<UserRecord | undefined>;
  /** Applies the given profile fields (absent fields keep their values) with its events. Returns the new record. */
  updateProfile(userId: number, change: ProfileChange, events?: EventsOf<UserRecord>): Promise<UserRecord>;
  /**
   * Sets a custom username only if none was chosen before and the name is free, with its events.
   * Answers "taken" when another account holds it, "already-set" when this one chose one already.
   */
  setCustomUsername(userId: number, username: string, events?: EventsOf<"ok" | "taken" | "already-set">): Promise<"ok" | "taken" | "already-set">;
  /**
   * Sets the password hash; with `ifPasswordHash`, only while the stored hash is still that one
   * (null: no password set), so of writers that read the same hash exactly one applies. Answers
   * whether it applied (false also when the account does not exist).
   */
  setPasswordHash(userId: number, passwordHash: string, condition?: PasswordCondition): Promise<boolean>;
}

export interface SessionStore {
  /** Creates or replaces the session of (userId, deviceId). */
  upsertSession(session: SessionRecord): Promise<void>;
  /** The session whose current access token has this hash, or undefined. */
  findByAccessHash(accessTokenHash: string): Promise<SessionRecord | undefined>;
  /** The session whose current refresh token has this hash, or undefined. */
  findByRefreshHash(refreshTokenHash: string): Promise<SessionRecord | undefined>;
  /**
   * Swaps the tokens of a session only if its refresh token is still `expectedRefreshHash`, so two
   * concurrent refreshes with the same token cannot both succeed. Returns whether it swapped.
   */
  rotateTokens(
    userId: number,
    deviceId: string,
    expectedRefreshHash: string,
    next: Pick<SessionRecord, "accessTokenHash" | "accessExpiresAt" | "refreshTokenHash" | "refreshExpiresAt" | "lastActiveAt">,
  ): Promise<boolean>;
  /** Records activity on a session. */
  touchSession(userId: number, deviceId: string, lastActiveAt: number): Promise<void>;
  /** The user's sessions, most recently active first. */
  listSessions(userId: number): Promise<SessionRecord[]>;
  /** Deletes one session (and its push token); returns whether it existed. */
  deleteSession(userId: number, deviceId: string): Promise<boolean>;
  /** Deletes every session of the user except `keepDeviceId`; returns the removed device ids. */
  deleteSessionsExcept(userId: number, keepDeviceId: string | null): Promise<string[]>;
}

export interface PushTokenStore {
  /** Stores the device's token, replacing any earlier one. */
  upsertPushToken(record: PushTokenRecord): Promise<void>;
  /** Deletes the device's token; returns whether one existed. */
  deletePushToken(userId: number, deviceId: string): Promise<boolean>;
  /** The user's registered push tokens. */
  listPushTokens(userId: number): Promise<PushTokenRecord[]>;
  /** The registered push tokens of all these users, in one read. */
  listPushTokensOf(userIds: readonly number[]): Promise<PushTokenRecord[]>;
}

/**
 * An event as the update log keeps it: its entry stored once, however many streams hold it. Each
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
 * One write of the update log, committed as a whole or not at all: events, the stream entries
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
 * An event waiting to reach its recipients' update streams (the outbox). It is written in the same
 * transaction as the change it reports, so a change is never durable without its event; the
 * engine then appends it to each recipient's stream and finishes it. A fan-out cut short (a crash,
 * a failed append) is finished again, at start-up or by the next write of its scope, and every
 * stream takes a given fan-out at most once (UpdateLogStore.append refuses a second entry of it),
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

/**
 * Users' update streams. Shaped for a partitioned database: a user's entries are one partition
 * ordered by sn (sn -> event id), events are keyed by id. An event is kept while any stream still
 * holds it; how the adapter knows (reference counts, a scan) is its own affair.
 */
export interface UpdateLogStore {
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

export const AgentStatus = { active: 1, deleted: 2 } as const;
export const AgentVisibility = { public: 1, private: 2 } as const;
export const DeliveryMode = { webhook: 1, websocket: 2 } as const;

export interface MiniAppConfig {
  enabled: boolean;
  url: string;
  allowedOrigins: string[];
  permissions: number;
}

/** A Mini App that was never set up. */
export const noMiniApp: Readonly<MiniAppConfig> = Object.freeze({ enabled: false, url: "", allowedOrigins: [], permissions: 0 });

export interface AgentRecord {
  agentUserId: number;
  creatorId: number;
  status: number;
  visibility: number;
  isSystem: boolean;
  tokenHash: string;
  tokenPrefix: string;
  /** The HMAC key for webhook signatures; kept because the server must sign with it. */
  secretKey: string;
  deliveryMode: number;
  webhookUrl: string;
  ipWhitelist: string[];
  commands: { command: string; description: string }[];
  miniApp: MiniAppConfig;
  createdAt: number;
  updatedAt: number;
}

export interface AgentStore {
  /**
   * Creates the agent's account and agent record together; answers both. A reserved account
   * (the system agent) passes its fixed `userId`; others get the next id.
   */
  createAgent(
    user: Omit<NewUser, "email" | "phone"> & { username: string; signature: string; userId?: number },
    agent: Omit<AgentRecord, "agentUserId">,
  ): Promise<{ user: UserRecord; agent: AgentRecord }>;
  /** The agent record, or undefined. */
  getAgent(agentUserId: number): Promise<AgentRecord | undefined>;
  /** The agent whose current token has this hash, or undefined. */
  findByTokenHash(tokenHash: string): Promise<AgentRecord | undefined>;
  /** DELETED agents still members of a NORMAL group (a deletion cut short), up to `limit`. */
  listDeletedInGroups(limit: number): Promise<number[]>;
  /** The agents a user created, oldest first. */
  listByCreator(creatorId: number): Promise<AgentRecord[]>;
  /** Up to `limit` public, active agents in random order (a new sample each call). */
  sampleFeatured(limit: number): Promise<AgentRecord[]>;
  /**
   * Replaces the given fields of the agent record, with its events, and answers the record written.
   * `updatedAt` moves forward on every write: to the value given, or one past the stored one when
   * that is not later (two writes in one millisecond, a clock that stands still), so it versions the
   * record. With a `condition`, the write applies only while the stored record meets it, checked
   * atomically with the write across every process on the store; otherwise nothing is written, no
   * event is recorded and AgentChangeRefused is thrown with the record as it stands.
   */
  updateAgent(agentUserId: number, change: AgentChange, events?: EventsOf<AgentRecord>, condition?: AgentCondition): Promise<AgentRecord>;
}

/** The fields of an agent record a change may set. */
export type AgentChange = Partial<Omit<AgentRecord, "agentUserId" | "creatorId" | "createdAt">>;

/** What the stored agent record must be for a conditional updateAgent to apply (every field given must hold). */
export interface AgentCondition {
  /** The record is still the version read (compare-and-set). */
  ifUpdatedAt?: number;
  ifStatus?: AgentStatusValue;
}

export type AgentStatusValue = (typeof AgentStatus)[keyof typeof AgentStatus];

/** Whether the stored agent record (undefined: none) meets the condition. */
export function meetsAgentCondition(agent: AgentRecord | undefined, condition: AgentCondition): agent is AgentRecord {
  if (!agent) return false;
  if (condition.ifUpdatedAt !== undefined && agent.updatedAt !== condition.ifUpdatedAt) return false;
  return condition.ifStatus === undefined || agent.status === condition.ifStatus;
}

/** The `updatedAt` a write stores: the one asked for, kept strictly past the stored one. */
export const nextAgentVersion = (stored: number, asked: number | undefined): number => Math.max(asked ?? 0, stored + 1);

/**
 * A conditional updateAgent met a record that no longer meets its condition (another writer, in
 * this process or another, changed or deleted it first): nothing was written. `current` is the
 * record as the refusal saw it (undefined when there is none), for the caller to re-check and retry
 * or to refuse.
 */
export class AgentChangeRefused extends Error {
  constructor(
    readonly agentUserId: number,
    readonly current: AgentRecord | undefined,
  ) {
    super(`agent ${agentUserId}: the record changed before the write (now ${current ? `updatedAt ${current.updatedAt}, status ${current.status}` : "missing"})`);
    this.name = "AgentChangeRefused";
  }
}

/** A queued webhook delivery; the dispatcher's view of the queue is shared/agent-delivery.ts. */
export type WebhookJob = QueuedWebhook;

/**
 * The most jobs one agent's queue keeps: a dead endpoint under steady traffic would otherwise
 * grow it without end (each job takes about half a minute to give up). Past it the oldest jobs
 * go first; the entries stay in the agent's stream. Adapters may overshoot by a few jobs.
 */
export const maxQueuedWebhooksPerAgent = 10_000;

export interface WebhookJobStore extends WebhookQueue {
  /**
   * Queues a delivery for the agent; jobs of one agent are delivered in queue order. Beyond
   * maxQueuedWebhooksPerAgent the agent's oldest jobs are dropped.
   */
  enqueue(agentUserId: number, body: string, now: number): Promise<void>;
  /** The agent's queued jobs, oldest first. */
  pending(agentUserId: number): Promise<WebhookJob[]>;
  /** Drops every queued job of the agent (it left webhook mode); answers how many there were. */
  clearAgent(agentUserId: number): Promise<number>;
  /**
   * How far the agent's stream was handed over: written to one of its sockets, or queued for its
   * webhook. 0 when nothing was; a WebSocket connection replays the entries after it.
   */
  deliveredSn(agentUserId: number): Promise<number>;
  /** Moves the agent's delivered position forward (never back). */
  advanceDelivered(agentUserId: number, sn: number): Promise<void>;
  /** Queues the bodies and moves the delivered position forward to `throughSn`, in one write. */
  handOver(agentUserId: number, bodies: readonly string[], queuedAt: number, throughSn: number): Promise<void>;
  /** Moves the agent's delivered position back to `sn` when it is past it (never forward). */
  rewindDelivered(agentUserId: number, sn: number): Promise<void>;
}

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

export interface SocialStore {
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

export const GroupStatus = { normal: 1, dissolved: 2 } as const;
export const MemberRole = { owner: 1, member: 2 } as const;

export interface GroupRecord {
  groupId: number;
  name: string;
  avatarUrl: string;
  description: string;
  ownerId: number;
  status: number;
  createdAt: number;
}

export interface MemberRecord {
  groupId: number;
  userId: number;
  role: number;
  joinedAt: number;
}

/**
 * A group change is its owner's write: the node holding the lease of the group's conversation
 * shard (the group id is its conversation id) passes that fence, and a stale one throws
 * OwnershipLostError with nothing written, events included. Creation takes none: its id is new,
 * so nobody else can write the group yet.
 */
export interface GroupStore {
  /**
   * Creates a NORMAL group with its members (the owner included), its GROUP conversation and their
   * state in it, with its events; answers it.
   */
  createGroup(group: Omit<GroupRecord, "groupId" | "status">, members: readonly Omit<MemberRecord, "groupId">[], events?: EventsOf<GroupRecord>): Promise<GroupRecord>;
  /** The group, or undefined. */
  getGroup(groupId: number): Promise<GroupRecord | undefined>;
  /** Replaces the given descriptive fields, with its events. */
  updateGroup(groupId: number, change: Partial<Pick<GroupRecord, "name" | "avatarUrl" | "description">>, events?: EventsOf<GroupRecord>, write?: FencedWrite): Promise<GroupRecord>;
  /** Marks the group DISSOLVED and removes every member, with its events; answers the removed member ids. */
  dissolveGroup(groupId: number, events?: EventsOf<number[]>, write?: FencedWrite): Promise<number[]>;
  /** The group's members, by join time then id. */
  listMembers(groupId: number): Promise<MemberRecord[]>;
  /** The member record, or undefined. */
  getMember(groupId: number, userId: number): Promise<MemberRecord | undefined>;
  /** Adds members not already present, with their state in the group's conversation and its events; answers the ids actually added. */
  addMembers(groupId: number, members: readonly Omit<MemberRecord, "groupId">[], events?: EventsOf<number[]>, write?: FencedWrite): Promise<number[]>;
  /** Removes a member, with its events; answers whether they were one. */
  removeMember(groupId: number, userId: number, events?: EventsOf<boolean>, write?: FencedWrite): Promise<boolean>;
  /** The NORMAL groups the user belongs to with id > afterId, ascending, at most `limit`. */
  listGroupsOf(userId: number, afterId: number, limit: number): Promise<GroupRecord[]>;
  /** The groups the user belongs to (any status). */
  groupIdsOf(userId: number): Promise<number[]>;
}

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

export interface MediaFileRecord {
  /** Random, non-enumerable; also the blob key of its bytes. */
  fileId: string;
  ownerId: number;
  /** The api.v1.MediaPurpose number. */
  purpose: number;
  fileName: string;
  contentType: string;
  size: number;
  /** SHA-256, lowercase hex. */
  checksum: string;
  width: number;
  height: number;
  durationMs: number;
  /** Empty when the file has no thumbnail. */
  thumbnailFileId: string;
  createdAt: number;
}

export interface UploadSessionRecord {
  sessionId: string;
  ownerId: number;
  /** The id the finished file will get, fixed up front so completing twice cannot make two files. */
  fileId: string;
  fileName: string;
  contentType: string;
  /** Declared total bytes. */
  size: number;
  /** Bytes received so far. */
  uploaded: number;
  /**
   * The blob-store names of the staged parts that make up the bytes received, in order: each the
   * one attempt at its offset that moved `uploaded` (another attempt's part is not the upload's).
   */
  parts: string[];
  createdAt: number;
  expiresAt: number;
}

export interface MediaStore {
  /** Stores the metadata of new files (a file and its thumbnail) together. */
  insertFiles(files: readonly MediaFileRecord[]): Promise<void>;
  /** The file's metadata, or undefined. */
  getFile(fileId: string): Promise<MediaFileRecord | undefined>;
  /** Creates an upload session. */
  createSession(session: UploadSessionRecord): Promise<void>;
  /** The session, expired or not (the caller compares expiresAt with its clock), or undefined. */
  getSession(sessionId: string): Promise<UploadSessionRecord | undefined>;
  /** The owner's newest session with exactly these declared attributes that is open at `now`, or undefined. */
  findResumableSession(ownerId: number, fileName: string, contentType: string, size: number, now: number): Promise<UploadSessionRecord | undefined>;
  /**
   * Moves `uploaded` from `expected` to `next` and appends `part` (the staged bytes in between) to
   * `parts`, as one change; answers false (changing nothing) when `uploaded` was not `expected`.
   */
  advanceSession(sessionId: string, expected: number, next: number, part: string): Promise<boolean>;
  /** Deletes the session; answers whether it existed. */
  deleteSession(sessionId: string): Promise<boolean>;
  /** Stores the finished files and deletes the session in one unit; answers false (storing nothing) when the session is gone. */
  completeSession(sessionId: string, files: readonly MediaFileRecord[]): Promise<boolean>;
  /** Sessions whose expiresAt <= now, oldest first, at most `limit`. */
  listExpiredSessions(now: number, limit: number): Promise<UploadSessionRecord[]>;
  /** The server secret under `name`; the first caller's `candidate` becomes it, later candidates are ignored. */
  ensureSecret(name: string, candidate: string, now: number): Promise<string>;
}

/**
 * Ownership of keys (a conversation, a user's update stream) is a time-limited lease per shard, and
 * each change of hands gives the shard a new epoch. A writer carries the fence it was given, its
 * shard and epoch; every fenced write checks it in its own transaction, so a node that lost a
 * shard (its lease expired and another node took it, or it paused for longer than the lease) can
 * never write beside the new owner, whatever it still believes. See engine/ownership.ts.
 */
export interface Fence {
  shard: number;
  epoch: number;
}

/** A write that the key's owner makes: refused unless `fence` is the shard's current epoch. */
export interface FencedWrite {
  fence?: Fence;
}

/** A fenced write met a newer epoch: another owner took the shard; nothing was written. */
export class OwnershipLostError extends Error {
  constructor(readonly fence: Fence) {
    super(`shard ${fence.shard} has moved past epoch ${fence.epoch}`);
    this.name = "OwnershipLostError";
  }
}

export interface LeaseHolder {
  /** The node's stable name: a new instance of the same node takes its leases at once (it restarted). */
  node: string;
  /** This process instance of the node: unique per start. */
  instance: string;
}

export interface LeaseRecord {
  shard: number;
  node: string;
  /** Empty once released. */
  instance: string;
  epoch: number;
  expiresAt: number;
}

export interface LeaseStore {
  /**
   * Takes or extends the shard's lease for `holder` until now + ttlMs, and answers the lease as it
   * stands after the call (held by someone else when it was not free). The holder's own lease is
   * extended with its epoch, expired or not (nobody held it since). A lease never taken starts at
   * epoch 1; one released, expired at `now`, or held by an earlier instance of the same node is
   * taken with the next epoch. Concurrent calls for one shard leave exactly one holder.
   */
  acquire(shard: number, holder: LeaseHolder, now: number, ttlMs: number): Promise<LeaseRecord>;
  /**
   * Extends the holder's leases of these shards, each only while it still has that epoch (expired
   * or not); answers the shards extended. The others were lost.
   */
  renew(holder: LeaseHolder, fences: readonly Fence[], now: number, ttlMs: number): Promise<number[]>;
  /**
   * Takes the shard from a holder known to be gone, before its lease runs out: only while the lease
   * is still exactly `from` (same instance and epoch), with the next epoch. Answers the lease as it
   * stands after the call (someone else's when `from` was out of date). Any take of a lease before
   * it runs out (this, or `acquire` from an earlier instance of the same node) first revokes the
   * holder instance's fence where its confirming appends look (FenceHolder).
   */
  takeOver(shard: number, holder: LeaseHolder, from: LeaseRecord, now: number, ttlMs: number): Promise<LeaseRecord>;
  /** Gives the leases up (each only while the holder has that epoch): the next acquirer takes them at once, with a new epoch. */
  release(holder: LeaseHolder, fences: readonly Fence[]): Promise<void>;
  /** The shard's lease, or undefined when it was never taken. */
  getLease(shard: number): Promise<LeaseRecord | undefined>;
}

/** Everything the engine persists, behind one handle chosen at start-up. */
export interface Store {
  users: UserStore;
  sessions: SessionStore;
  pushTokens: PushTokenStore;
  updates: UpdateLogStore;
  agents: AgentStore;
  social: SocialStore;
  groups: GroupStore;
  webhookJobs: WebhookJobStore;
  conversations: ConversationStore;
  messages: MessageStore;
  /** Events recorded with the changes they report, until delivered (see FanOutRecord, SystemMessageRecord). */
  outbox: OutboxStore;
  media: MediaStore;
  /** Who owns which shard of keys, and since which epoch (see Fence). */
  leases: LeaseStore;
  close(): Promise<void>;
}
