// What each part of the storage port's conformance suite is handed: the store under test (a fresh
// one for every test), the adapter's hooks, and the helpers the parts share.
import { expect } from "chai";
import { AccountType, type SessionRecord, type Store, type UserRecord } from "../store.js";

export interface StoreUnderTest {
  store: Store;
  /** Closes the store and opens it again on the same data; adapters without durable data leave it out. */
  reopen?: () => Promise<Store>;
  /** A second handle on the same data, as another node would hold it (closed by cleanup); the suite uses the first handle twice without it. */
  another?: () => Promise<Store>;
  cleanup(): Promise<void>;
}

export interface StoreSuite {
  /** The handle of the test under way; a test that reopens the store sets the new one here. */
  store: Store;
  /** The adapter's hooks for the test under way. */
  subject: StoreUnderTest;
  expectRejected(write: Promise<unknown>): Promise<void>;
  newUser(email: string | null, phone?: string | null): Promise<UserRecord>;
  session(userId: number, deviceId: string, overrides?: Partial<SessionRecord>): SessionRecord;
}

/** A suite whose store and subject each test sets before it runs (store-conformance.ts). */
export function storeSuite(): StoreSuite {
  const suite: StoreSuite = {
    store: undefined as unknown as Store,
    subject: undefined as unknown as StoreUnderTest,
    async expectRejected(write) {
      const outcome = await write.then(
        () => "accepted",
        () => "rejected",
      );
      expect(outcome).to.equal("rejected");
    },
    newUser: (email, phone = null) => suite.store.users.createUser({ accountType: AccountType.user, email, phone, nickname: "n", createdAt: 1000 }),
    session: (userId, deviceId, overrides = {}) => ({
      userId,
      deviceId,
      deviceType: 5,
      deviceName: "name",
      deviceModel: "model",
      osVersion: "os",
      appVersion: "app",
      loginIp: "127.0.0.1",
      loginAt: 1000,
      lastActiveAt: 1000,
      accessTokenHash: `access-${userId}-${deviceId}`,
      accessExpiresAt: 5000,
      refreshTokenHash: `refresh-${userId}-${deviceId}`,
      refreshExpiresAt: 9000,
      ...overrides,
    }),
  };
  return suite;
}
