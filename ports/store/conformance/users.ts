// What the storage port promises of its users, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describeUsers(t: StoreSuite): void {
  describe("users", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });
    const { newUser } = t;

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
      expect(await store.users.setPasswordHash(a.userId, "hash")).to.equal(true);
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("hash");
    });

    it("sets a password hash on condition: none set, or the expected one; of two writers expecting the same hash one applies", async () => {
      const a = await newUser("a@x.io");
      expect(await store.users.setPasswordHash(a.userId, "h1", { ifPasswordHash: "h0" })).to.equal(false);
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(null);
      const firsts = await Promise.all(["h1a", "h1b"].map((hash) => store.users.setPasswordHash(a.userId, hash, { ifPasswordHash: null })));
      expect(firsts.filter(Boolean)).to.have.length(1);
      const first = firsts[0] ? "h1a" : "h1b";
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(first);
      expect(await store.users.setPasswordHash(a.userId, "h1c", { ifPasswordHash: null })).to.equal(false);
      const changes = await Promise.all(["h2a", "h2b"].map((hash) => store.users.setPasswordHash(a.userId, hash, { ifPasswordHash: first })));
      expect(changes.filter(Boolean)).to.have.length(1);
      const second = changes[0] ? "h2a" : "h2b";
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(second);
      // Unconditional (a reset) replaces whatever is stored.
      expect(await store.users.setPasswordHash(a.userId, "h3")).to.equal(true);
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("h3");
      expect(await store.users.setPasswordHash(a.userId, "h4", { ifPasswordHash: second })).to.equal(false);
      expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("h3");
      expect(await store.users.setPasswordHash(999_999_999, "h", { ifPasswordHash: null })).to.equal(false);
      expect(await store.users.setPasswordHash(999_999_999, "h")).to.equal(false);
      expect(await store.users.getUser(999_999_999)).to.equal(undefined);
    });
  });
}
