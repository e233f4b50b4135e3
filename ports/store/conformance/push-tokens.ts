// What the storage port promises of its push tokens, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describePushTokens(t: StoreSuite): void {
  describe("push tokens", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });
    const { newUser } = t;

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

    it("deletes a rejected token only while the device still has it, not one it registered since", async () => {
      const a = await newUser("a@x.io");
      await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "old", platform: 1, isSandbox: true, updatedAt: 1 });
      await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "new", platform: 1, isSandbox: true, updatedAt: 2 });
      expect(await store.pushTokens.deleteRejectedPushToken(a.userId, "d", "old")).to.equal(false);
      expect((await store.pushTokens.listPushTokens(a.userId)).map((t) => t.token)).to.deep.equal(["new"]);
      expect(await store.pushTokens.deleteRejectedPushToken(a.userId, "d", "new")).to.equal(true);
      expect(await store.pushTokens.listPushTokens(a.userId)).to.deep.equal([]);
      expect(await store.pushTokens.deleteRejectedPushToken(a.userId, "d", "new")).to.equal(false);
    });

    it("reads the tokens of several users at once", async () => {
      const [a, b, c] = [await newUser("a@x.io"), await newUser("b@x.io"), await newUser("c@x.io")];
      for (const [user, device] of [[a, "a1"], [a, "a2"], [b, "b1"], [c, "c1"]] as const) {
        await store.pushTokens.upsertPushToken({ userId: user.userId, deviceId: device, token: `t-${device}`, platform: 1, isSandbox: false, updatedAt: 1 });
      }
      expect((await store.pushTokens.listPushTokensOf([a.userId, b.userId, 99])).map((t) => t.deviceId).sort()).to.deep.equal(["a1", "a2", "b1"]);
      expect(await store.pushTokens.listPushTokensOf([])).to.deep.equal([]);
    });
  });
}
