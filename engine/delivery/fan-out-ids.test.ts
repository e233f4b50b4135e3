import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { Errors, parleyErrorParts } from "../../shared/errors.js";
import { AdjustableClock } from "../../shared/clock.js";
import { FanOutIds, type FanOutIdPolicy } from "./fan-out-ids.js";
import { openSqliteStore } from "../../ports/store/sqlite/sqlite-store.js";
import type { Store } from "../../ports/store/store.js";

describe("Fan-out ids", () => {
  let dir: string;
  let store: Store;
  let clock: AdjustableClock;
  const claimed: FanOutIds[] = [];
  // Renewal every 20 ms of real time, so a test sees a renewal without waiting long.
  const policy: FanOutIdPolicy = { leaseMs: 30_000, renewEveryMs: 20, safetyMarginMs: 5_000 };
  const claim = async (node: string, instance = `${node}/1`, on = clock) => {
    const ids = await FanOutIds.claim(store.leases, on, { node, instance }, { policy });
    claimed.push(ids);
    return ids;
  };
  const slotOf = (id: bigint) => Number((id >> 12n) & 1023n);

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-fan-out-ids-"));
    store = await openSqliteStore(dir);
    clock = new AdjustableClock();
  });
  afterEach(async () => {
    await Promise.all(claimed.splice(0).map((ids) => ids.stop()));
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("gives engines sharing a store different slots, so their ids never meet, even drawn in one millisecond", async () => {
    const engines = await Promise.all(["engine-1", "engine-2", "engine-3"].map((node) => claim(node)));
    expect(new Set(engines.map((ids) => ids.slot)).size).to.equal(3);
    const drawn = engines.flatMap((ids) => Array.from({ length: 2000 }, () => ids.next()));
    expect(new Set(drawn).size).to.equal(drawn.length);
    for (const ids of engines) expect(slotOf(ids.next())).to.equal(ids.slot);
  });

  it("probes past a slot another node holds; a restarted node takes its own slot back at once", async () => {
    const probe = await claim("engine-9");
    const favourite = probe.slot!;
    await probe.stop();
    await store.leases.acquire(-1 - favourite, { node: "other", instance: "other/1" }, clock.now(), policy.leaseMs);
    const ids = await claim("engine-9", "engine-9/2");
    expect(ids.slot).to.equal((favourite + 1) % 1024);
    const restarted = await claim("engine-9", "engine-9/3");
    expect(restarted.slot).to.equal(ids.slot);
  });

  it("moves to another slot when its lease was taken after it expired, and its ids stay unique", async () => {
    const ids = await claim("engine-1");
    const slot = ids.slot!;
    const before = Array.from({ length: 100 }, () => ids.next());
    // Another node took the slot once the lease had run out by its clock (this one paused, say).
    const taken = await store.leases.acquire(-1 - slot, { node: "other", instance: "other/1" }, clock.now() + policy.leaseMs + 1, policy.leaseMs);
    expect(taken.instance).to.equal("other/1");
    await waitFor(() => ids.slot !== undefined && ids.slot !== slot);
    const after = Array.from({ length: 100 }, () => ids.next());
    expect(new Set([...before, ...after]).size).to.equal(200);
    expect(after.every((id) => slotOf(id) === ids.slot)).to.equal(true);
  });

  it("increases in the order drawn: past 4096 in one millisecond, and when the clock steps back", async () => {
    const ids = await claim("engine-1");
    const drawn = Array.from({ length: 10_000 }, () => ids.next());
    clock.advance(-60_000);
    drawn.push(...Array.from({ length: 10 }, () => ids.next()));
    // Forward past where it was (within the slot lease: 60 s on would be a pause past it).
    clock.advance(60_010);
    drawn.push(ids.next());
    for (let i = 1; i < drawn.length; i++) expect(drawn[i] > drawn[i - 1], `id ${i}`).to.equal(true);
    expect(drawn.every((id) => slotOf(id) === ids.slot)).to.equal(true);
  });

  it("draws nothing once the slot's lease is no longer trusted (a pause, a store out of reach), then claims again", async () => {
    const ids = await claim("engine-1");
    const before = ids.next();
    // As if the process slept past its lease: the renewal timer has not run yet by this clock.
    clock.advance(policy.leaseMs);
    let refusal: ReturnType<typeof parleyErrorParts> | undefined;
    try {
      ids.next();
    } catch (err) {
      refusal = parleyErrorParts(err);
    }
    expect(refusal?.entry).to.equal(Errors.unavailable);
    expect(refusal?.metadata).to.deep.include({ reason: "FAN_OUT_ID_SLOT_EXPIRED" });
    await waitFor(() => ids.slot !== undefined);
    expect(ids.next() > before).to.equal(true);
  });

  it("is ready again after a clock jump once it renewed its slot, keeping it", async () => {
    const ids = await claim("engine-1");
    const slot = ids.slot;
    clock.advance(3 * 24 * 3600_000);
    expect(ids.slot).to.equal(undefined);
    await ids.ready();
    expect(ids.slot).to.equal(slot);
    expect(slotOf(ids.next())).to.equal(slot);
  });

  it("counts as inherited only what an earlier holder of its start slot drew before it was claimed", async () => {
    const earlier = await claim("engine-1", "engine-1/1");
    const other = await claim("engine-2");
    const left = { id: earlier.next(), recordedAt: clock.now() };
    const elsewhere = { id: other.next(), recordedAt: clock.now() };
    await earlier.stop();
    clock.advance(1);
    const restarted = await claim("engine-1", "engine-1/2");
    expect(restarted.slot).to.equal(slotOf(left.id));
    clock.advance(1);
    const own = { id: restarted.next(), recordedAt: clock.now() };
    expect(restarted.inherited(left.id, left.recordedAt)).to.equal(true);
    expect(restarted.inherited(elsewhere.id, elsewhere.recordedAt)).to.equal(false);
    expect(restarted.inherited(own.id, own.recordedAt)).to.equal(false);
  });

  it("releases its slot on stop, so the next engine takes it at once", async () => {
    const ids = await claim("engine-1");
    const slot = ids.slot!;
    await ids.stop();
    expect(ids.slot).to.equal(undefined);
    const lease = await store.leases.getLease(-1 - slot);
    expect(lease?.instance).to.equal("");
    expect((await store.leases.acquire(-1 - slot, { node: "engine-2", instance: "engine-2/1" }, clock.now(), policy.leaseMs)).instance).to.equal("engine-2/1");
  });
});

async function waitFor(condition: () => boolean): Promise<void> {
  const deadline = performance.now() + 5_000;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error("condition not met within 5 s");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
