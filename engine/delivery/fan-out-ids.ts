// Fan-out ids name an event in every stream that holds it (the inbox skips a stream that already
// holds the id, and the entry is stored once under it), so two events must never share one, on
// any engine of a cluster. An id is milliseconds since 2026 (41 bits, enough for 69 years), a
// slot (10 bits), and a count within the millisecond (12 bits). The slot is what keeps engines
// apart: each engine holds one of 1024 slots as a time-limited lease in the store (LeaseStore,
// under lease numbers of their own, below the ownership shards'), renewed in the background, and
// draws ids only while it trusts the lease, as ownership does (ownership.ts): a process that
// paused past its lease, or whose store was out of reach that long (or whose clock jumped), draws
// nothing until it renewed the slot or claimed another, since another engine may hold it by then.
// Ids are drawn synchronously inside a change's write, so a change first awaits ready().
// Within a slot the ids increase in the order they are made, also when the clock steps back (the
// count borrows the next millisecond when it runs out).
import { Errors, ParleyError } from "../../shared/errors.js";
import type { Clock } from "../../shared/clock.js";
import { OwnershipPolicy, type LeaseTimings } from "../ownership.js";
import type { Fence, LeaseHolder, LeaseStore } from "../../ports/store/store.js";

const idEpochMs = Date.UTC(2026, 0, 1);
const slotBits = 10n;
const countBits = 12n;
const slots = 1 << Number(slotBits);
const countsPerMs = 1 << Number(countBits);

/** Slot `s` is lease number -1 - s: ownership shards are 0 and up, so the two never meet. */
const leaseOfSlot = (slot: number) => -1 - slot;
const slotOfLease = (lease: number) => -1 - lease;

/** The slot an id was drawn under. */
export const slotOfId = (id: bigint) => Number((id >> countBits) & BigInt(slots - 1));

/** Where a node looks for a free slot first: spread by its name, so nodes rarely probe past each other. */
function firstSlotFor(node: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < node.length; i++) hash = Math.imul(hash ^ node.charCodeAt(i), 0x01000193) >>> 0;
  return hash % slots;
}

/** The slot lease is kept like an ownership lease: the same length, renewal and margin. */
export type FanOutIdPolicy = LeaseTimings;

const defaultPolicy: FanOutIdPolicy = { leaseMs: OwnershipPolicy.leaseMs, renewEveryMs: OwnershipPolicy.renewEveryMs, safetyMarginMs: OwnershipPolicy.safetyMarginMs };

export class FanOutIds {
  private held: { fence: Fence; trustedUntil: number } | undefined;
  /** The slot claimed at start and when: what an earlier holder drew under it before then is an orphan. */
  private inheritance: { slot: number; claimedAt: number } | undefined;
  private claiming: Promise<void> | undefined;
  private renewal: NodeJS.Timeout | undefined;
  private lastMs = -1;
  private count = 0;

  private constructor(
    private readonly leases: LeaseStore,
    private readonly clock: Clock,
    private readonly holder: LeaseHolder,
    private readonly policy: FanOutIdPolicy,
  ) {}

  /** Claims a slot for this holder (a restarted node takes its own back) and keeps it renewed until stop(). */
  static async claim(
    leases: LeaseStore,
    clock: Clock,
    holder: LeaseHolder,
    { policy = defaultPolicy, onRenewalError = () => {} }: { policy?: FanOutIdPolicy; onRenewalError?: (err: unknown) => void } = {},
  ): Promise<FanOutIds> {
    const ids = new FanOutIds(leases, clock, holder, policy);
    const claimedAt = clock.now();
    await ids.claimSlot();
    ids.inheritance = { slot: slotOfLease(ids.held!.fence.shard), claimedAt };
    ids.renewal = setInterval(() => void ids.renew().catch(onRenewalError), policy.renewEveryMs);
    ids.renewal.unref();
    return ids;
  }

  /** The slot drawn from now, or undefined while none is trusted. */
  get slot(): number | undefined {
    return this.trusted() ? slotOfLease(this.held!.fence.shard) : undefined;
  }

  /** Resolves once a slot is trusted: at once while one is, else once the held one is renewed or another claimed. */
  ready(): Promise<void> {
    if (this.trusted()) return Promise.resolve();
    this.claiming ??= this.renew().finally(() => (this.claiming = undefined));
    return this.claiming;
  }

  /**
   * Whether the id was drawn by an earlier holder of the slot this process claimed at start, before
   * it claimed it (`recordedAt` by the record's own time). That holder is gone: the store gave the
   * slot to this process only once its lease was released or had run out, or it was this node's
   * own earlier instance (a restarted node takes its slot back). So nothing is delivering what it
   * recorded under the id, and this process may finish it at once instead of waiting for the
   * sweep's age limit.
   */
  inherited(id: bigint, recordedAt: number): boolean {
    return this.inheritance !== undefined && slotOfId(id) === this.inheritance.slot && recordedAt < this.inheritance.claimedAt;
  }

  /** The next id; UNAVAILABLE while this process holds no slot it trusts (call ready() first). */
  next(): bigint {
    const slot = this.slot;
    if (slot === undefined) {
      void this.ready().catch(() => {});
      throw new ParleyError(Errors.unavailable, { reason: "FAN_OUT_ID_SLOT_EXPIRED" }, "this node is renewing its id slot; try again");
    }
    const now = Math.max(0, this.clock.now() - idEpochMs);
    if (now > this.lastMs) {
      this.lastMs = now;
      this.count = 0;
    } else if (++this.count === countsPerMs) {
      this.lastMs += 1;
      this.count = 0;
    }
    return (BigInt(this.lastMs) << (slotBits + countBits)) | (BigInt(slot) << countBits) | BigInt(this.count);
  }

  /** Stops renewing and releases the slot, so a restarted or new node may take it at once. */
  async stop(): Promise<void> {
    clearInterval(this.renewal);
    const held = this.held;
    this.held = undefined;
    if (held) await this.leases.release(this.holder, [held.fence]);
  }

  private trusted(): boolean {
    return this.held !== undefined && this.clock.now() < this.held.trustedUntil;
  }

  private async claimSlot(): Promise<void> {
    const first = firstSlotFor(this.holder.node);
    for (let probe = 0; probe < slots; probe++) {
      const lease = leaseOfSlot((first + probe) % slots);
      const askedAt = this.clock.now();
      const granted = await this.leases.acquire(lease, this.holder, askedAt, this.policy.leaseMs);
      if (granted.instance !== this.holder.instance) continue;
      this.held = { fence: { shard: lease, epoch: granted.epoch }, trustedUntil: askedAt + this.policy.leaseMs - this.policy.safetyMarginMs };
      return;
    }
    throw new Error(`all ${slots} fan-out id slots are held: more engine processes than slots`);
  }

  private async renew(): Promise<void> {
    const held = this.held;
    if (!held) return this.claimSlot();
    const askedAt = this.clock.now();
    const renewed = await this.leases.renew(this.holder, [held.fence], askedAt, this.policy.leaseMs);
    if (this.held !== held) return;
    if (renewed.includes(held.fence.shard)) held.trustedUntil = askedAt + this.policy.leaseMs - this.policy.safetyMarginMs;
    else {
      // Another node took it once the lease ran out by its clock; this process stopped drawing a
      // margin before that by its own, so their ids and the earlier ones stay apart in time.
      this.held = undefined;
      await this.claimSlot();
    }
  }
}
