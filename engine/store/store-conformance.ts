// The promises of the storage port, as one mocha suite every adapter must pass.
import { expect } from "chai";
import { AccountType, type SessionRecord, type Store } from "./store.js";

export interface StoreUnderTest {
  store: Store;
  /** Closes the store and opens it again on the same data; adapters without durable data leave it out. */
  reopen?: () => Promise<Store>;
  cleanup(): Promise<void>;
}

export function describeStoreConformance(name: string, open: () => Promise<StoreUnderTest>): void {
  describe(`store conformance: ${name}`, () => {
    let subject: StoreUnderTest;
    let store: Store;
    beforeEach(async () => {
      subject = await open();
      store = subject.store;
    });
    afterEach(async () => subject.cleanup());

    const newUser = (email: string | null, phone: string | null = null) =>
      store.users.createUser({ accountType: AccountType.user, email, phone, nickname: "n", createdAt: 1000 });

    const session = (userId: number, deviceId: string, overrides: Partial<SessionRecord> = {}): SessionRecord => ({
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
    });

    describe("users", () => {
      it("assigns ids from 10001 upward with the default username u_<id>", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser("b@x.io");
        expect(a.userId).to.equal(10001);
        expect(b.userId).to.equal(10002);
        expect(a).to.deep.include({ username: "u_10001", usernameCustom: false, email: "a@x.io", phone: null, passwordHash: null, createdAt: 1000 });
      });

      it("finds users by id, email, phone and username, and several by ids", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser(null, "+15550001");
        expect((await store.users.getUser(a.userId))?.email).to.equal("a@x.io");
        expect((await store.users.findByEmail("a@x.io"))?.userId).to.equal(a.userId);
        expect((await store.users.findByPhone("+15550001"))?.userId).to.equal(b.userId);
        expect((await store.users.findByUsername(`u_${b.userId}`))?.userId).to.equal(b.userId);
        expect(await store.users.getUser(1)).to.equal(undefined);
        expect((await store.users.getUsers([a.userId, b.userId, 42])).map((u) => u.userId).sort()).to.deep.equal([a.userId, b.userId]);
        expect(await store.users.getUsers([])).to.deep.equal([]);
      });

      it("refuses a second account with the same email or phone", async () => {
        await newUser("a@x.io", "+15550002");
        let failures = 0;
        await newUser("a@x.io").catch(() => failures++);
        await newUser("c@x.io", "+15550002").catch(() => failures++);
        expect(failures).to.equal(2);
      });

      it("sets a custom username once: ok, then already-set; taken when another account holds it", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser("b@x.io");
        expect(await store.users.setCustomUsername(a.userId, "alpha_one")).to.equal("ok");
        expect(await store.users.setCustomUsername(a.userId, "alpha_two")).to.equal("already-set");
        expect(await store.users.setCustomUsername(b.userId, "alpha_one")).to.equal("taken");
        const c = await newUser("c@x.io");
        expect(await store.users.setCustomUsername(b.userId, `u_${c.userId}`)).to.equal("taken");
        expect((await store.users.getUser(a.userId))?.username).to.equal("alpha_one");
        expect((await store.users.getUser(b.userId))?.usernameCustom).to.equal(false);
      });

      it("updates only the given profile fields and the password hash", async () => {
        const a = await newUser("a@x.io");
        await store.users.updateProfile(a.userId, { nickname: "Ada" });
        const after = await store.users.updateProfile(a.userId, { signature: "hi", avatarUrl: "" });
        expect(after).to.deep.include({ nickname: "Ada", signature: "hi", avatarUrl: "" });
        await store.users.setPasswordHash(a.userId, "hash");
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("hash");
      });
    });

    describe("sessions", () => {
      it("upserts by (user, device) and finds by token hashes", async () => {
        const a = await newUser("a@x.io");
        await store.sessions.upsertSession(session(a.userId, "d1"));
        await store.sessions.upsertSession(session(a.userId, "d1", { accessTokenHash: "new-access", refreshTokenHash: "new-refresh" }));
        expect(await store.sessions.findByAccessHash(`access-${a.userId}-d1`)).to.equal(undefined);
        expect((await store.sessions.findByAccessHash("new-access"))?.deviceId).to.equal("d1");
        expect((await store.sessions.findByRefreshHash("new-refresh"))?.userId).to.equal(a.userId);
        expect(await store.sessions.listSessions(a.userId)).to.have.length(1);
      });

      it("rotates tokens only while the expected refresh hash is current", async () => {
        const a = await newUser("a@x.io");
        await store.sessions.upsertSession(session(a.userId, "d1"));
        const next = { accessTokenHash: "a2", accessExpiresAt: 1, refreshTokenHash: "r2", refreshExpiresAt: 2, lastActiveAt: 3 };
        expect(await store.sessions.rotateTokens(a.userId, "d1", `refresh-${a.userId}-d1`, next)).to.equal(true);
        expect(await store.sessions.rotateTokens(a.userId, "d1", `refresh-${a.userId}-d1`, { ...next, refreshTokenHash: "r3" })).to.equal(false);
        expect(await store.sessions.rotateTokens(a.userId, "other", "r2", { ...next, refreshTokenHash: "r4" })).to.equal(false);
        expect(await store.sessions.findByRefreshHash(`refresh-${a.userId}-d1`)).to.equal(undefined);
        expect((await store.sessions.findByRefreshHash("r2"))?.lastActiveAt).to.equal(3);
      });

      it("lists most recently active first, touches, and deletes one or all but one with their push tokens", async () => {
        const a = await newUser("a@x.io");
        for (const [device, active] of [["d1", 10], ["d2", 30], ["d3", 20]] as const) {
          await store.sessions.upsertSession(session(a.userId, device, { lastActiveAt: active }));
          await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: device, token: `t-${device}`, platform: 1, isSandbox: false, updatedAt: 1 });
        }
        expect((await store.sessions.listSessions(a.userId)).map((s) => s.deviceId)).to.deep.equal(["d2", "d3", "d1"]);
        await store.sessions.touchSession(a.userId, "d1", 99);
        expect((await store.sessions.listSessions(a.userId))[0].deviceId).to.equal("d1");
        expect(await store.sessions.deleteSession(a.userId, "d3")).to.equal(true);
        expect(await store.sessions.deleteSession(a.userId, "d3")).to.equal(false);
        expect((await store.pushTokens.listPushTokens(a.userId)).map((t) => t.deviceId).sort()).to.deep.equal(["d1", "d2"]);
        expect((await store.sessions.deleteSessionsExcept(a.userId, "d1")).sort()).to.deep.equal(["d2"]);
        expect((await store.pushTokens.listPushTokens(a.userId)).map((t) => t.deviceId)).to.deep.equal(["d1"]);
        expect(await store.sessions.deleteSessionsExcept(a.userId, null)).to.deep.equal(["d1"]);
        expect(await store.pushTokens.listPushTokens(a.userId)).to.deep.equal([]);
      });
    });

    describe("push tokens", () => {
      it("replaces a device's token and deletes it once", async () => {
        const a = await newUser("a@x.io");
        await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "one", platform: 1, isSandbox: true, updatedAt: 1 });
        await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "two", platform: 2, isSandbox: false, updatedAt: 2 });
        expect(await store.pushTokens.listPushTokens(a.userId)).to.deep.equal([
          { userId: a.userId, deviceId: "d", token: "two", platform: 2, isSandbox: false, updatedAt: 2 },
        ]);
        expect(await store.pushTokens.deletePushToken(a.userId, "d")).to.equal(true);
        expect(await store.pushTokens.deletePushToken(a.userId, "d")).to.equal(false);
      });
    });

    describe("update log", () => {
      const row = (sn: number) => ({ sn, payload: new Uint8Array([sn, 1, 2]), createdAt: sn * 10 });

      it("answers 0 and nothing for a user without entries", async () => {
        expect(await store.updates.latestSn(7)).to.equal(0);
        expect(await store.updates.oldestRetainedSn(7)).to.equal(undefined);
        expect(await store.updates.readUpdates(7, 0, 10)).to.deep.equal([]);
      });

      it("appends, reads in order with a limit, and prunes", async () => {
        expect(await store.updates.appendUpdates(7, [row(1), row(2), row(3)])).to.equal("ok");
        expect(await store.updates.appendUpdates(7, [row(4)])).to.equal("ok");
        expect(await store.updates.latestSn(7)).to.equal(4);
        expect((await store.updates.readUpdates(7, 1, 2)).map((r) => r.sn)).to.deep.equal([2, 3]);
        expect((await store.updates.readUpdates(7, 0, 1))[0]).to.deep.equal(row(1));
        expect(await store.updates.readUpdates(7, 4, 10)).to.deep.equal([]);
        await store.updates.pruneUpdates(7, 2);
        expect(await store.updates.oldestRetainedSn(7)).to.equal(3);
        expect(await store.updates.latestSn(8)).to.equal(0);
      });

      it("refuses a taken sn with conflict and writes nothing of that batch", async () => {
        await store.updates.appendUpdates(7, [row(1), row(2)]);
        expect(await store.updates.appendUpdates(7, [row(3), row(2)])).to.equal("conflict");
        expect(await store.updates.latestSn(7)).to.equal(2);
      });

      it("refuses a batch that repeats an sn within itself, writing none of it", async () => {
        expect(await store.updates.appendUpdates(7, [row(1), row(2), row(2)])).to.equal("conflict");
        expect(await store.updates.latestSn(7)).to.equal(0);
        expect(await store.updates.appendUpdates(7, [row(1)])).to.equal("ok");
      });
    });

    it("keeps everything across close and reopen", async function () {
      if (!subject.reopen) this.skip();
      const a = await newUser("a@x.io");
      await store.sessions.upsertSession(session(a.userId, "d1"));
      await store.updates.appendUpdates(a.userId, [{ sn: 1, payload: new Uint8Array([9]), createdAt: 5 }]);
      store = await subject.reopen!();
      expect((await store.users.findByEmail("a@x.io"))?.userId).to.equal(a.userId);
      expect((await store.sessions.findByAccessHash(`access-${a.userId}-d1`))?.deviceId).to.equal("d1");
      expect(await store.updates.latestSn(a.userId)).to.equal(1);
      expect((await newUser("b@x.io")).userId).to.equal(a.userId + 1);
    });
  });
}
