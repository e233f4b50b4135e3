// Shard leases and the fence check every owner's write runs in its own transaction (see Fence in
// ../store.ts). Writers in one process share one connection and better-sqlite3 runs each
// transaction to its end synchronously, so a check and the write it guards cannot interleave
// with another writer's.
import type Database from "better-sqlite3";
import { OwnershipLostError, type Fence, type LeaseHolder, type LeaseRecord, type LeaseStore } from "../store.js";

interface LeaseRow {
  shard: number;
  node: string;
  instance: string;
  epoch: number;
  expires_at: number;
}

const toLease = (row: LeaseRow): LeaseRecord => ({ shard: row.shard, node: row.node, instance: row.instance, epoch: row.epoch, expiresAt: row.expires_at });

/** Throws OwnershipLostError unless the fence is its shard's current epoch; call it inside the write's transaction. No fence, no check. */
export type FenceCheck = (fence: Fence | undefined) => void;

export function fenceCheck(db: Database.Database): FenceCheck {
  const epochOf = db.prepare<[number], { epoch: number }>("SELECT epoch FROM leases WHERE shard = ?");
  return (fence) => {
    if (!fence) return;
    if (epochOf.get(fence.shard)?.epoch !== fence.epoch) throw new OwnershipLostError(fence);
  };
}

export function leaseStore(db: Database.Database): LeaseStore {
  const byShard = db.prepare<[number], LeaseRow>("SELECT * FROM leases WHERE shard = ?");
  const insert = db.prepare("INSERT INTO leases (shard, node, instance, epoch, expires_at) VALUES (?, ?, ?, 1, ?)");
  const take = db.prepare("UPDATE leases SET node = ?, instance = ?, epoch = epoch + 1, expires_at = ? WHERE shard = ?");
  const extend = db.prepare("UPDATE leases SET expires_at = ? WHERE shard = ? AND instance = ? AND epoch = ?");
  const takeFrom = db.prepare("UPDATE leases SET node = ?, instance = ?, epoch = epoch + 1, expires_at = ? WHERE shard = ? AND instance = ? AND epoch = ?");
  const release = db.prepare("UPDATE leases SET instance = '', expires_at = 0 WHERE shard = ? AND instance = ? AND epoch = ?");
  const acquire = db.transaction((shard: number, holder: LeaseHolder, now: number, ttlMs: number): LeaseRecord => {
    const current = byShard.get(shard);
    const until = now + ttlMs;
    if (!current) insert.run(shard, holder.node, holder.instance, until);
    else if (current.instance === holder.instance && holder.instance !== "") extend.run(until, shard, holder.instance, current.epoch);
    else if (current.instance === "" || current.expires_at <= now || current.node === holder.node) take.run(holder.node, holder.instance, until, shard);
    return toLease(byShard.get(shard)!);
  });
  const renewAll = db.transaction((holder: LeaseHolder, fences: readonly Fence[], until: number) =>
    fences.filter((fence) => extend.run(until, fence.shard, holder.instance, fence.epoch).changes === 1).map((fence) => fence.shard),
  );
  const releaseAll = db.transaction((holder: LeaseHolder, fences: readonly Fence[]) => {
    for (const fence of fences) release.run(fence.shard, holder.instance, fence.epoch);
  });
  return {
    async acquire(shard, holder, now, ttlMs) {
      return acquire(shard, holder, now, ttlMs);
    },
    async takeOver(shard, holder, from, now, ttlMs) {
      takeFrom.run(holder.node, holder.instance, now + ttlMs, shard, from.instance, from.epoch);
      const row = byShard.get(shard);
      return row ? toLease(row) : acquire(shard, holder, now, ttlMs);
    },
    async renew(holder, fences, now, ttlMs) {
      return renewAll(holder, fences, now + ttlMs);
    },
    async release(holder, fences) {
      releaseAll(holder, fences);
    },
    async getLease(shard) {
      const row = byShard.get(shard);
      return row && toLease(row);
    },
  };
}
