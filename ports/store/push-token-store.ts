// The APNs and FCM tokens registered per device: one aggregate of the storage port (store.ts).

export interface PushTokenRecord {
  userId: number;
  deviceId: string;
  token: string;
  platform: number;
  isSandbox: boolean;
  updatedAt: number;
}

export interface PushTokenStore {
  /** Stores the device's token, replacing any earlier one. */
  upsertPushToken(record: PushTokenRecord): Promise<void>;
  /** Deletes the device's token; returns whether one existed. */
  deletePushToken(userId: number, deviceId: string): Promise<boolean>;
  /**
   * Deletes the device's token if it is still this one (a provider called it unregistered or
   * invalid); a token the device registered since is kept. Returns whether it deleted.
   */
  deleteRejectedPushToken(userId: number, deviceId: string, token: string): Promise<boolean>;
  /** The user's registered push tokens. */
  listPushTokens(userId: number): Promise<PushTokenRecord[]>;
  /** The registered push tokens of all these users, in one read. */
  listPushTokensOf(userIds: readonly number[]): Promise<PushTokenRecord[]>;
}
