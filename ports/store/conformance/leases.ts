// What the storage port promises of its shard leases and fences, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import { OwnershipLostError, type Fence, type FenceHolder, type WebhookHandoff, type Store } from "../store.js";
import { shardOf, userStreamKey } from "../../../shared/shards.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeLeases(t: StoreSuite): void {
  describe("leases and fences", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });

    const nodeA = { node: "node-a", instance: "a-1" };
    const nodeB = { node: "node-b", instance: "b-1" };
    const ttl = 30_000;
    const fenceOf = (lease: { shard: number; epoch: number }): Fence => ({ shard: lease.shard, epoch: lease.epoch });
    /** One entry of user `userId` at `sn`, naming an event of its own, under the given fences. */
    const appendOne = (userId: number, sn: number, fences: Fence[], handoffs?: WebhookHandoff[]) =>
      store.updates.append({ events: [{ eventId: BigInt(userId * 1000 + sn), entry: new Uint8Array([sn]) }], entries: [{ userId, sn, eventId: BigInt(userId * 1000 + sn) }], handoffs, createdAt: sn, fences });
    const conversationId = (2n ** 41n) | 3n;
    const message = (messageId: bigint) => ({
      conversationId,
      messageId,
      senderId: 7,
      clientMessageId: 500n + messageId,
      body: new Uint8Array([1]),
      replyTo: null,
      metadata: {},
      createdAt: 1000,
      updatedAt: null,
      edited: false,
    });
    const refused = async (write: Promise<unknown>): Promise<OwnershipLostError> => {
      let caught: unknown;
      await write.catch((err: unknown) => (caught = err));
      expect(caught).to.be.instanceOf(OwnershipLostError);
      return caught as OwnershipLostError;
    };

    it("acquires a free shard at epoch 1, extends its own lease with the same epoch, and refuses another node until it expires", async () => {
      const first = await store.leases.acquire(5, nodeA, 1000, ttl);
      expect(first).to.deep.equal({ shard: 5, node: "node-a", instance: "a-1", epoch: 1, expiresAt: 1000 + ttl });
      expect(await store.leases.acquire(5, nodeA, 2000, ttl)).to.deep.include({ instance: "a-1", epoch: 1, expiresAt: 2000 + ttl });
      expect(await store.leases.acquire(5, nodeB, 2000 + ttl - 1, ttl)).to.deep.include({ instance: "a-1", epoch: 1 });
      expect(await store.leases.getLease(5)).to.deep.include({ instance: "a-1", epoch: 1 });
      expect(await store.leases.getLease(6)).to.equal(undefined);
    });

    it("keeps a lease numbered below zero (a fan-out id slot) apart from the shard of the same magnitude", async () => {
      expect(await store.leases.acquire(-6, nodeA, 1000, ttl)).to.deep.equal({ shard: -6, node: "node-a", instance: "a-1", epoch: 1, expiresAt: 1000 + ttl });
      expect(await store.leases.acquire(6, nodeB, 1000, ttl)).to.deep.include({ instance: "b-1", epoch: 1 });
      const slot = (await store.leases.getLease(-6))!;
      expect(await store.leases.renew(nodeA, [{ shard: slot.shard, epoch: slot.epoch }], 2000, ttl)).to.deep.equal([-6]);
      await store.leases.release(nodeA, [{ shard: -6, epoch: 1 }]);
      expect(await store.leases.getLease(-6)).to.deep.include({ instance: "" });
      expect(await store.leases.getLease(6)).to.deep.include({ instance: "b-1" });
    });

    it("renews while the epoch holds, expired or not; a lease taken over after expiry has the next epoch and the old holder's renewal fails", async () => {
      const lease = await store.leases.acquire(5, nodeA, 1000, ttl);
      expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000, ttl)).to.deep.equal([5]);
      expect((await store.leases.getLease(5))?.expiresAt).to.equal(5000 + ttl);
      // Expired, but nobody took it: still A's, same epoch.
      expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000 + 2 * ttl, ttl)).to.deep.equal([5]);
      const takenOver = await store.leases.acquire(5, nodeB, 5000 + 4 * ttl, ttl);
      expect(takenOver).to.deep.include({ node: "node-b", instance: "b-1", epoch: 2 });
      expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000 + 4 * ttl, ttl)).to.deep.equal([]);
      // A's own acquire now finds B's lease.
      expect(await store.leases.acquire(5, nodeA, 5000 + 4 * ttl, ttl)).to.deep.include({ instance: "b-1", epoch: 2 });
    });

    it("a released lease is taken at once with the next epoch; a new instance of the same node takes its leases at once", async () => {
      const lease = await store.leases.acquire(1, nodeA, 1000, ttl);
      await store.leases.release(nodeA, [fenceOf(lease)]);
      expect(await store.leases.acquire(1, nodeB, 1001, ttl)).to.deep.include({ instance: "b-1", epoch: 2 });
      // Releasing with a stale epoch or as another instance changes nothing.
      await store.leases.release(nodeA, [{ shard: 1, epoch: 2 }]);
      await store.leases.release(nodeB, [{ shard: 1, epoch: 1 }]);
      expect(await store.leases.getLease(1)).to.deep.include({ instance: "b-1", epoch: 2 });
      const restarted = { node: "node-b", instance: "b-2" };
      expect(await store.leases.acquire(1, restarted, 1002, ttl)).to.deep.include({ instance: "b-2", epoch: 3 });
    });

    it("takes over a live lease only while it is exactly the one read, with the next epoch; the old holder's fence is refused after", async () => {
      const held = await store.leases.acquire(4, nodeA, 1000, ttl);
      const taken = await store.leases.takeOver(4, nodeB, held, 1001, ttl);
      expect(taken).to.deep.include({ node: "node-b", instance: "b-1", epoch: held.epoch + 1, expiresAt: 1001 + ttl });
      expect(await store.leases.renew(nodeA, [fenceOf(held)], 1002, ttl)).to.deep.equal([]);
      await refused(store.messages.insertMessage({ ...message(1n), conversationId: conversationId + 4n }, { fence: fenceOf(held) }));
      // A take-over from a lease read before it changed hands changes nothing and answers the lease as it is.
      const nodeC = { node: "node-c", instance: "c-1" };
      expect(await store.leases.takeOver(4, nodeC, held, 1003, ttl)).to.deep.include({ instance: "b-1", epoch: held.epoch + 1 });
      expect(await store.leases.getLease(4)).to.deep.include({ instance: "b-1", epoch: held.epoch + 1 });
    });

    it("refuses a stale fence for message inserts and updates, writing nothing; the current fence writes", async () => {
      const old = fenceOf(await store.leases.acquire(9, nodeA, 1000, ttl));
      expect(await store.messages.insertMessage(message(1n), { fence: old, opensStream: true })).to.deep.equal({ outcome: "ok" });
      const current = fenceOf(await store.leases.acquire(9, nodeB, 1000 + ttl, ttl));
      expect(current.epoch).to.equal(old.epoch + 1);
      const fanOut = { fanOutId: 77n, scope: String(conversationId), recipients: [7], entry: new Uint8Array([1]), related: "{}", createdAt: 1 };
      const lost = await refused(store.messages.insertMessage(message(2n), { fence: old, fanOut, recordAsLast: { participants: [7] } }));
      expect(lost.fence).to.deep.equal(old);
      await refused(store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([2]), updatedAt: 2000, edited: true }, { fence: old, closesStream: true }));
      expect(await store.messages.latestMessageId(conversationId)).to.equal(1n);
      expect((await store.messages.getMessage(conversationId, 1n))?.body).to.deep.equal(new Uint8Array([1]));
      expect(await store.messages.listOpenStreams(1000, 10)).to.have.length(1);
      expect(await store.outbox.pending(10)).to.deep.equal([]);
      // A fence for a shard nobody leased is refused too.
      await refused(store.messages.insertMessage(message(2n), { fence: { shard: 10, epoch: 1 } }));
      expect(await store.messages.insertMessage(message(2n), { fence: current })).to.deep.equal({ outcome: "ok" });
      await store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([3]), updatedAt: 2000, edited: false }, { fence: current, closesStream: true });
      expect((await store.messages.getMessage(conversationId, 1n))?.body).to.deep.equal(new Uint8Array([3]));
    });

    it("refuses a stale fence for update-stream appends, queuing no webhook", async () => {
      const old = fenceOf(await store.leases.acquire(3, nodeA, 1000, ttl));
      expect(await appendOne(7, 1, [old])).to.deep.equal({ ok: true });
      const current = fenceOf(await store.leases.acquire(3, nodeB, 1000 + ttl, ttl));
      await refused(appendOne(7, 2, [old], [{ agentUserId: 7, bodies: ["b"], queuedAt: 1, deliveredSn: 2 }]));
      // One stale fence among current ones refuses the whole write.
      await refused(appendOne(7, 2, [current, old]));
      expect(await store.updates.latestSn(7)).to.equal(1);
      expect(await store.webhookJobs.pending(7)).to.deep.equal([]);
      expect(await appendOne(7, 2, [current])).to.deep.equal({ ok: true });
    });

    describe("appends confirmed after writing (a FenceHolder)", () => {
      const shard = shardOf(userStreamKey(7));
      /** A holder whose own view still trusts its lease: a pause it did not notice, or a partition. */
      const unaware = (instance: string): FenceHolder => ({ instance, untrusted: () => undefined });
      const appendAs = (on: Store, holder: FenceHolder, fence: Fence, sn: number, eventId: bigint) =>
        on.updates.append({ events: [{ eventId, entry: new Uint8Array([Number(eventId)]) }], entries: [{ userId: 7, sn, eventId }], createdAt: sn, fences: [fence], holder });
      const streamOf7 = async () => (await store.updates.readUpdates(7, 0, 10)).map((row) => [row.sn, row.entry[0]]);

      it("refuses an owner whose live lease was taken over, and nothing it wrote shows once the new owner wrote the stream", async () => {
        const other = subject.another ? await subject.another() : store;
        const lease = await store.leases.acquire(shard, nodeA, 1000, ttl);
        const fenceA = fenceOf(lease);
        expect(await appendAs(store, unaware("a-1"), fenceA, 1, 1n)).to.deep.equal({ ok: true });
        // A is seen leaving the cluster; B takes its shard before the lease runs out.
        const fenceB = fenceOf(await other.leases.takeOver(shard, nodeB, lease, 2000, ttl));
        expect(fenceB.epoch).to.equal(fenceA.epoch + 1);
        expect(await appendAs(other, unaware("b-1"), fenceB, 2, 2n)).to.deep.equal({ ok: true });
        // A wakes, believing itself the owner: at the sn it thinks next, then past the new owner's.
        await refused(appendAs(store, unaware("a-1"), fenceA, 2, 3n));
        await refused(appendAs(store, unaware("a-1"), fenceA, 3, 4n));
        expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2]]);
        expect(await store.updates.latestSn(7)).to.equal(2);
        expect(await store.updates.holders(3n, [7])).to.deep.equal([]);
        expect(await store.updates.holders(4n, [7])).to.deep.equal([]);
        expect(await appendAs(other, unaware("b-1"), fenceB, 3, 5n)).to.deep.equal({ ok: true });
        expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2], [3, 5]]);
      });

      it("refuses an owner whose own clock no longer trusts the lease (taken after it ran out), and its write does not show beside the new owner's", async () => {
        const other = subject.another ? await subject.another() : store;
        const fenceA = fenceOf(await store.leases.acquire(shard, nodeA, 1000, ttl));
        expect(await appendAs(store, unaware("a-1"), fenceA, 1, 1n)).to.deep.equal({ ok: true });
        const fenceB = fenceOf(await other.leases.acquire(shard, nodeB, 1000 + ttl, ttl));
        expect(await appendAs(other, unaware("b-1"), fenceB, 2, 2n)).to.deep.equal({ ok: true });
        const expired: FenceHolder = { instance: "a-1", untrusted: (fences) => fences[0] };
        const lost = await refused(appendAs(store, expired, fenceA, 2, 3n));
        expect(lost.fence).to.deep.equal(fenceA);
        expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2]]);
      });

      it("answers a write whose holder still owns its fences", async () => {
        const fence = fenceOf(await store.leases.acquire(shard, nodeA, 1000, ttl));
        for (let sn = 1; sn <= 3; sn++) expect(await appendAs(store, unaware("a-1"), fence, sn, BigInt(sn))).to.deep.equal({ ok: true });
        expect(await appendAs(store, unaware("a-1"), fence, 3, 9n)).to.deep.equal({ ok: false, conflicts: [7] });
        expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2], [3, 3]]);
      });
    });

    it("concurrent takeovers leave one holder, and of two owners writing the same id at once only the current one writes", async () => {
      const other = subject.another ? await subject.another() : store;
      const holders = [0, 1, 2, 3].map((n) => ({ node: `node-${n}`, instance: `i-${n}` }));
      const results = await Promise.all(holders.map((holder, n) => (n % 2 ? other : store).leases.acquire(11, holder, 1000, ttl)));
      const winner = await store.leases.getLease(11);
      expect(winner?.epoch).to.equal(1);
      for (const result of results) expect(result).to.deep.equal(winner);
      const old = fenceOf(winner!);
      const current = fenceOf(await other.leases.acquire(11, nodeB, 1000 + ttl, ttl));
      const [stale, fresh] = await Promise.allSettled([
        store.messages.insertMessage({ ...message(1n), conversationId: conversationId + 1n }, { fence: old }),
        other.messages.insertMessage({ ...message(1n), conversationId: conversationId + 1n, clientMessageId: 9n }, { fence: current }),
      ]);
      expect(stale.status === "rejected" && stale.reason).to.be.instanceOf(OwnershipLostError);
      expect(fresh).to.deep.equal({ status: "fulfilled", value: { outcome: "ok" } });
      const [staleAppend, freshAppend] = await Promise.allSettled([
        appendOne(8, 1, [old]),
        other.updates.append({ events: [{ eventId: 8001n, entry: new Uint8Array([1]) }], entries: [{ userId: 8, sn: 1, eventId: 8001n }], createdAt: 1, fences: [current] }),
      ]);
      expect(staleAppend.status === "rejected" && staleAppend.reason).to.be.instanceOf(OwnershipLostError);
      expect(freshAppend).to.deep.equal({ status: "fulfilled", value: { ok: true } });
      expect((await store.messages.getMessage(conversationId + 1n, 1n))?.clientMessageId).to.equal(9n);
    });
  });
}
