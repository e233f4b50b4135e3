// The storage port: what the engine needs from a database, one interface per aggregate.
// Adapters: ./sqlite (embedded default). Every adapter must pass test/store-conformance.test.ts.
//
// Every method is async so that networked adapters fit the same port. Values are plain data. Ids that are int64 in the protocol are bigint here; user ids are int32
// numbers. Timestamps are Unix milliseconds as numbers.

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

export interface UserStore {
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
  /** Applies the given profile fields; absent fields keep their values. Returns the new record. */
  updateProfile(userId: number, change: ProfileChange): Promise<UserRecord>;
  /**
   * Sets a custom username only if none was chosen before and the name is free.
   * Answers "taken" when another account holds it, "already-set" when this one chose one already.
   */
  setCustomUsername(userId: number, username: string): Promise<"ok" | "taken" | "already-set">;
  /** Replaces the password hash. */
  setPasswordHash(userId: number, passwordHash: string): Promise<void>;
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
}

export interface StoredUpdate {
  sn: number;
  /** The protobuf binary form of the api.v1.SnUpdate, sn included. */
  payload: Uint8Array;
  createdAt: number;
}

export interface UpdateLogStore {
  /** The highest sn stored for the user, 0 when none. */
  latestSn(userId: number): Promise<number>;
  /** The lowest sn still retained for the user, or undefined when none is. */
  oldestRetainedSn(userId: number): Promise<number | undefined>;
  /**
   * Appends entries at exactly the given sn values, atomically. Fails with "conflict" (writing
   * nothing) when any of those sn values is already taken: the caller's sequence is stale.
   */
  appendUpdates(userId: number, updates: readonly StoredUpdate[]): Promise<"ok" | "conflict">;
  /** Entries with sn > afterSn in ascending order, at most `limit`. */
  readUpdates(userId: number, afterSn: number, limit: number): Promise<StoredUpdate[]>;
  /** Deletes the user's entries with sn <= upToSn (retention). */
  pruneUpdates(userId: number, upToSn: number): Promise<void>;
}

/** Everything the engine persists, behind one handle chosen at start-up. */
export interface Store {
  users: UserStore;
  sessions: SessionStore;
  pushTokens: PushTokenStore;
  updates: UpdateLogStore;
  close(): Promise<void>;
}
