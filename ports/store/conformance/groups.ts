// What the storage port promises of its groups, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import { OwnershipLostError, type FanOutRecord, type Fence, type Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeGroups(t: StoreSuite): void {
  describe("group writes", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });

    const member = (userId: number) => ({ userId, role: 2, joinedAt: 5 });

    it("creates the group with its GROUP conversation and each member's state in it; added members get theirs", async () => {
      const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }, member(8)]);
      const conversationId = BigInt(group.groupId);
      expect(await store.conversations.getConversation(conversationId)).to.deep.include({ type: 2, lastMessageId: 0n, lastMessageTime: 5 });
      await store.conversations.setMuted(9, conversationId, true);
      expect(await store.groups.addMembers(group.groupId, [member(8), member(9)])).to.deep.equal([9]);
      const listed = async (userId: number) => (await store.conversations.listForUser(userId, Number.MAX_SAFE_INTEGER, 10)).map((row) => row.conversation.conversationId);
      for (const userId of [7, 8, 9]) expect(await listed(userId)).to.deep.equal([conversationId]);
      expect((await store.conversations.getUserState(9, conversationId)).isMuted).to.equal(true);
    });

    it("records a group change's system message with it; the message's write deletes the record", async () => {
      const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }]);
      const conversationId = BigInt(group.groupId);
      const systemMessage = { systemMessageId: 2n ** 61n + 3n, conversationId, body: new Uint8Array([8, 7]), extraRecipients: [9], createdAt: 6 };
      await store.groups.updateGroup(group.groupId, { name: "renamed" }, (updated) => (updated.name === "renamed" ? [systemMessage] : []));
      expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([systemMessage]);
      expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(true);
      const message = { conversationId, messageId: 1n, senderId: 0, clientMessageId: 0n, body: new Uint8Array([8, 7]), replyTo: null, metadata: {}, createdAt: 7, updatedAt: null, edited: false };
      // A refused insert leaves it recorded.
      await store.messages.insertMessage(message);
      expect((await store.messages.insertMessage(message, { postsSystemMessage: systemMessage.systemMessageId })).outcome).to.equal("conflict");
      expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(true);
      expect((await store.messages.insertMessage({ ...message, messageId: 2n }, { postsSystemMessage: systemMessage.systemMessageId })).outcome).to.equal("ok");
      expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
      expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(false);
    });

    describe("under the owner's fence", () => {
      const ttl = 30_000;
      const oldOwner = { node: "node-a", instance: "a-1" };
      const newOwner = { node: "node-b", instance: "b-1" };
      // Any shard will do: the store checks the fence it is given against that shard's lease.
      const shard = 12;
      const fenceOf = (lease: { shard: number; epoch: number }): Fence => ({ shard: lease.shard, epoch: lease.epoch });
      const refused = async (write: Promise<unknown>, fence: Fence) => {
        let caught: unknown;
        await write.catch((err: unknown) => (caught = err));
        expect(caught).to.be.instanceOf(OwnershipLostError);
        expect((caught as OwnershipLostError).fence).to.deep.equal(fence);
      };
      const systemMessage = (conversationId: bigint, n: bigint) => ({ systemMessageId: 2n ** 61n + n, conversationId, body: new Uint8Array([8, Number(n)]), extraRecipients: [], createdAt: 6 });
      const fanOut = (n: bigint): FanOutRecord => ({ fanOutId: 900n + n, scope: "user:7", recipients: [8], entry: new Uint8Array([Number(n)]), related: "{}", createdAt: 6 });
      /** A group of 7 (owner), 8 and 9, then 10 added by the old owner while it held the lease; the lease then taken by another node. */
      const takenOver = async () => {
        const old = fenceOf(await store.leases.acquire(shard, oldOwner, 1000, ttl));
        const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }, member(8), member(9)]);
        expect(await store.groups.addMembers(group.groupId, [member(10)], undefined, { fence: old })).to.deep.equal([10]);
        const current = fenceOf(await store.leases.acquire(shard, newOwner, 1000 + ttl, ttl));
        expect(current.epoch).to.equal(old.epoch + 1);
        return { groupId: group.groupId, conversationId: BigInt(group.groupId), old, current };
      };
      const memberIds = async (groupId: number) => (await store.groups.listMembers(groupId)).map((m) => m.userId);

      it("refuses a stale fence for every group change, leaving no trace: no row, no reverse index, no event", async () => {
        const { groupId, conversationId, old } = await takenOver();
        const stale = { fence: old };
        await refused(store.groups.updateGroup(groupId, { name: "stale", description: "stale" }, () => [systemMessage(conversationId, 1n)], stale), old);
        await refused(store.groups.addMembers(groupId, [member(11)], () => [systemMessage(conversationId, 2n), fanOut(2n)], stale), old);
        await refused(store.groups.removeMember(groupId, 8, () => [fanOut(3n), systemMessage(conversationId, 3n)], stale), old);
        await refused(store.groups.dissolveGroup(groupId, () => [fanOut(4n)], stale), old);
        // A fence for a shard nobody leased is refused too.
        await refused(store.groups.removeMember(groupId, 9, undefined, { fence: { shard: shard + 1, epoch: 1 } }), { shard: shard + 1, epoch: 1 });
        expect(await store.groups.getGroup(groupId)).to.deep.include({ name: "g", description: "", status: 1 });
        expect(await memberIds(groupId)).to.deep.equal([7, 8, 9, 10]);
        expect(await store.groups.getMember(groupId, 11)).to.equal(undefined);
        expect(await store.groups.groupIdsOf(11)).to.deep.equal([]);
        expect(await store.groups.groupIdsOf(8)).to.deep.equal([groupId]);
        expect((await store.groups.listGroupsOf(9, 0, 10)).map((g) => g.groupId)).to.deep.equal([groupId]);
        expect((await store.conversations.listForUser(11, Number.MAX_SAFE_INTEGER, 10)).map((row) => row.conversation.conversationId)).to.deep.equal([]);
        expect(await store.outbox.pending(10)).to.deep.equal([]);
        expect(await store.outbox.pending(10, "user:7")).to.deep.equal([]);
        expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
      });

      it("writes every group change under the current fence, with its events; messages of the conversation still write after them", async () => {
        const { groupId, conversationId, current } = await takenOver();
        const write = { fence: current };
        expect(await store.groups.updateGroup(groupId, { name: "renamed" }, () => [systemMessage(conversationId, 1n)], write)).to.deep.include({ name: "renamed" });
        expect(await store.groups.addMembers(groupId, [member(11), member(8)], (added) => (added.length > 0 ? [fanOut(2n)] : []), write)).to.deep.equal([11]);
        expect(await store.groups.removeMember(groupId, 8, () => [fanOut(3n)], write)).to.equal(true);
        expect(await store.groups.removeMember(groupId, 8, (done) => (done ? [fanOut(9n)] : []), write)).to.equal(false);
        expect(await memberIds(groupId)).to.deep.equal([7, 9, 10, 11]);
        expect(await store.groups.groupIdsOf(11)).to.deep.equal([groupId]);
        expect(await store.groups.groupIdsOf(8)).to.deep.equal([]);
        expect((await store.outbox.pendingSystemMessages(10)).map((m) => m.systemMessageId)).to.deep.equal([2n ** 61n + 1n]);
        expect((await store.outbox.pending(10, "user:7")).map((f) => f.fanOutId)).to.deep.equal([902n, 903n]);
        // The owner posts the change's system message through the same conversation, under the same fence.
        const message = { conversationId, messageId: 1n, senderId: 0, clientMessageId: 0n, body: new Uint8Array([8, 1]), replyTo: null, metadata: {}, createdAt: 7, updatedAt: null, edited: false };
        expect((await store.messages.insertMessage(message, { fence: current, postsSystemMessage: 2n ** 61n + 1n })).outcome).to.equal("ok");
        expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
        expect(await store.groups.dissolveGroup(groupId, () => [fanOut(4n)], write)).to.deep.equal([7, 9, 10, 11]);
        expect(await store.groups.getGroup(groupId)).to.deep.include({ status: 2 });
        expect(await memberIds(groupId)).to.deep.equal([]);
        expect(await store.groups.groupIdsOf(11)).to.deep.equal([]);
        expect(await store.messages.latestMessageId(conversationId)).to.equal(1n);
      });

      it("of two owners changing one group at once, only the current one writes", async () => {
        const other = subject.another ? await subject.another() : store;
        const { groupId, old, current } = await takenOver();
        const [stale, fresh] = await Promise.allSettled([
          store.groups.addMembers(groupId, [member(11)], () => [fanOut(1n)], { fence: old }),
          other.groups.addMembers(groupId, [member(12)], () => [fanOut(2n)], { fence: current }),
        ]);
        expect(stale.status === "rejected" && stale.reason).to.be.instanceOf(OwnershipLostError);
        expect(fresh).to.deep.equal({ status: "fulfilled", value: [12] });
        expect(await memberIds(groupId)).to.deep.equal([7, 8, 9, 10, 12]);
        expect((await store.outbox.pending(10, "user:7")).map((f) => f.fanOutId)).to.deep.equal([902n]);
      });
    });
  });
}
