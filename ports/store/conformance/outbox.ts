// What the storage port promises of its outbox, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { FanOutRecord, Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeOutbox(t: StoreSuite): void {
  describe("outbox", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });
    const { newUser } = t;

    // Ids come from the engine; they run past 2^53.
    let nextId = 2n ** 60n;
    const fanOut = (scope: string, createdAt: number, recipients = [7, 8]) => ({
      fanOutId: nextId++,
      scope,
      recipients,
      entry: new Uint8Array([1, createdAt % 256]),
      related: JSON.stringify({ users: [{ userId: 7 }] }),
      createdAt,
    });
    const ids = (fanOuts: { fanOutId: bigint }[]) => fanOuts.map((f) => f.fanOutId);
    /** Records fan-outs as a change does: with a write of its own (here a mute flag). */
    const record = (fanOuts: FanOutRecord[]) => store.conversations.setMuted(1, 1n, false, () => fanOuts);

    it("lists recorded fan-outs whole, by id, by scope too, and forgets finished ones", async () => {
      const [a, b, c] = [fanOut("1", 10), fanOut("user:7", 20, [9]), fanOut("1", 30)];
      await record([c, b]);
      await record([a]);
      expect(await store.outbox.pending(10)).to.deep.equal([a, b, c]);
      expect(ids(await store.outbox.pending(1))).to.deep.equal([a.fanOutId]);
      expect(ids(await store.outbox.pending(10, "1"))).to.deep.equal([a.fanOutId, c.fanOutId]);
      await store.outbox.finish(a);
      await store.outbox.finish(a);
      expect(ids(await store.outbox.pending(10))).to.deep.equal([b.fanOutId, c.fanOutId]);
      expect(await store.outbox.pending(10, "2")).to.deep.equal([]);
    });

    it("records the fan-outs of one change with it: a repeated id records none of them, nor the change", async () => {
      const [a, b] = [fanOut("1", 10), fanOut("1", 20)];
      await record([a]);
      let refused = false;
      await store.conversations.setMuted(1, 1n, true, () => [b, { ...a }]).catch(() => (refused = true));
      expect(refused).to.equal(true);
      expect(await store.outbox.pending(10)).to.deep.equal([a]);
      expect((await store.conversations.getUserState(1, 1n)).isMuted).to.equal(false);
    });

    it("records a message's fan-out and its place as the last message with the message, in one write", async () => {
      const conversationId = 2n ** 33n + 3n;
      await store.contacts.connect(7, 8, conversationId, 500);
      await store.conversations.markDeleted(8, conversationId, 0n);
      const message = { conversationId, messageId: 1n, senderId: 7, clientMessageId: 1n, body: new Uint8Array([1]), replyTo: null, metadata: {}, createdAt: 1000, updatedAt: null, edited: false };
      const inserted = fanOut(String(conversationId), 1000);
      expect(await store.messages.insertMessage(message, { recordAsLast: { participants: [7, 8] }, fanOut: inserted })).to.deep.equal({ outcome: "ok" });
      expect(await store.outbox.pending(10)).to.deep.equal([inserted]);
      const conversation = await store.conversations.getConversation(conversationId);
      expect([conversation?.lastMessageId, conversation?.lastMessageTime]).to.deep.equal([1n, 1000]);
      expect((await store.conversations.getUserState(8, conversationId)).isDeleted).to.equal(false);
      // A refused insert records nothing.
      expect((await store.messages.insertMessage({ ...message, clientMessageId: 2n }, { fanOut: fanOut(String(conversationId), 1001) })).outcome).to.equal("conflict");
      const updated = fanOut(String(conversationId), 1100);
      await store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([2]), updatedAt: 1100, edited: true }, { fanOut: updated });
      expect(await store.outbox.pending(10)).to.deep.equal([inserted, updated]);
    });

    it("records a change's events with the change, given what it answers; a change that did nothing records what its events say", async () => {
      const a = await newUser("ea@x.io");
      const b = await newUser("eb@x.io");
      const recorded = async () => (await store.outbox.pending(100)).map((f) => f.scope);
      const tagged = (tag: string) => () => [fanOut(tag, 1)];
      await store.users.updateProfile(a.userId, { nickname: "N" }, (user) => [fanOut(`profile:${user.nickname}`, 1)]);
      expect(await store.users.setCustomUsername(a.userId, "taken_name", tagged("username"))).to.equal("ok");
      expect(await store.users.setCustomUsername(b.userId, "taken_name", (outcome) => (outcome === "ok" ? [fanOut("never", 1)] : []))).to.equal("taken");
      const request = await store.contacts.createFriendRequest(a.userId, b.userId, "hi", 5, (made) => [fanOut(`request:${made.requestId}`, 1)]);
      expect(await store.contacts.resolveFriendRequest(request.requestId, 2, 6, tagged("accepted"))).to.equal(true);
      expect(await store.contacts.resolveFriendRequest(request.requestId, 2, 7, (done) => (done ? [fanOut("never", 1)] : []))).to.equal(false);
      expect(await store.contacts.setAlias(a.userId, b.userId, "B", tagged("alias"))).to.equal(true);
      expect(await store.contacts.removeContact(a.userId, b.userId, (existed) => [fanOut(`removed:${existed}`, 1)])).to.equal(true);
      const conversationId = (BigInt(b.userId) << 32n) | BigInt(a.userId);
      await store.conversations.setMuted(a.userId, conversationId, true, tagged("muted"));
      expect(await store.conversations.advanceRead(a.userId, conversationId, 3n, (position) => [fanOut(`read:${position}`, 1)])).to.equal(3n);
      await store.conversations.clearHistory(a.userId, conversationId, 2n, tagged("cleared"));
      await store.conversations.markDeleted(a.userId, conversationId, 0n, tagged("deleted"));
      expect(await store.messages.deleteFor(a.userId, conversationId, [9n], 0n, (ids) => [fanOut(`deleted:${ids.length}`, 1)])).to.deep.equal([]);
      expect(await store.contacts.unblock(a.userId, b.userId, (done) => [fanOut(`unblocked:${done}`, 1)])).to.equal(false);
      expect(await recorded()).to.deep.equal([
        "profile:N",
        "username",
        `request:${request.requestId}`,
        "accepted",
        "alias",
        "removed:true",
        "muted",
        "read:3",
        "cleared",
        "deleted",
        "deleted:0",
        "unblocked:false",
      ]);
    });

    it("writes nothing of a change whose events cannot be recorded", async () => {
      const a = await newUser("fa@x.io");
      const failing = () => {
        throw new Error("events failed");
      };
      let failed = false;
      await store.users.updateProfile(a.userId, { nickname: "Changed" }, failing).catch(() => (failed = true));
      expect(failed).to.equal(true);
      expect((await store.users.getUser(a.userId))?.nickname).to.equal("n");
      expect(await store.outbox.pending(10)).to.deep.equal([]);
    });

    it("keeps recorded fan-outs across close and reopen", async function () {
      if (!subject.reopen) this.skip();
      const kept = fanOut("1", 10);
      await record([kept]);
      store = t.store = await subject.reopen!();
      expect(await store.outbox.pending(10)).to.deep.equal([kept]);
    });
  });
}
