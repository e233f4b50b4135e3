// What the Cassandra update streams and webhook queue add to the port's promises (DATA-MODEL.md
// §5.4, §5.6): streams span bucket partitions (a small bucket size keeps it fast), an owner's rows
// written after a newer owner claimed the stream never show, wherever they land, a takeover of a
// live lease revokes its holder's appends, a hand-off left unwritten by a stopped process is
// rolled forward by the next append, and jobs queued through another handle are found through the
// sweep index, or at once when announced.
import cassandra from "cassandra-driver";
import { expect } from "chai";
import { shardOf, userStreamKey } from "../../../shared/shards.js";
import { OwnershipLostError, type Fence, type FenceHolder, type UpdateStreamStore, type WebhookJobStore } from "../store.js";
import type { CassandraStore } from "./cassandra-store.js";
import { cassandraContext } from "./context.js";
import { leaseStore } from "./leases.js";
import { streamWriteTimestamp } from "./stream-head.js";
import { streamPartitionKey, updateLogStore } from "./updates.js";
import { hourOf, slotOf } from "./sweep-index.js";
import { encodePendingHandoff, webhookJobStore } from "./webhook-jobs.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;
const { Tuple } = cassandra.types;

before(cassandraStarts);

describe("cassandra update streams and webhook queue", () => {
  let store: CassandraStore;
  const handles: CassandraStore[] = [];
  beforeEach(async () => {
    store = await openTestCassandraStore(keyspace, { fresh: true });
  });
  afterEach(async () => {
    for (const handle of handles.splice(0)) await handle.close();
    await store.close();
  });

  /** The parts on a handle of their own (a node's), with 4-entry buckets. */
  const parts = async (indexWalkMs = 0): Promise<{ updates: UpdateStreamStore; jobs: WebhookJobStore; handle: CassandraStore }> => {
    const handle = await openTestCassandraStore(keyspace, { fresh: false });
    handles.push(handle);
    const ctx = cassandraContext(handle.cql);
    return { updates: updateLogStore(ctx, { bucketSize: 4 }), jobs: webhookJobStore(ctx, { indexWalkMs }), handle };
  };
  /** A writer that still trusts its lease by its own clock (a pause it did not notice). */
  const unaware = (instance: string): FenceHolder => ({ instance, untrusted: () => undefined });
  const fencedAppend = (updates: UpdateStreamStore, fence: Fence, holder: FenceHolder, entries: [number, number, number][]) =>
    updates.append({
      events: [...new Set(entries.map(([, , eventId]) => eventId))].map(event),
      entries: entries.map(([userId, sn, eventId]) => ({ userId, sn, eventId: BigInt(eventId) })),
      createdAt: 1,
      fences: [fence],
      holder,
    });
  const refused = async (append: Promise<unknown>) => {
    const outcome = await append.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(outcome).to.be.instanceOf(OwnershipLostError);
  };
  const nodeA = { node: "node-a", instance: "a-1" };
  const nodeB = { node: "node-b", instance: "b-1" };
  /** Two nodes' handles, A holding the lease of the user's stream shard; `takeOver` gives it to B before it runs out (A seen gone). */
  const twoOwners = async (userId: number) => {
    const [a, b] = [await parts(), await parts()];
    const shard = shardOf(userStreamKey(userId));
    const leaseA = await leaseStore(cassandraContext(a.handle.cql)).acquire(shard, nodeA, Date.now(), 60_000);
    const fenceA: Fence = { shard, epoch: leaseA.epoch };
    const takeOver = async (): Promise<Fence> => ({ shard, epoch: (await leaseStore(cassandraContext(b.handle.cql)).takeOver(shard, nodeB, leaseA, Date.now(), 60_000)).epoch });
    return { a, b, fenceA, takeOver };
  };
  const event = (eventId: number) => ({ eventId: BigInt(eventId), entry: new Uint8Array([eventId % 256]) });
  const append = (updates: UpdateStreamStore, entries: [number, number, number][]) =>
    updates.append({
      events: [...new Set(entries.map(([, , eventId]) => eventId))].map(event),
      entries: entries.map(([userId, sn, eventId]) => ({ userId, sn, eventId: BigInt(eventId) })),
      createdAt: 1,
    });
  const sns = async (updates: UpdateStreamStore, userId: number, afterSn = 0, limit = 100) => (await updates.readUpdates(userId, afterSn, limit)).map((row) => row.sn);
  const buckets = async (userId: number) => (await store.cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ?", [userId])).map((row) => row.first_sn as number);

  it("appends across bucket boundaries, never splitting one append's entries, and reads and prunes across them", async () => {
    const { updates } = await parts();
    for (let sn = 1; sn <= 5; sn++) expect(await append(updates, [[7, sn, 100 + sn]])).to.deep.equal({ ok: true });
    // Bucket 5 holds one entry: three more fit in one bucket whatever its size.
    expect(await append(updates, [[7, 6, 106], [7, 7, 107], [7, 8, 108], [7, 9, 109], [8, 1, 109]])).to.deep.equal({ ok: true });
    expect(await append(updates, [[7, 10, 110], [7, 11, 111]])).to.deep.equal({ ok: true });
    expect(await buckets(7)).to.deep.equal([10, 5, 1]);
    expect(await updates.latestSn(7)).to.equal(11);
    expect(await sns(updates, 7)).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(await sns(updates, 7, 3, 4)).to.deep.equal([4, 5, 6, 7]);
    expect(await sns(updates, 7, 9, 10)).to.deep.equal([10, 11]);
    expect((await updates.readUpdates(7, 10, 1))[0].entry).to.deep.equal(new Uint8Array([111]));

    await updates.pruneUpdates(7, 6);
    expect(await buckets(7)).to.deep.equal([10, 5]);
    expect(await updates.oldestRetainedSn(7)).to.equal(7);
    expect(await sns(updates, 7)).to.deep.equal([7, 8, 9, 10, 11]);
    expect(await updates.holders(109n, [7, 8])).to.deep.equal([7, 8]);
    await updates.pruneUpdates(7, 10);
    // The bucket before the newest is emptied by a range, not dropped: its head stays readable.
    expect(await buckets(7)).to.deep.equal([10, 5]);
    expect(await updates.holders(110n, [7])).to.deep.equal([]);
    expect(await updates.holders(111n, [7])).to.deep.equal([7]);
    expect(await updates.holders(109n, [7, 8])).to.deep.equal([8]);
    expect(await store.cql.row("SELECT entry FROM update_events WHERE event_id = 101")).to.equal(undefined);
    // Everything pruned: the position stays, so no sn is handed out twice.
    await updates.pruneUpdates(7, 11);
    expect(await updates.oldestRetainedSn(7)).to.equal(undefined);
    expect(await updates.holders(111n, [7])).to.deep.equal([]);
    expect(await updates.latestSn(7)).to.equal(11);
    expect(await append(updates, [[7, 11, 200]])).to.deep.equal({ ok: false, conflicts: [7] });
    expect(await append(updates, [[7, 12, 200]])).to.deep.equal({ ok: true });
    expect(await sns(updates, 7)).to.deep.equal([12]);
  });

  it("writes an append's streams ten partitions to a request, each stream whole, and groups them by the key Cassandra hashes", async () => {
    const { updates, handle } = await parts();
    const users = Array.from({ length: 25 }, (_, index) => 300 + index);
    // Each stream's first append lists its bucket: the second append is the steady state.
    expect(await append(updates, users.map((userId) => [userId, 1, 401]))).to.deep.equal({ ok: true });
    const client = handle.cql.client as unknown as { batch: (...args: unknown[]) => Promise<unknown> };
    const batch = client.batch.bind(client);
    const batched: number[] = [];
    client.batch = (queries: unknown, ...rest: unknown[]) => {
      batched.push((queries as unknown[]).length);
      return batch(queries, ...rest);
    };
    expect(await append(updates, users.flatMap((userId) => [[userId, 2, 402] as [number, number, number], [userId, 3, 403] as [number, number, number]]))).to.deep.equal({ ok: true });
    // Three statements a stream (its head, two entries): 10, 10 and 5 streams.
    expect(batched.sort((a, b) => b - a)).to.deep.equal([30, 30, 15]);
    for (const userId of users) expect(await sns(updates, userId)).to.deep.equal([1, 2, 3]);
    const row = await handle.cql.row("SELECT token(user_id, first_sn) AS hashed FROM stream_entries WHERE user_id = ? AND first_sn = ? LIMIT 1", [300, 1]);
    const hashed = (handle.cql.client.metadata as unknown as { tokenizer: { hash(key: Buffer): { getValue(): unknown } } }).tokenizer.hash(streamPartitionKey(300, 1));
    expect(String(hashed.getValue())).to.equal(String(row!.hashed));
  });

  it("hides what an older owner writes after the new owner claimed the stream, in its bucket, a bucket it opens, or one it listed before pausing", async () => {
    const { a, b, fenceA, takeOver } = await twoOwners(9);
    expect(await fencedAppend(a.updates, fenceA, unaware("a-1"), [[9, 1, 1], [9, 2, 2], [9, 3, 3]])).to.deep.equal({ ok: true });
    // A lists the next bucket and pauses before its entries land (as its rollover at sn 4 would, were bucket 1 full).
    await store.cql.write("INSERT INTO stream_buckets (user_id, first_sn) VALUES (?, ?) USING TIMESTAMP ?", [9, 4, streamWriteTimestamp(fenceA.epoch, 4)]);
    const fenceB = await takeOver();
    expect(await fencedAppend(b.updates, fenceB, unaware("b-1"), [[9, 4, 4]])).to.deep.equal({ ok: true });
    // A wakes: the batch it paused before lands in the bucket it listed; its next appends go to the
    // bucket it knew, then (having read the head again) past the new owner's entries.
    await a.handle.cql.partitionBatch([
      { query: "UPDATE stream_entries USING TIMESTAMP ? SET latest_sn = ? WHERE user_id = ? AND first_sn = ?", params: [streamWriteTimestamp(fenceA.epoch, 5), 5, 9, 4] },
      { query: "INSERT INTO stream_entries (user_id, first_sn, sn, event_id) VALUES (?, ?, ?, ?) USING TIMESTAMP ?", params: [9, 4, 5, 50n, streamWriteTimestamp(fenceA.epoch, 5)] },
    ]);
    await refused(fencedAppend(a.updates, fenceA, unaware("a-1"), [[9, 4, 40]]));
    await refused(fencedAppend(a.updates, fenceA, unaware("a-1"), [[9, 5, 51], [9, 6, 61], [9, 7, 71], [9, 8, 81]]));
    await refused(fencedAppend(a.updates, fenceA, unaware("a-1"), [[9, 9, 91]]));
    expect(await sns(b.updates, 9)).to.deep.equal([1, 2, 3, 4]);
    expect((await b.updates.readUpdates(9, 3, 10)).map((row) => row.entry[0])).to.deep.equal([4]);
    expect(await b.updates.latestSn(9)).to.equal(4);
    for (const eventId of [40, 51, 91]) expect(await b.updates.holders(BigInt(eventId), [9])).to.deep.equal([]);
    // B goes on across the bucket boundary; A's rows there stay hidden.
    expect(await fencedAppend(b.updates, fenceB, unaware("b-1"), [[9, 5, 5]])).to.deep.equal({ ok: true });
    expect(await fencedAppend(b.updates, fenceB, unaware("b-1"), [[9, 6, 6], [9, 7, 7], [9, 8, 8], [9, 9, 9]])).to.deep.equal({ ok: true });
    expect(await fencedAppend(b.updates, fenceB, unaware("b-1"), [[9, 10, 10]])).to.deep.equal({ ok: true });
    expect(await sns(b.updates, 9)).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect((await b.updates.readUpdates(9, 0, 20)).map((row) => row.entry[0])).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const fresh = await parts();
    expect(await fresh.updates.latestSn(9)).to.equal(10);
  });

  it("a take of a live lease revokes its holder's fence first; one of a lease that ran out or was released does not", async () => {
    const { handle } = await parts();
    const leases = leaseStore(cassandraContext(handle.cql));
    const revocations = async (instance: string) => (await store.cql.rows("SELECT shard, epoch FROM lease_revocations WHERE instance = ?", [instance])).map((row) => [row.shard, row.epoch]);
    const live = await leases.acquire(40, nodeA, 1000, 30_000);
    await leases.takeOver(40, nodeB, live, 2000, 30_000);
    expect(await revocations("a-1")).to.deep.equal([[40, live.epoch]]);
    // A new instance of the same node takes its own live lease at once: the old instance is revoked too.
    const restartedB = { node: "node-b", instance: "b-2" };
    const taken = await leases.acquire(40, restartedB, 3000, 30_000);
    expect(await revocations("b-1")).to.deep.equal([[40, taken.epoch - 1]]);
    // Run out, or released: nothing of the holder can still be acknowledged.
    await leases.acquire(41, nodeA, 1000, 30_000);
    await leases.acquire(41, nodeB, 1000 + 30_000, 30_000);
    const released = await leases.acquire(42, { node: "node-c", instance: "c-1" }, 1000, 30_000);
    await leases.release({ node: "node-c", instance: "c-1" }, [{ shard: 42, epoch: released.epoch }]);
    await leases.acquire(42, nodeA, 1001, 30_000);
    expect(await revocations("a-1")).to.deep.equal([[40, live.epoch]]);
    expect(await revocations("c-1")).to.deep.equal([]);
  });

  it("rolls forward a hand-off whose append stored its entries but not its jobs and position", async () => {
    const writer = await parts();
    expect(await append(writer.updates, [[11, 1, 1]])).to.deep.equal({ ok: true });
    // As a process stopped right after the agent's batch leaves it (written just after that batch's own head).
    const handoff = { firstJobId: 1n, bodies: ["m1", "m2"], queuedAt: 40, deliveredSn: 1, generation: 0 };
    await store.cql.write("UPDATE stream_entries USING TIMESTAMP ? SET pending_handoffs = ? WHERE user_id = ? AND first_sn = ?", [
      streamWriteTimestamp(0, 1) + 1n,
      encodePendingHandoff(handoff),
      11,
      1,
    ]);
    const next = await parts();
    expect(await next.jobs.deliveredSn(11)).to.equal(0);
    expect(await append(next.updates, [[11, 2, 2]])).to.deep.equal({ ok: true });
    expect((await next.jobs.pending(11)).map((job) => [job.jobId, job.body])).to.deep.equal([[1, "m1"], [2, "m2"]]);
    expect(await next.jobs.deliveredSn(11)).to.equal(1);
    // The ids it took are not given again, and rolling forward once more changes nothing.
    await next.jobs.enqueue(11, "m3", 50);
    const again = await parts();
    await again.jobs.enqueue(11, "m4", 50);
    expect((await again.jobs.pending(11)).map((job) => [job.jobId, job.body])).to.deep.equal([[1, "m1"], [2, "m2"], [3, "m3"], [4, "m4"]]);
  });

  it("a rolled-forward position loses to a rewind made after its append", async () => {
    const writer = await parts();
    expect(await append(writer.updates, [[12, 1, 1], [12, 2, 2]])).to.deep.equal({ ok: true });
    await writer.jobs.advanceDelivered(12, 2);
    await writer.jobs.rewindDelivered(12, 0);
    await store.cql.write("UPDATE stream_entries USING TIMESTAMP ? SET pending_handoffs = ? WHERE user_id = ? AND first_sn = ?", [
      streamWriteTimestamp(0, 2) + 1n,
      encodePendingHandoff({ firstJobId: 1n, bodies: [], queuedAt: 40, deliveredSn: 2, generation: 0 }),
      12,
      1,
    ]);
    const next = await parts();
    expect(await append(next.updates, [[12, 3, 3]])).to.deep.equal({ ok: true });
    expect(await next.jobs.deliveredSn(12)).to.equal(0);
  });

  it("finds the due heads of queues written through another handle, and forgets emptied ones", async () => {
    const dispatcher = await parts();
    const engine = await parts();
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    await engine.jobs.enqueue(21, "a1", 100);
    await engine.jobs.handOver(22, ["b1", "b2"], 90, 4);
    expect((await dispatcher.jobs.due(100, [], 10)).map((job) => [job.agentUserId, job.body])).to.deep.equal([[22, "b1"], [21, "a1"]]);
    const [head] = await dispatcher.jobs.due(100, [21], 10);
    await dispatcher.jobs.remove(head);
    expect((await dispatcher.jobs.due(100, [21], 10)).map((job) => job.body)).to.deep.equal(["b2"]);
    await engine.jobs.clearAgent(21);
    expect((await dispatcher.jobs.due(100, [], 10)).map((job) => job.body)).to.deep.equal(["b2"]);
    // A reschedule through one handle is seen by the other's next walk.
    await engine.jobs.reschedule({ agentUserId: 22, jobId: head.jobId + 1 }, 1, 500);
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    expect(await dispatcher.jobs.due(500, [], 10)).to.deep.equal([{ jobId: head.jobId + 1, agentUserId: 22, body: "b2", attempts: 1, nextAttemptAt: 500, queuedAt: 90 }]);
    // Rescheduling a job that is gone does not bring it back.
    await dispatcher.jobs.reschedule(head, 2, 600);
    expect((await engine.jobs.pending(22)).map((job) => job.body)).to.deep.equal(["b2"]);
  });

  it("does not bring back a job another handle removed while this one had it as its head (a retry after the queue was dropped)", async () => {
    const dispatcher = await parts();
    const engine = await parts();
    await engine.jobs.enqueue(23, "c1", 100);
    const [head] = await dispatcher.jobs.due(100, [], 10);
    expect(head).to.deep.include({ agentUserId: 23, body: "c1" });
    // The agent left WEBHOOK mode: its engine drops the queue while the delivery is in flight here.
    await engine.jobs.clearAgent(23);
    await dispatcher.jobs.reschedule(head, 1, 200);
    expect(await engine.jobs.pending(23)).to.deep.equal([]);
    expect(await dispatcher.jobs.due(1_000, [], 10)).to.deep.equal([]);
  });

  it("looks at a queue another handle wrote as soon as it is announced, not at the next walk of the index", async () => {
    // Walks the index at its first due() only.
    const dispatcher = await parts(3_600_000);
    const engine = await parts();
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    await engine.jobs.enqueue(31, "first", 100);
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    dispatcher.jobs.announced([31]);
    const [head] = await dispatcher.jobs.due(100, [], 10);
    expect(head).to.deep.include({ agentUserId: 31, body: "first" });
    await dispatcher.jobs.remove(head);
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    // Emptied, the queue is forgotten; the next job is seen once announced again.
    await engine.jobs.enqueue(31, "second", 100);
    expect(await dispatcher.jobs.due(100, [], 10)).to.deep.equal([]);
    dispatcher.jobs.announced([31]);
    expect((await dispatcher.jobs.due(100, [], 10)).map((job) => job.body)).to.deep.equal(["second"]);
  });

  it("moves the index row of a queue that stays busy to the current hour, so walks stay short", async () => {
    const engine = await parts();
    await engine.jobs.enqueue(32, "a1", 100);
    const item = "32";
    const slot = slotOf(item);
    const now = hourOf(Date.now());
    // As if it had been queued two hours ago and never emptied since.
    await store.cql.write("DELETE FROM sweep_index WHERE kind = 'webhooks' AND slot = ? AND hour = ? AND item = ?", [slot, now, item]);
    await store.cql.write("INSERT INTO sweep_index (kind, slot, hour, item) VALUES ('webhooks', ?, ?, ?)", [slot, now - 2, item]);
    await store.cql.write("INSERT INTO sweep_marks (kind, slot, hour) VALUES ('webhooks', ?, ?)", [slot, now - 2]);
    const dispatcher = await parts();
    expect((await dispatcher.jobs.due(100, [], 10)).map((job) => job.body)).to.deep.equal(["a1"]);
    const indexed = async (hour: number) => (await store.cql.row("SELECT item FROM sweep_index WHERE kind = 'webhooks' AND slot = ? AND hour = ? AND item = ?", [slot, hour, item])) !== undefined;
    expect([await indexed(now - 2), await indexed(now)]).to.deep.equal([false, true]);
    expect((await store.cql.row("SELECT hour FROM sweep_marks WHERE kind = 'webhooks' AND slot = ?", [slot]))?.hour).to.be.greaterThan(now - 2);
  });

  it("keeps the holder pair a refused owner shares with the new owner's entry (the same event at the same sn), so the stream never takes the event twice", async () => {
    const { a: first, b: second, fenceA, takeOver } = await twoOwners(31);
    expect(await fencedAppend(first.updates, fenceA, unaware("a-1"), [[31, 1, 801]])).to.deep.equal({ ok: true });
    // Two engines finish fan-out 802 for user 31 across a lease move: the new owner lands it at sn 2,
    // the old one, still believing 1 is the latest, writes sn 2 too and is refused after writing.
    const fenceB = await takeOver();
    expect(await fencedAppend(second.updates, fenceB, unaware("b-1"), [[31, 2, 802]])).to.deep.equal({ ok: true });
    await refused(fencedAppend(first.updates, fenceA, unaware("a-1"), [[31, 2, 802]]));
    expect(await second.updates.holders(802n, [31])).to.deep.equal([31]);
    // The new owner's repeat of it finds the stream holding it already.
    expect(await fencedAppend(second.updates, fenceB, unaware("b-1"), [[31, 3, 802]])).to.deep.equal({ ok: false, conflicts: [31] });
    expect(await sns(second.updates, 31)).to.deep.equal([1, 2]);
  });

  it("counts as holders only the streams that took the entry: a writer that died after naming them in the event did not append", async () => {
    const { updates, handle } = await parts();
    expect(await append(updates, [[21, 1, 700]])).to.deep.equal({ ok: true });
    // As a kill -9 between the event row (which names every recipient) and user 22's batch leaves it.
    await handle.cql.write("UPDATE update_events SET holders = holders + ? WHERE event_id = ?", [new Set([new Tuple(22, 1)]), 700n]);
    expect(await updates.holders(700n, [21, 22])).to.deep.equal([21]);
    expect(await append(updates, [[22, 1, 700]])).to.deep.equal({ ok: true });
    expect((await updates.holders(700n, [21, 22])).sort()).to.deep.equal([21, 22]);
  });
});

