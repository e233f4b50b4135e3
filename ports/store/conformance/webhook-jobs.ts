// What the storage port promises of its webhook queues and agent cursors, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import { maxQueuedWebhooksPerAgent, type Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeWebhookJobs(t: StoreSuite): void {
  describe("webhook jobs and agent cursors", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });

    const heads = async (now: number, busy: number[] = [], limit = 10) =>
      (await store.webhookJobs.due(now, busy, limit)).map((job) => [job.agentUserId, job.body, job.attempts]);

    it("answers only the due head of each agent's queue, oldest due first, skipping busy agents", async () => {
      await store.webhookJobs.enqueue(1, "a1", 100);
      await store.webhookJobs.enqueue(2, "b1", 50);
      await store.webhookJobs.enqueue(1, "a2", 100);
      await store.webhookJobs.enqueue(3, "c1", 500);
      expect(await heads(100)).to.deep.equal([[2, "b1", 0], [1, "a1", 0]]);
      expect(await heads(500)).to.deep.equal([[2, "b1", 0], [1, "a1", 0], [3, "c1", 0]]);
      expect(await heads(500, [1, 3])).to.deep.equal([[2, "b1", 0]]);
      expect(await heads(500, [], 1)).to.deep.equal([[2, "b1", 0]]);
      expect(await heads(500, [], 0)).to.deep.equal([]);
      expect(await heads(49)).to.deep.equal([]);
    });

    it("answers only the agents of a slice when given one (a webhook-fleet node's share)", async () => {
      for (const agentUserId of [4, 5, 6, 7, 9]) await store.webhookJobs.enqueue(agentUserId, `j${agentUserId}`, agentUserId);
      const modulo = (owned: number[]) => (agentUserId: number) => owned.includes(agentUserId % 4);
      const sliced = async (owned: number[], limit = 10) => (await store.webhookJobs.due(100, [], limit, modulo(owned))).map((job) => job.agentUserId);
      expect(await sliced([1])).to.deep.equal([5, 9]);
      expect(await sliced([0, 3])).to.deep.equal([4, 7]);
      expect(await sliced([0, 3], 1)).to.deep.equal([4]);
      expect(await sliced([])).to.deep.equal([]);
      expect((await store.webhookJobs.due(100, [5], 10, modulo([1]))).map((job) => job.agentUserId)).to.deep.equal([9]);
    });

    it("answers when each job was queued, whatever its retries", async () => {
      await store.webhookJobs.enqueue(1, "a1", 100);
      await store.webhookJobs.handOver(2, ["b1"], 40, 3);
      expect((await store.webhookJobs.due(100, [], 10)).map((job) => [job.body, job.queuedAt])).to.deep.equal([["b1", 40], ["a1", 100]]);
      const [head] = await store.webhookJobs.due(100, [2], 10);
      await store.webhookJobs.reschedule(head, 1, 300);
      expect((await store.webhookJobs.due(300, [2], 10)).map((job) => [job.body, job.attempts, job.queuedAt])).to.deep.equal([["a1", 1, 100]]);
      expect((await store.webhookJobs.pending(1)).map((job) => job.queuedAt)).to.deep.equal([100]);
    });

    it("keeps a rescheduled head in front: the jobs behind it wait, then follow in order", async () => {
      await store.webhookJobs.enqueue(1, "a1", 100);
      await store.webhookJobs.enqueue(1, "a2", 100);
      const [head] = await store.webhookJobs.due(100, [], 10);
      await store.webhookJobs.reschedule(head, 1, 1100);
      expect(await heads(1000)).to.deep.equal([]);
      expect(await store.webhookJobs.due(1100, [], 10)).to.deep.equal([{ ...head, attempts: 1, nextAttemptAt: 1100 }]);
      await store.webhookJobs.remove(head);
      expect(await heads(1100)).to.deep.equal([[1, "a2", 0]]);
    });

    it("clears one agent's queue and answers how many jobs it held", async () => {
      await store.webhookJobs.enqueue(1, "a1", 100);
      await store.webhookJobs.enqueue(1, "a2", 100);
      await store.webhookJobs.enqueue(2, "b1", 100);
      expect((await store.webhookJobs.pending(1)).map((job) => job.body)).to.deep.equal(["a1", "a2"]);
      expect(await store.webhookJobs.clearAgent(1)).to.equal(2);
      expect(await store.webhookJobs.clearAgent(1)).to.equal(0);
      expect(await store.webhookJobs.pending(1)).to.deep.equal([]);
      expect(await heads(100)).to.deep.equal([[2, "b1", 0]]);
    });

    it(`keeps at most about ${maxQueuedWebhooksPerAgent} jobs per agent, dropping the oldest`, async () => {
      // Two agents receiving in turn, as members of one group do.
      const total = maxQueuedWebhooksPerAgent + 300;
      for (let index = 1; index <= total; index++) {
        await store.webhookJobs.enqueue(1, `a${index}`, 100);
        await store.webhookJobs.enqueue(2, `b${index}`, 100);
      }
      await store.webhookJobs.enqueue(3, "c1", 100);
      for (const [agent, prefix] of [[1, "a"], [2, "b"]] as const) {
        const kept = (await store.webhookJobs.pending(agent)).map((job) => job.body);
        expect(kept.length).to.be.within(maxQueuedWebhooksPerAgent, maxQueuedWebhooksPerAgent + 100);
        expect(kept.at(-1)).to.equal(`${prefix}${total}`);
        expect(kept[0]).to.equal(`${prefix}${total - kept.length + 1}`);
      }
      expect((await store.webhookJobs.pending(3)).map((job) => job.body)).to.deep.equal(["c1"]);
    });

    it("moves the delivered position forward only", async () => {
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(0);
      await store.webhookJobs.advanceDelivered(1, 5);
      await store.webhookJobs.advanceDelivered(1, 3);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(5);
      expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
    });

    it("moves the delivered position back only, and never creates one", async () => {
      await store.webhookJobs.advanceDelivered(1, 9);
      await store.webhookJobs.rewindDelivered(1, 12);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(9);
      await store.webhookJobs.rewindDelivered(1, 4);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(4);
      await store.webhookJobs.rewindDelivered(1, 0);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(0);
      // Forward moves still work after a rewind: the position is not stuck at its low point.
      await store.webhookJobs.advanceDelivered(1, 6);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(6);
      await store.webhookJobs.rewindDelivered(2, 3);
      expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
      await store.webhookJobs.advanceDelivered(2, 2);
      expect(await store.webhookJobs.deliveredSn(2)).to.equal(2);
    });

    it("a hand-over queues its bodies in order and moves the delivered position forward only", async () => {
      await store.webhookJobs.enqueue(1, "live", 50);
      await store.webhookJobs.handOver(1, ["b1", "b2"], 60, 8);
      expect((await store.webhookJobs.pending(1)).map((job) => [job.body, job.nextAttemptAt])).to.deep.equal([["live", 50], ["b1", 60], ["b2", 60]]);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(8);
      await store.webhookJobs.handOver(1, [], 70, 5);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(8);
      expect(await store.webhookJobs.pending(2)).to.deep.equal([]);
    });

    it("an append with hand-offs queues their bodies and moves the delivered positions in the same write", async () => {
      // One event per sn: a stream holds an event once.
      const write = (entries: [number, number][], handoffs: { agentUserId: number; bodies: string[]; queuedAt: number; deliveredSn: number }[]) =>
        store.updates.append({
          events: entries.map(([, sn]) => ({ eventId: BigInt(900 + sn), entry: new Uint8Array([9]) })),
          entries: entries.map(([userId, sn]) => ({ userId, sn, eventId: BigInt(900 + sn) })),
          handoffs,
          createdAt: 7,
        });
      expect(await write([[1, 1], [1, 2], [1, 3], [2, 1]], [{ agentUserId: 1, bodies: ["m1", "m3"], queuedAt: 70, deliveredSn: 3 }])).to.deep.equal({ ok: true });
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
      expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
      const queued = await store.webhookJobs.due(70, [], 10);
      expect(queued.map((job) => [job.agentUserId, job.body, job.nextAttemptAt])).to.deep.equal([[1, "m1", 70]]);
      await store.webhookJobs.remove(queued[0]);
      expect(await heads(70)).to.deep.equal([[1, "m3", 0]]);
      // A refused append writes none of it: no entry, no job, no position.
      expect(await write([[1, 4], [1, 3]], [{ agentUserId: 1, bodies: ["lost"], queuedAt: 80, deliveredSn: 4 }])).to.deep.equal({ ok: false, conflicts: [1] });
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
      expect(await heads(80)).to.deep.equal([[1, "m3", 0]]);
      // Without a hand-off an append leaves the agent delivery state alone.
      await write([[1, 4]], []);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
    });

    it("keeps queued jobs and positions across close and reopen", async function () {
      if (!subject.reopen) this.skip();
      await store.webhookJobs.enqueue(1, "a1", 100);
      await store.webhookJobs.advanceDelivered(1, 9);
      store = t.store = await subject.reopen!();
      expect(await heads(100)).to.deep.equal([[1, "a1", 0]]);
      expect(await store.webhookJobs.deliveredSn(1)).to.equal(9);
    });
  });
}
