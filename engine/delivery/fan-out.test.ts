import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import type { AppendFanOutsParams, FanOutAppend } from "./fan-out-contracts.js";
import { AdjustableClock } from "../../shared/clock.js";
import { FanOutPolicy, FanOuts, accountScope } from "./fan-out.js";
import { FanOutIds } from "./fan-out-ids.js";
import { openSqliteStore } from "../../ports/store/sqlite/sqlite-store.js";
import type { FanOutRecord, Store } from "../../ports/store/store.js";

/** Records the appends a fan-out asks for; `hold` keeps them unanswered until released; `failing` refuses them. */
class Inboxes {
  calls: FanOutAppend[] = [];
  /** The fan-outs of each call, by their notes: which went to the inbox together. */
  batches: string[][] = [];
  private held: (() => void)[] = [];
  hold = false;
  failing = false;

  readonly ctx = {
    call: async (action: string, params: AppendFanOutsParams) => {
      expect(action).to.equal("sync.appendFanOuts");
      if (this.failing) throw new Error("inbox down");
      this.calls.push(...params.fanOuts);
      this.batches.push(params.fanOuts.map((fanOut) => fanOut.fanOutId));
      if (this.hold) await new Promise<void>((resolve) => this.held.push(resolve));
      return { appended: params.fanOuts.map(() => ({ sns: [] })) };
    },
  } as never;

  release(): void {
    for (const resolve of this.held.splice(0)) resolve();
  }
}

describe("FanOuts", () => {
  let dir: string;
  let store: Store;
  let clock: AdjustableClock;
  let ids: FanOutIds;
  let fanOuts: FanOuts;
  let inboxes: Inboxes;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-fan-out-"));
    store = await openSqliteStore(dir);
    clock = new AdjustableClock();
    ids = await FanOutIds.claim(store.leases, clock, { node: "fan-out-test", instance: "fan-out-test/1" });
    fanOuts = new FanOuts(store, clock, ids);
    inboxes = new Inboxes();
  });
  afterEach(async () => {
    await ids.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Records fan-outs as a change does: with a write of its own (here a mute flag). */
  const recordWithAChange = (fanOuts: FanOutRecord[]) => store.conversations.setMuted(1, 1n, true, () => fanOuts);
  const update = (nickname: string) => ({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: 1, newNickname: nickname } }) as const;

  it("gives fan-outs ids that increase in the order they are made, also when the clock steps back", () => {
    const made = [fanOuts.prepare("1", [1], update("a")), fanOuts.prepare("1", [1], update("b"))];
    clock.advance(-60_000);
    made.push(fanOuts.prepare("1", [1], update("c")));
    // Forward past where it was (within the slot lease: 60 s on would be a pause past it).
    clock.advance(60_010);
    made.push(fanOuts.prepare("1", [1], update("d")));
    const ids = made.map((fanOut) => fanOut.record.fanOutId);
    expect([...ids].sort((a, b) => (a < b ? -1 : 1))).to.deep.equal(ids);
    expect(new Set(ids).size).to.equal(4);
  });

  it("delivers a batch's events once the change recorded them, each to its recipients once, unchecked", async () => {
    const events = await fanOuts.batch();
    const records = [events.add(accountScope(1), [1, 2, 2], update("a")), events.add(accountScope(1), [3], update("b"))];
    await recordWithAChange(records);
    await events.deliver(inboxes.ctx);
    expect(inboxes.calls.map((call) => [call.recipients, call.fanOutId, call.again])).to.deep.equal([
      [[1, 2], String(records[0].fanOutId), false],
      [[3], String(records[1].fanOutId), false],
    ]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("delivers a new fan-out in one call for all its recipients, unchecked, then forgets it", async () => {
    const fanOut = fanOuts.prepare(accountScope(1), [1, 2, 2], update("a"));
    await recordWithAChange([fanOut.record]);
    await fanOuts.deliver(inboxes.ctx, fanOut);
    expect(inboxes.calls.map((call) => [call.recipients, call.again])).to.deep.equal([[[1, 2], false]]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("delivers recorded fan-outs again in their order, asking each stream to check, and not one this process is still delivering", async () => {
    const [first, second] = [fanOuts.prepare("5", [1], update("first")), fanOuts.prepare("5", [1], update("second"))];
    await recordWithAChange([first.record, second.record]);
    inboxes.hold = true;
    const delivering = fanOuts.deliver(inboxes.ctx, first);
    inboxes.hold = false;
    expect(await fanOuts.finishRecorded(inboxes.ctx)).to.equal(1);
    expect(inboxes.calls.map((call) => [call.fanOutId, call.again])).to.deep.equal([
      [String(first.record.fanOutId), false],
      [String(second.record.fanOutId), true],
    ]);
    inboxes.release();
    await delivering;
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("finishes at start what the earlier holder of its id slot left, not what another engine's slot recorded", async () => {
    // The earlier instance of this node records a fan-out and stops before delivering it.
    const left = fanOuts.prepare(accountScope(1), [1], update("left"));
    const other = await FanOutIds.claim(store.leases, clock, { node: "another-engine", instance: "another-engine/1" });
    const elsewhere = new FanOuts(store, clock, other).prepare(accountScope(2), [2], update("elsewhere"));
    await recordWithAChange([left.record, elsewhere.record]);
    await ids.stop();
    clock.advance(1);
    ids = await FanOutIds.claim(store.leases, clock, { node: "fan-out-test", instance: "fan-out-test/2" });
    await new FanOuts(store, clock, ids).finishInherited(inboxes.ctx);
    expect(inboxes.calls.map((call) => [call.fanOutId, call.again])).to.deep.equal([[String(left.record.fanOutId), true]]);
    expect((await store.outbox.pending(10)).map((record) => record.fanOutId)).to.deep.equal([elsewhere.record.fanOutId]);
    await other.stop();
  });

  it("keeps a fan-out whose append failed, and settles its scope before the next event of the scope", async () => {
    const prepared = fanOuts.prepare("9", [1], update("lost"));
    const id = prepared.record.fanOutId;
    await recordWithAChange([prepared.record]);
    let failed = false;
    inboxes.failing = true;
    await fanOuts.deliver(inboxes.ctx, prepared).catch(() => (failed = true));
    inboxes.failing = false;
    expect(failed).to.equal(true);
    expect((await store.outbox.pending(10)).map((record) => record.fanOutId)).to.deep.equal([id]);
    await fanOuts.settle(inboxes.ctx, "8");
    expect(inboxes.calls).to.deep.equal([]);
    await fanOuts.settle(inboxes.ctx, "9");
    expect(inboxes.calls.map((call) => [call.fanOutId, call.again])).to.deep.equal([[String(id), true]]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("delivers a scope's fan-outs one after another: the next waits until the previous one reached its streams", async () => {
    const [first, second] = [fanOuts.prepare("6", [1], update("first")), fanOuts.prepare("6", [2], update("second"))];
    const other = fanOuts.prepare("7", [3], update("other scope"));
    await recordWithAChange([first.record, second.record, other.record]);
    inboxes.hold = true;
    const deliveries = [fanOuts.deliver(inboxes.ctx, first)];
    await new Promise((resolve) => setImmediate(resolve));
    deliveries.push(fanOuts.deliver(inboxes.ctx, second), fanOuts.deliver(inboxes.ctx, other));
    await new Promise((resolve) => setImmediate(resolve));
    // The other scope does not wait; the second event of scope 6 does.
    expect(inboxes.calls.map((call) => call.recipients)).to.deep.equal([[1], [3]]);
    inboxes.hold = false;
    inboxes.release();
    await Promise.all(deliveries);
    expect(inboxes.calls.map((call) => call.recipients)).to.deep.equal([[1], [3], [2]]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("delivers a scope's fan-outs that queued behind the delivery under way in one call, in order; one its deliverer pushes goes alone", async () => {
    const made = ["under way", "a", "b", "streamStart", "c", "d"].map((nickname) => fanOuts.prepare("11", [1, 2], update(nickname)));
    await recordWithAChange(made.map((fanOut) => fanOut.record));
    const pushVia = { send: async () => {} } as never;
    inboxes.hold = true;
    const deliveries = [fanOuts.deliver(inboxes.ctx, made[0])];
    await new Promise((resolve) => setImmediate(resolve));
    deliveries.push(...made.slice(1).map((fanOut, index) => fanOuts.deliver(inboxes.ctx, fanOut, index === 2 ? pushVia : undefined)));
    for (let released = 0; released < 4; released++) {
      await new Promise((resolve) => setImmediate(resolve));
      inboxes.release();
    }
    await Promise.all(deliveries);
    const idsOf = (...indexes: number[]) => indexes.map((index) => String(made[index].record.fanOutId));
    expect(inboxes.batches).to.deep.equal([idsOf(0), idsOf(1, 2), idsOf(3), idsOf(4, 5)]);
    expect(inboxes.calls.map((call) => call.pushedByDeliverer ?? false)).to.deep.equal([false, false, false, true, false, false]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("starts a large scope's delivery at the end of the turn, taking the fan-outs recorded meanwhile; a small scope's at once", async () => {
    const many = Array.from({ length: FanOutPolicy.turnWaitFromRecipients }, (_, index) => index + 1);
    const large = ["a", "b", "c"].map((nickname) => fanOuts.prepare("14", many, update(nickname)));
    const small = ["a", "b"].map((nickname) => fanOuts.prepare("15", [1, 2], update(nickname)));
    await recordWithAChange([...large, ...small].map((fanOut) => fanOut.record));
    /** Later in the same turn: what a send answered meanwhile would run in. */
    const laterThisTurn = async () => {
      for (let hop = 0; hop < 50; hop++) await Promise.resolve();
    };
    const idsOf = (made: typeof large, ...indexes: number[]) => indexes.map((index) => String(made[index].record.fanOutId));
    const deliveries = [fanOuts.deliver(inboxes.ctx, large[0]), fanOuts.deliver(inboxes.ctx, small[0])];
    await laterThisTurn();
    expect(inboxes.batches).to.deep.equal([idsOf(small, 0)]);
    deliveries.push(fanOuts.deliver(inboxes.ctx, large[1]), fanOuts.deliver(inboxes.ctx, small[1]));
    await laterThisTurn();
    deliveries.push(fanOuts.deliver(inboxes.ctx, large[2]));
    await Promise.all(deliveries);
    expect(inboxes.batches).to.deep.equal([idsOf(small, 0), idsOf(small, 1), idsOf(large, 0, 1, 2)]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("starts another delivery of the scope once the queued one holds as many stream entries as one may", async () => {
    const recipients = Array.from({ length: FanOutPolicy.entriesPerDelivery / 2 }, (_, index) => index + 1);
    const made = ["under way", "a", "b", "c"].map((nickname) => fanOuts.prepare("12", recipients, update(nickname)));
    await recordWithAChange(made.map((fanOut) => fanOut.record));
    inboxes.hold = true;
    const deliveries = [fanOuts.deliver(inboxes.ctx, made[0])];
    // A scope this large starts each delivery at the turn's end (turnWaitFromRecipients).
    const untilCalls = async (calls: number) => {
      while (inboxes.batches.length < calls) await new Promise((resolve) => setImmediate(resolve));
    };
    await untilCalls(1);
    deliveries.push(...made.slice(1).map((fanOut) => fanOuts.deliver(inboxes.ctx, fanOut)));
    for (const calls of [1, 2, 3]) {
      await untilCalls(calls);
      inboxes.release();
    }
    await Promise.all(deliveries);
    expect(inboxes.batches.map((batch) => batch.length)).to.deep.equal([1, 2, 1]);
  });

  it("a failed delivery of queued fan-outs fails each of them and leaves them all recorded, in order", async () => {
    const made = ["under way", "a", "b"].map((nickname) => fanOuts.prepare("13", [1], update(nickname)));
    await recordWithAChange(made.map((fanOut) => fanOut.record));
    inboxes.hold = true;
    const deliveries = [fanOuts.deliver(inboxes.ctx, made[0])];
    await new Promise((resolve) => setImmediate(resolve));
    deliveries.push(...made.slice(1).map((fanOut) => fanOuts.deliver(inboxes.ctx, fanOut)));
    inboxes.hold = false;
    inboxes.failing = true;
    inboxes.release();
    const outcomes = await Promise.all(deliveries.map((delivery) => delivery.then(() => "ok", () => "failed")));
    expect(outcomes).to.deep.equal(["ok", "failed", "failed"]);
    expect((await store.outbox.pending(10)).map((record) => record.fanOutId)).to.deep.equal([made[1].record.fanOutId, made[2].record.fanOutId]);
  });

  it("after a failed delivery, the scope's next one first finishes it, then itself; each once", async () => {
    const [lost, next] = [fanOuts.prepare("8", [1, 2], update("lost")), fanOuts.prepare("8", [1, 2], update("next"))];
    await recordWithAChange([lost.record, next.record]);
    inboxes.failing = true;
    const failed = await fanOuts.deliver(inboxes.ctx, lost).then(
      () => false,
      () => true,
    );
    expect(failed).to.equal(true);
    inboxes.failing = false;
    await fanOuts.deliver(inboxes.ctx, next);
    expect(inboxes.calls.map((call) => [call.fanOutId, call.again])).to.deep.equal([
      [String(lost.record.fanOutId), true],
      [String(next.record.fanOutId), false],
    ]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });

  it("a delivery that cannot finish the scope's failed fan-out fails too, leaving both recorded for later, in order", async () => {
    const [lost, next] = [fanOuts.prepare("10", [1], update("lost")), fanOuts.prepare("10", [1], update("next"))];
    await recordWithAChange([lost.record, next.record]);
    inboxes.failing = true;
    const outcomes = await Promise.all([fanOuts.deliver(inboxes.ctx, lost), fanOuts.deliver(inboxes.ctx, next)].map((delivery) => delivery.then(() => "ok", () => "failed")));
    expect(outcomes).to.deep.equal(["failed", "failed"]);
    expect((await store.outbox.pending(10)).map((record) => record.fanOutId)).to.deep.equal([lost.record.fanOutId, next.record.fanOutId]);
    inboxes.failing = false;
    await fanOuts.settle(inboxes.ctx, "10");
    expect(inboxes.calls.map((call) => call.fanOutId)).to.deep.equal([String(lost.record.fanOutId), String(next.record.fanOutId)]);
    expect(await store.outbox.pending(10)).to.deep.equal([]);
  });
});
