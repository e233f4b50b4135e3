// What the storage port promises of its conversations, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describeConversations(t: StoreSuite): void {
  describe("conversation state", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });

    it("answers which of the users muted a conversation, without creating state", async () => {
      const conversationId = (2n ** 40n) | 3n;
      await store.contacts.connect(1, 2, conversationId, 10);
      await store.conversations.setMuted(2, conversationId, true);
      expect(await store.conversations.mutedAmong(conversationId, [1, 2, 3])).to.deep.equal([2]);
      expect(await store.conversations.mutedAmong(conversationId + 1n, [2])).to.deep.equal([]);
      expect(await store.conversations.mutedAmong(conversationId, [])).to.deep.equal([]);
      await store.conversations.setMuted(2, conversationId, false);
      expect(await store.conversations.mutedAmong(conversationId, [1, 2])).to.deep.equal([]);
    });
  });

  describe("conversation list", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });

    const minute = 60_000;
    const pairWith = (other: number) => (BigInt(other) << 32n) | 1n;
    const listed = async (userId: number, beforeTime = Number.MAX_SAFE_INTEGER, limit = 100) =>
      (await store.conversations.listForUser(userId, beforeTime, limit)).map((row) => [row.conversation.conversationId, row.conversation.lastMessageTime]);

    it("lists newest last message first, moves a conversation with its new last message, and pages by time", async () => {
      await store.contacts.connect(1, 2, pairWith(2), 3 * minute);
      const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 1, createdAt: 5 * minute + 1 }, [
        { userId: 1, role: 1, joinedAt: 1 },
        { userId: 3, role: 2, joinedAt: 1 },
      ]);
      const groupId = BigInt(group.groupId);
      await store.contacts.connect(1, 4, pairWith(4), 5 * minute + 2);
      expect(await listed(1)).to.deep.equal([
        [pairWith(4), 5 * minute + 2],
        [groupId, 5 * minute + 1],
        [pairWith(2), 3 * minute],
      ]);
      await store.conversations.recordMessage(pairWith(2), 1n, 9 * minute, [1, 2]);
      // An older message id records nothing.
      await store.conversations.recordMessage(pairWith(2), 1n, 10 * minute, [1, 2]);
      expect(await listed(1)).to.deep.equal([
        [pairWith(2), 9 * minute],
        [pairWith(4), 5 * minute + 2],
        [groupId, 5 * minute + 1],
      ]);
      expect(await listed(2)).to.deep.equal([[pairWith(2), 9 * minute]]);
      expect(await listed(1, 9 * minute, 2)).to.deep.equal([
        [pairWith(4), 5 * minute + 2],
        [groupId, 5 * minute + 1],
      ]);
      expect(await listed(1, 5 * minute + 2, 10)).to.deep.equal([[groupId, 5 * minute + 1]]);
      expect(await listed(1, 5 * minute + 1, 10)).to.deep.equal([]);
    });

    it("leaves out a deleted conversation until a new message lists it again", async () => {
      await store.contacts.connect(1, 2, pairWith(2), 1000);
      await store.contacts.connect(1, 3, pairWith(3), 2000);
      await store.conversations.markDeleted(1, pairWith(3), 0n);
      expect(await listed(1)).to.deep.equal([[pairWith(2), 1000]]);
      expect(await listed(3)).to.deep.equal([[pairWith(3), 2000]]);
      await store.conversations.recordMessage(pairWith(3), 1n, 2 * minute, [1, 3]);
      expect(await listed(1)).to.deep.equal([
        [pairWith(3), 2 * minute],
        [pairWith(2), 1000],
      ]);
      expect((await store.conversations.getUserState(1, pairWith(3))).isDeleted).to.equal(false);
    });

    it("orders many conversations of one minute by time then id, and pages through them whole", async () => {
      const expected: [bigint, number][] = [];
      for (let other = 2; other < 42; other++) {
        const at = 7 * minute + (other % 5);
        await store.contacts.connect(1, other, pairWith(other), at);
        expected.push([pairWith(other), at]);
      }
      await store.contacts.connect(1, 50, pairWith(50), 2 * minute);
      expected.push([pairWith(50), 2 * minute]);
      expected.sort((x, y) => y[1] - x[1] || (y[0] > x[0] ? 1 : -1));
      expect(await listed(1)).to.deep.equal(expected);
      const paged: (number | bigint)[][] = [];
      let before = Number.MAX_SAFE_INTEGER;
      for (;;) {
        const page = await listed(1, before, 3);
        if (page.length === 0) break;
        const lastTime = page[page.length - 1][1] as number;
        // Pages cut by time: everything at the page's last time is taken with it, however many.
        paged.push(...page.filter((row) => row[1] > lastTime), ...(await listed(1, lastTime + 1, 100)).filter((row) => row[1] === lastTime));
        before = lastTime;
      }
      expect(paged).to.deep.equal(expected);
    });
  });
}
