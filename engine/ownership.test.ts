import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { Errors, parleyErrorParts } from "../shared/errors.js";
import { AdjustableClock } from "../shared/clock.js";
import { loadConfig } from "../shared/config.js";
import { Ownership, OwnershipPolicy, leaseTimings, type Placement } from "./ownership.js";
import { conversationKey, shardOf, userStreamKey } from "../shared/shards.js";
import { openSqliteStore } from "../ports/store/sqlite/sqlite-store.js";
import type { Store } from "../ports/store/store.js";

describe("Ownership", () => {
  let dir: string;
  let store: Store;
  let clock: AdjustableClock;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-ownership-"));
    store = await openSqliteStore(dir);
    clock = new AdjustableClock();
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const refusal = async (promise: Promise<unknown>) => {
    let caught: unknown;
    await promise.catch((err: unknown) => (caught = err));
    return parleyErrorParts(caught);
  };

  it("hashes keys into fixed shards, the same in every process", () => {
    expect(shardOf("c:42")).to.equal(shardOf("c:42"));
    // FNV-1a of the key: pinned, since a key's shard must never change between versions.
    expect(shardOf("a", 2 ** 31)).to.equal(0xe40c292c % 2 ** 31);
    expect(shardOf("c:1")).to.equal(0xc1f77cab % OwnershipPolicy.shards);
    const shards = new Set(Array.from({ length: 5000 }, (_, i) => shardOf(i % 2 ? conversationKey(BigInt(i)) : userStreamKey(i))));
    expect(Math.min(...shards)).to.be.at.least(0);
    expect(Math.max(...shards)).to.be.below(OwnershipPolicy.shards);
    expect(shards.size).to.be.above(900);
  });

  it("takes a shard once and hands the same fence out while trusted; another node gets UNAVAILABLE", async () => {
    const a = new Ownership(store.leases, clock, "a");
    const b = new Ownership(store.leases, clock, "b");
    const [first, second] = await Promise.all([a.fence("c:1"), a.fence("c:1")]);
    expect(second).to.equal(first);
    expect(first.epoch).to.equal(1);
    const refused = await refusal(b.fence("c:1"));
    expect(refused?.entry).to.equal(Errors.unavailable);
    expect(refused?.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE" });
    // Past its trust, the holder renews its own lease with the same epoch (nobody held it since).
    clock.advance(OwnershipPolicy.leaseMs * 10);
    expect(await a.fence("c:1")).to.deep.equal(first);
  });

  it("SHARD_LEASE_MS sets the lease (30 s by default, 3000..600000): a node's lease runs out after it, and another node takes the shard with the next epoch", async () => {
    expect(loadConfig({}).shardLeaseMs).to.equal(OwnershipPolicy.leaseMs);
    expect(leaseTimings(OwnershipPolicy.leaseMs)).to.deep.equal({ leaseMs: OwnershipPolicy.leaseMs, renewEveryMs: OwnershipPolicy.renewEveryMs, safetyMarginMs: OwnershipPolicy.safetyMarginMs });
    for (const raw of ["2999", "600001", "1.5", "8s"]) expect(() => loadConfig({ SHARD_LEASE_MS: raw }), raw).to.throw(/SHARD_LEASE_MS must be 3000\.\.600000/);
    const policy = { ...OwnershipPolicy, ...leaseTimings(loadConfig({ SHARD_LEASE_MS: "8000" }).shardLeaseMs) };
    // A clock that stands still, so 1 ms before the lease's end is exact: with real time running on
    // between the two fences (AdjustableClock), a loaded machine let b find the lease expired.
    let now = Date.now();
    const still = { now: () => now };
    const a = new Ownership(store.leases, still, "a", policy);
    const b = new Ownership(store.leases, still, "b", policy);
    const first = await a.fence("c:1");
    now += 7_999;
    expect((await refusal(b.fence("c:1")))?.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE" });
    now += 2;
    expect((await b.fence("c:1")).epoch).to.equal(first.epoch + 1);
  });

  it("a lease lost to another node (renewal, a refused write) is forgotten and its listeners told", async () => {
    const a = new Ownership(store.leases, clock, "a");
    const lost: number[] = [];
    a.onLost((shard) => lost.push(shard));
    const fence = await a.fence("c:1");
    const ahead = new AdjustableClock();
    ahead.advance(2 * OwnershipPolicy.leaseMs);
    const b = new Ownership(store.leases, ahead, "b");
    expect((await b.fence("c:1")).epoch).to.equal(fence.epoch + 1);
    await a.renew();
    expect(lost).to.deep.equal([fence.shard]);
    expect(a.holds(fence)).to.equal(false);
    a.lost(fence);
    expect(lost).to.have.length(1);
  });

  it("stopping releases the leases: another node takes them at once with the next epoch; a restarted node takes its own back", async () => {
    const a = new Ownership(store.leases, clock, "a");
    const fence = await a.fence("u:7");
    await a.stop();
    const b = new Ownership(store.leases, clock, "b");
    const taken = await b.fence("u:7");
    expect(taken.epoch).to.equal(fence.epoch + 1);
    const restartedB = new Ownership(store.leases, clock, "b");
    expect((await restartedB.fence("u:7")).epoch).to.equal(taken.epoch + 1);
  });
  describe("placed over a cluster", () => {
    /** A placement where `mine` says which shards the node should own and `gone` lists departed nodes. */
    const placement = (mine: (shard: number) => boolean, gone: string[] = []): Placement => ({ isMine: mine, isGone: (holder) => gone.includes(holder.node) });
    const key = conversationKey(7n);
    const shard = shardOf(key);

    it("rebalancing gives up the shards placed elsewhere, telling listeners, so their new owner takes them at once with the next epoch", async () => {
      const a = new Ownership(store.leases, clock, "a");
      const b = new Ownership(store.leases, clock, "b");
      const before = await a.fence(key);
      const lost: number[] = [];
      a.onLost((s) => lost.push(s));
      await a.place(placement((s) => s !== shard));
      expect(lost).to.deep.equal([shard]);
      expect(a.holds(before)).to.equal(false);
      expect(await b.fence(key)).to.deep.equal({ shard, epoch: before.epoch + 1 });
    });

    it("a shard placed here whose live holder has not let go yet is waited for; never taken from it", async () => {
      const a = new Ownership(store.leases, clock, "a");
      const b = new Ownership(store.leases, clock, "b");
      await b.place(placement(() => true));
      const held = await a.fence(key);
      expect(b.whyNotServing()).to.equal(undefined);
      const refused = await refusal(b.fence(key));
      expect(refused?.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE" });
      expect(a.holds(held)).to.equal(true);
      // Its /healthz says so until it holds the shard.
      expect(b.whyNotServing()).to.equal("1 shards placed here are held by another node");
      // a lets go while b waits: b takes it with the next epoch.
      const waiting = b.fence(key);
      await new Promise((resolve) => setTimeout(resolve, 100));
      await a.place(placement(() => false));
      expect(await waiting).to.deep.equal({ shard, epoch: held.epoch + 1 });
      expect(b.whyNotServing()).to.equal(undefined);
    });

    it("a refused shard no longer counts against health once it is placed elsewhere", async () => {
      const a = new Ownership(store.leases, clock, "a");
      const b = new Ownership(store.leases, clock, "b");
      await b.place(placement(() => true));
      await a.fence(key);
      await refusal(b.fence(key));
      expect(b.whyNotServing()).to.not.equal(undefined);
      await b.place(placement((s) => s !== shard));
      expect(b.whyNotServing()).to.equal(undefined);
    });

    it("a shard placed here is taken from a holder known to be gone at once, with the next epoch: its writes are refused from then on", async () => {
      const a = new Ownership(store.leases, clock, "a");
      const b = new Ownership(store.leases, clock, "b");
      const held = await a.fence(key);
      await b.place(placement(() => true, ["a"]));
      const taken = await b.fence(key);
      expect(taken).to.deep.equal({ shard, epoch: held.epoch + 1 });
      // a still believes it holds the shard; its renewal finds out otherwise.
      await a.renew();
      expect(a.holds(held)).to.equal(false);
    });

    it("a background task's lead that the store fails to answer is the task's failure, not \"another node leads\"", async () => {
      const failing = { ...store.leases, acquire: () => Promise.reject(new Error("store timed out")) };
      const a = new Ownership(failing, clock, "a");
      await a.place(placement(() => true));
      let caught: unknown;
      await a.leads("sweep").catch((err: unknown) => (caught = err));
      expect(String(caught)).to.include("store timed out");
    });

    it("a background task leads on the one node its key is placed on, which holds the key's lease", async () => {
      const a = new Ownership(store.leases, clock, "a");
      const b = new Ownership(store.leases, clock, "b");
      const taskShard = shardOf("task:sweep");
      await a.place(placement((s) => s === taskShard));
      await b.place(placement((s) => s !== taskShard));
      expect(await a.leads("sweep")).to.equal(true);
      expect(await b.leads("sweep")).to.equal(false);
      // Placed on b while a still holds it: b does not lead until a lets go.
      await b.place(placement(() => true));
      expect(await b.leads("sweep")).to.equal(false);
      await a.place(placement(() => false));
      expect(await b.leads("sweep")).to.equal(true);
    });
  });
});
