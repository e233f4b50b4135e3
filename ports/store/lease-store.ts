// Shard leases and the fences every owner's write carries: one aggregate of the storage port (store.ts).

/**
 * Ownership of keys (a conversation, a user's update stream) is a time-limited lease per shard, and
 * each change of hands gives the shard a new epoch. A writer carries the fence it was given, its
 * shard and epoch; every fenced write checks it in its own transaction, so a node that lost a
 * shard (its lease expired and another node took it, or it paused for longer than the lease) can
 * never write beside the new owner, whatever it still believes. See engine/ownership.ts.
 */
export interface Fence {
  shard: number;
  epoch: number;
}

/** A write that the key's owner makes: refused unless `fence` is the shard's current epoch. */
export interface FencedWrite {
  fence?: Fence;
}

/** A fenced write met a newer epoch: another owner took the shard; nothing was written. */
export class OwnershipLostError extends Error {
  constructor(readonly fence: Fence) {
    super(`shard ${fence.shard} has moved past epoch ${fence.epoch}`);
    this.name = "OwnershipLostError";
  }
}

export interface LeaseHolder {
  /** The node's stable name: a new instance of the same node takes its leases at once (it restarted). */
  node: string;
  /** This process instance of the node: unique per start. */
  instance: string;
}

export interface LeaseRecord {
  shard: number;
  node: string;
  /** Empty once released. */
  instance: string;
  epoch: number;
  expiresAt: number;
}

export interface LeaseStore {
  /**
   * Takes or extends the shard's lease for `holder` until now + ttlMs, and answers the lease as it
   * stands after the call (held by someone else when it was not free). The holder's own lease is
   * extended with its epoch, expired or not (nobody held it since). A lease never taken starts at
   * epoch 1; one released, expired at `now`, or held by an earlier instance of the same node is
   * taken with the next epoch. Concurrent calls for one shard leave exactly one holder.
   */
  acquire(shard: number, holder: LeaseHolder, now: number, ttlMs: number): Promise<LeaseRecord>;
  /**
   * Extends the holder's leases of these shards, each only while it still has that epoch (expired
   * or not); answers the shards extended. The others were lost.
   */
  renew(holder: LeaseHolder, fences: readonly Fence[], now: number, ttlMs: number): Promise<number[]>;
  /**
   * Takes the shard from a holder known to be gone, before its lease runs out: only while the lease
   * is still exactly `from` (same instance and epoch), with the next epoch. Answers the lease as it
   * stands after the call (someone else's when `from` was out of date). Any take of a lease before
   * it runs out (this, or `acquire` from an earlier instance of the same node) first revokes the
   * holder instance's fence where its confirming appends look (FenceHolder).
   */
  takeOver(shard: number, holder: LeaseHolder, from: LeaseRecord, now: number, ttlMs: number): Promise<LeaseRecord>;
  /** Gives the leases up (each only while the holder has that epoch): the next acquirer takes them at once, with a new epoch. */
  release(holder: LeaseHolder, fences: readonly Fence[]): Promise<void>;
  /** The shard's lease, or undefined when it was never taken. */
  getLease(shard: number): Promise<LeaseRecord | undefined>;
}
