// What the storage port promises of its contacts, friend requests and blocks, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeContacts(t: StoreSuite): void {
  describe("social writes that carry their consequences", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });
    const { expectRejected, newUser } = t;

    it("accepting a request connects both users and their PRIVATE conversation; rejecting connects nothing", async () => {
      const [a, b, c] = [await newUser("ra@x.io"), await newUser("rb@x.io"), await newUser("rc@x.io")];
      const accepted = await store.contacts.createFriendRequest(a.userId, b.userId, "", 1);
      expect(await store.contacts.resolveFriendRequest(accepted.requestId, 2, 2)).to.equal(true);
      expect((await store.contacts.getContact(a.userId, b.userId))?.createdAt).to.equal(2);
      expect((await store.contacts.getContact(b.userId, a.userId))?.createdAt).to.equal(2);
      const conversationId = (BigInt(b.userId) << 32n) | BigInt(a.userId);
      expect((await store.conversations.getConversation(conversationId))?.type).to.equal(1);
      const rejected = await store.contacts.createFriendRequest(c.userId, a.userId, "", 3);
      expect(await store.contacts.resolveFriendRequest(rejected.requestId, 3, 4)).to.equal(true);
      expect(await store.contacts.getContact(a.userId, c.userId)).to.equal(undefined);
      expect((await store.contacts.getFriendRequest(rejected.requestId))?.status).to.equal(3);
    });

    it("connects both sides once, keeping sides that exist", async () => {
      const conversationId = (9n << 32n) | 8n;
      await store.contacts.connect(8, 9, conversationId, 10);
      await store.contacts.removeContact(8, 9);
      await store.contacts.connect(8, 9, conversationId, 20);
      expect((await store.contacts.getContact(8, 9))?.createdAt).to.equal(20);
      expect((await store.contacts.getContact(9, 8))?.createdAt).to.equal(10);
      expect((await store.conversations.getConversation(conversationId))?.createdAt).to.equal(10);
    });

    it("a block removes the blocker's contact side and the pending requests between them, once", async () => {
      const conversationId = (9n << 32n) | 8n;
      await store.contacts.connect(8, 9, conversationId, 10);
      const pending = await store.contacts.createFriendRequest(9, 8, "", 11);
      expect(await store.contacts.block(8, 9, 12)).to.deep.equal({ blocked: true, contactRemoved: true });
      expect(await store.contacts.getContact(8, 9)).to.equal(undefined);
      expect((await store.contacts.getContact(9, 8))?.contactId).to.equal(8);
      expect(await store.contacts.getFriendRequest(pending.requestId)).to.equal(undefined);
      expect(await store.contacts.block(8, 9, 13)).to.deep.equal({ blocked: false, contactRemoved: false });
      expect(await store.contacts.block(9, 8, 14)).to.deep.equal({ blocked: true, contactRemoved: true });
    });

    it("request ids increase across handles (processes), also after a refused creation gave its id back", async () => {
      const other = subject.another ? await subject.another() : store;
      const [a, b] = [await newUser("ia@x.io"), await newUser("ib@x.io")];
      const ids: number[] = [];
      // Alternating handles, one request after the other: each id above every earlier one.
      for (let i = 0; i < 4; i++) ids.push((await (i % 2 === 0 ? store : other).contacts.createFriendRequest(a.userId, b.userId, "", i)).requestId);
      // A creation refused before anything is written (its events throw) may give its id back…
      await expectRejected(
        store.contacts.createFriendRequest(a.userId, b.userId, "", 10, () => {
          throw new Error("refused");
        }),
      );
      // …but once the other handle took a larger id, never after it.
      ids.push((await other.contacts.createFriendRequest(a.userId, b.userId, "", 11)).requestId);
      ids.push((await store.contacts.createFriendRequest(a.userId, b.userId, "", 12)).requestId);
      for (let i = 1; i < ids.length; i++) expect(ids[i], `ids ${ids.join(", ")}`).to.be.above(ids[i - 1]);
    });

    it("a request id past any the store assigns names no request", async () => {
      for (const requestId of [2 ** 31 + 7, Number.MAX_SAFE_INTEGER]) {
        expect(await store.contacts.getFriendRequest(requestId)).to.equal(undefined);
        expect(await store.contacts.resolveFriendRequest(requestId, 2, 1)).to.equal(false);
      }
    });

    it("clearing history and deleting with clearing move the read position to what was cleared, never back", async () => {
      const conversationId = (9n << 32n) | 8n;
      await store.conversations.clearHistory(8, conversationId, 4n);
      expect(await store.conversations.getUserState(8, conversationId)).to.deep.include({ clearedUpTo: 4n, lastReadMessageId: 4n });
      await store.conversations.advanceRead(8, conversationId, 7n);
      await store.conversations.markDeleted(8, conversationId, 6n);
      expect(await store.conversations.getUserState(8, conversationId)).to.deep.include({ clearedUpTo: 6n, lastReadMessageId: 7n, isDeleted: true });
    });
  });
}
