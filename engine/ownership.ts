// Ownership of keys: which node may write a conversation (its message ids, its open streams) or a
// user's update stream (its sn sequence). Moleculer's Shard routing sends a key's calls to one
// node, but routing alone never guarantees one writer: about half the keys move when a node joins
// or leaves, a dead node's keys move only after its heartbeat times out, and a paused process
// wakes up believing what it believed before. So ownership is a lease, and the store checks it.
//
// Keys hash into a fixed number of shards; a node holds a time-limited lease per shard it serves
// (LeaseStore), renewed in the background. Each change of hands gives the shard the next epoch.
// Every write of an owned key carries the fence {shard, epoch} the node was given, and the store
// refuses it, in the write's own transaction, when the shard's epoch moved on (OwnershipLostError).
// The node then forgets the shard (listeners drop what they hold of its keys: cached checks,
// sequence positions, live streams) and the caller gets a retryable UNAVAILABLE; the next call
// reaches whichever node holds the lease, which rebuilds what it needs from the store.
//
// A node trusts its lease until a safety margin before it expires by its own clock; a node whose
// clock runs late or that paused may still write after that, and the fence is what stops it. A
// node that restarts (same node name, new instance) takes its leases back at once, with a new
// epoch; stopping releases them, so another node takes them at once.
//
// In a cluster, a Placement says which shards this node should own (shard-owners.ts) and which
// nodes are gone. A node gives up the leases of shards placed elsewhere (rebalance, on every
// membership change and renewal), waits briefly for a live holder to do the same, and takes a
// shard from a holder the cluster saw leave at once, with a new epoch, instead of waiting for its
// lease to run out: should the holder be alive after all (a partition, a pause), the fence refuses
// its writes.
import { randomBytes } from "node:crypto";
import { Errors, ParleyError, parleyErrorParts } from "../shared/errors.js";
import type { Clock } from "../shared/clock.js";
import { shardCount, shardOf } from "../shared/shards.js";
import type { Fence, FenceHolder, LeaseHolder, LeaseStore } from "../ports/store/store.js";

export const OwnershipPolicy = {
  /** The deployment's shard count (shared/shards.ts). */
  shards: shardCount,
  /** How long a lease lasts unless renewed: how long keys of a dead node wait for a new owner. */
  leaseMs: 30_000,
  /** Renewal period: two renewals may fail before the lease is in doubt. */
  renewEveryMs: 10_000,
  /** A lease is trusted only until this long before it expires (clock drift, a slow renewal). */
  safetyMarginMs: 5_000,
} as const;

/** How long leases last and when they are renewed and stop being trusted. */
export interface LeaseTimings {
  leaseMs: number;
  renewEveryMs: number;
  safetyMarginMs: number;
}

/**
 * The timings of a lease of `leaseMs` (SHARD_LEASE_MS) in OwnershipPolicy's proportions: renewed
 * three times per lease, trusted until a sixth of it is left.
 */
export function leaseTimings(leaseMs: number): LeaseTimings {
  return { leaseMs, renewEveryMs: Math.round(leaseMs / 3), safetyMarginMs: Math.round(leaseMs / 6) };
}

/** Where shards belong, as this node sees the cluster; embedded, every shard is its own. */
export interface Placement {
  /** Whether this node should own the shard. */
  isMine(shard: number): boolean;
  /**
   * Whether the lease's holder is known to have left the cluster: its node left, or its node runs
   * again as a newer process (the holder's instance died with the old one). Its leases may then be
   * taken over at once.
   */
  isGone(holder: LeaseHolder): boolean;
}

/** A holder for this process of the node: the node's name outlives processes, the instance does not. */
export function newLeaseHolder(node: string): LeaseHolder {
  return { node, instance: `${node}/${randomBytes(6).toString("base64url")}` };
}

const everythingMine: Placement = { isMine: () => true, isGone: () => false };

/** How long a node waits for a live holder to release a shard placed here, polling. */
const handOverWaitMs = 3_000;
/** How long a shard placed here that this node was refused counts against its health (unless taken since). */
const refusalCountsMs = 10_000;
const handOverPollMs = 50;

interface HeldLease {
  fence: Fence;
  /** This node's clock time until which it writes under the lease without renewing it first. */
  trustedUntil: number;
}

export class Ownership {
  readonly holder: LeaseHolder;
  private readonly held = new Map<number, HeldLease>();
  private readonly acquiring = new Map<number, Promise<Fence>>();
  private readonly lostListeners: ((shard: number) => void)[] = [];
  private renewal: NodeJS.Timeout | undefined;
  private placement: Placement = everythingMine;
  /** Shards placed here that another holder kept from this node, and when (performance.now()). */
  private readonly refusedHere = new Map<number, number>();
  private renewalFailed = false;

  constructor(
    private readonly leases: LeaseStore,
    private readonly clock: Clock,
    /** The node's name, or the holder this process announces to its peers (newLeaseHolder). */
    holder: string | LeaseHolder,
    private readonly policy: LeaseTimings & { shards: number } = OwnershipPolicy,
  ) {
    this.holder = typeof holder === "string" ? newLeaseHolder(holder) : holder;
    // One object for the life of the process: every append carries it.
    this.fenceHolder = {
      instance: this.holder.instance,
      untrusted: (fences) =>
        fences.find((fence) => {
          const held = this.held.get(fence.shard);
          return held?.fence.epoch !== fence.epoch || this.clock.now() >= held.trustedUntil;
        }),
    };
  }

  shardOf(key: string): number {
    return shardOf(key, this.policy.shards);
  }

  /**
   * The fence to write the key with: the lease this node holds on its shard, taken (or renewed)
   * first when it is not trusted any more. UNAVAILABLE when another node holds it.
   */
  fence(key: string): Promise<Fence> {
    const shard = this.shardOf(key);
    const held = this.held.get(shard);
    if (held && this.clock.now() < held.trustedUntil) return Promise.resolve(held.fence);
    let pending = this.acquiring.get(shard);
    if (!pending) {
      pending = this.take(shard).finally(() => this.acquiring.delete(shard));
      this.acquiring.set(shard, pending);
    }
    return pending;
  }

  /** Whether the fence is the one this node holds now (it may still be refused by the store: see Fence). */
  holds(fence: Fence): boolean {
    return this.held.get(fence.shard)?.fence.epoch === fence.epoch;
  }

  /**
   * This process as the writer of fenced appends that confirm after writing (FenceHolder): a fence
   * counts while this node holds it and trusts it by its clock. A release forgets the shard before
   * the store hears of it, so an append confirmed after that is refused, not acknowledged.
   */
  readonly fenceHolder: FenceHolder;

  /**
   * Whether this node runs the cluster-wide background task now (a sweep): the task is a key like
   * any other, placed on one node, which holds its shard's lease while it runs it; another node
   * holding the lease means not here. A store that fails throws (the task failed).
   */
  async leads(task: string): Promise<boolean> {
    const shard = this.shardOf(`task:${task}`);
    if (!this.placement.isMine(shard)) return false;
    const held = this.held.get(shard);
    if (held && this.clock.now() < held.trustedUntil) return true;
    try {
      // Not waited for: a task another node holds now is that node's to run, and a start that
      // waited here for a hand-over served seconds later (the first upload sweep is awaited).
      await (this.acquiring.get(shard) ?? this.take(shard, { waitForHandOver: false }));
      return true;
    } catch (err) {
      // Another holder is an answer; a store that failed is the task's failure, which its caller
      // logs and counts (it was swallowed here, uncounted).
      if (parleyErrorParts(err)?.metadata.reason === "OWNERSHIP_ELSEWHERE") return false;
      throw err;
    }
  }

  /** Sets how shards are placed over the cluster, and gives up what is now placed elsewhere. */
  place(placement: Placement): Promise<void> {
    this.placement = placement;
    return this.rebalance();
  }

  /** Releases the leases of the shards placed on other nodes, so their new owners take them at once. */
  async rebalance(): Promise<void> {
    const moving = [...this.held.values()].filter((held) => !this.placement.isMine(held.fence.shard)).map((held) => held.fence);
    if (moving.length === 0) return;
    for (const fence of moving) this.forget(fence.shard);
    await this.leases.release(this.holder, moving);
  }

  private async take(shard: number, { waitForHandOver = true } = {}): Promise<Fence> {
    // The lease's time counts from before the call that granted it.
    let askedAt = this.clock.now();
    let lease = await this.leases.acquire(shard, this.holder, askedAt, this.policy.leaseMs);
    const waitUntil = performance.now() + handOverWaitMs;
    // Embedded (never placed), nobody else is leaving the shard: no point waiting.
    while (this.placement !== everythingMine && lease.instance !== this.holder.instance && lease.instance !== "" && this.placement.isMine(shard)) {
      // The shard is placed here: its holder is leaving it (rebalance) or gone.
      if (this.placement.isGone(lease)) {
        askedAt = this.clock.now();
        lease = await this.leases.takeOver(shard, this.holder, lease, askedAt, this.policy.leaseMs);
        continue;
      }
      if (!waitForHandOver || performance.now() >= waitUntil) break;
      await new Promise((resolve) => setTimeout(resolve, handOverPollMs));
      askedAt = this.clock.now();
      lease = await this.leases.acquire(shard, this.holder, askedAt, this.policy.leaseMs);
    }
    const now = askedAt;
    const before = this.held.get(shard);
    if (lease.instance !== this.holder.instance) {
      if (before) this.forget(shard);
      if (waitForHandOver && this.placement.isMine(shard)) this.refusedHere.set(shard, performance.now());
      throw new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_ELSEWHERE", shard: String(shard) }, "another node owns this now; try again");
    }
    if (before && before.fence.epoch !== lease.epoch) this.forget(shard);
    this.refusedHere.delete(shard);
    const current = this.held.get(shard);
    const fence = current?.fence.epoch === lease.epoch ? current.fence : { shard, epoch: lease.epoch };
    this.held.set(shard, { fence, trustedUntil: now + this.policy.leaseMs - this.policy.safetyMarginMs });
    return fence;
  }

  /** Calls `listener` with every shard this node stops owning, before anything else is written under it. */
  onLost(listener: (shard: number) => void): void {
    this.lostListeners.push(listener);
  }

  /** A write under the fence was refused (OwnershipLostError): the shard moved on. */
  lost(fence: Fence): void {
    if (this.holds(fence)) this.forget(fence.shard);
  }

  private forget(shard: number): void {
    this.held.delete(shard);
    for (const listener of this.lostListeners) listener(shard);
  }

  /** Extends every lease held, in one write; those the store no longer grants are forgotten. */
  async renew(): Promise<void> {
    const fences = [...this.held.values()].map((held) => held.fence);
    if (fences.length === 0) return;
    const now = this.clock.now();
    const renewed = new Set(await this.leases.renew(this.holder, fences, now, this.policy.leaseMs));
    for (const fence of fences) {
      const held = this.held.get(fence.shard);
      if (held?.fence !== fence) continue;
      if (renewed.has(fence.shard)) held.trustedUntil = now + this.policy.leaseMs - this.policy.safetyMarginMs;
      else this.forget(fence.shard);
    }
  }

  /** Starts renewing (and giving up what is placed elsewhere) in the background. */
  start(onError: (err: unknown) => void): void {
    this.renewal = setInterval(
      () =>
        this.rebalance()
          .then(() => this.renew())
          .then(
            () => (this.renewalFailed = false),
            (err: unknown) => {
              this.renewalFailed = true;
              onError(err);
            },
          ),
      this.policy.renewEveryMs,
    );
    this.renewal.unref();
  }

  /**
   * Why this node cannot serve the keys placed on it now, or undefined when it can (its /healthz):
   * another holder kept a shard placed here from it lately and it has not taken it since, or its
   * last renewal failed (the store is out of reach).
   */
  whyNotServing(): string | undefined {
    const since = performance.now() - refusalCountsMs;
    let kept = 0;
    for (const [shard, at] of this.refusedHere) {
      if (at < since || !this.placement.isMine(shard)) this.refusedHere.delete(shard);
      else kept += 1;
    }
    if (kept > 0) return `${kept} shards placed here are held by another node`;
    if (this.renewalFailed) return "its leases could not be renewed";
    return undefined;
  }

  /**
   * Stops renewing and releases every lease, so other nodes take the keys at once. Called once the
   * services stopped: nothing is served any more, so listeners are not told.
   */
  async stop(): Promise<void> {
    clearInterval(this.renewal);
    const fences = [...this.held.values()].map((held) => held.fence);
    this.held.clear();
    if (fences.length > 0) await this.leases.release(this.holder, fences);
  }
}
