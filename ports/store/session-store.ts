// Device sessions: the refresh and access tokens of a signed-in device: one aggregate of the storage port (store.ts).

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
