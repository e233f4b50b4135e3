// What the storage port promises of its device sessions, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describeSessions(t: StoreSuite): void {
  describe("sessions", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });
    const { newUser, session } = t;

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
}
