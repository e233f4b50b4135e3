// Shard leases (DATA-MODEL.md §3): one row per shard, changed only by LWTs whose condition repeats
// what the changer read, so of concurrent changers exactly one applies and the others read the
// winner's row. The fence check of writes is the context's (checkFences) plus each key's owner
// epoch in its own head LWT; update-stream appends confirm against `lease_revocations` instead.
import type { LeaseHolder, LeaseRecord, LeaseStore } from "../store.js";
import { numberOf, type Row } from "./cql.js";
import type { CassandraContext } from "./context.js";

/** Rounds of read-then-LWT an acquire tries while other acquirers keep changing the row. */
const maxAcquireAttempts = 8;

const leaseOf = (row: Row): LeaseRecord => ({
  shard: row.shard as number,
  node: row.node as string,
  instance: row.instance as string,
  epoch: row.epoch as number,
  expiresAt: numberOf(row.expires_at),
});

export function leaseStore(ctx: CassandraContext): LeaseStore {
  const { cql } = ctx;
  /** At LOCAL_SERIAL: a lease change in flight is seen. */
  const read = async (shard: number) => {
    const row = await cql.row("SELECT shard, node, instance, epoch, expires_at FROM leases WHERE shard = ?", [shard], { serial: true });
    return row && leaseOf(row);
  };

  /**
   * Gives the lease to `holder` with the next epoch, only while it still is `from`; the new lease,
   * or undefined. A holder whose lease has not run out may still be writing: its fence is revoked
   * first, where its appends confirm (updates.ts), so that once this completes none of them can be
   * acknowledged. A revocation whose take then fails is harmless: the lease moved on anyway.
   */
  const takeFrom = async (from: LeaseRecord, holder: LeaseHolder, now: number, expiresAt: number): Promise<LeaseRecord | undefined> => {
    const epoch = from.epoch + 1;
    if (from.instance !== "" && from.expiresAt > now) {
      await cql.write("INSERT INTO lease_revocations (instance, shard, epoch) VALUES (?, ?, ?)", [from.instance, from.shard, from.epoch]);
    }
    const taken = await cql.lwt("UPDATE leases SET node = ?, instance = ?, epoch = ?, expires_at = ? WHERE shard = ? IF epoch = ? AND instance = ?", [
      holder.node,
      holder.instance,
      epoch,
      BigInt(expiresAt),
      from.shard,
      from.epoch,
      from.instance,
    ]);
    return taken.applied ? { shard: from.shard, node: holder.node, instance: holder.instance, epoch, expiresAt } : undefined;
  };

  return {
    async acquire(shard, holder, now, ttlMs) {
      const expiresAt = now + ttlMs;
      for (let attempt = 0; attempt < maxAcquireAttempts; attempt++) {
        const current = await read(shard);
        if (!current) {
          const taken = await cql.lwt("INSERT INTO leases (shard, node, instance, epoch, expires_at) VALUES (?, ?, ?, 1, ?) IF NOT EXISTS", [
            shard,
            holder.node,
            holder.instance,
            BigInt(expiresAt),
          ]);
          if (taken.applied) return { shard, node: holder.node, instance: holder.instance, epoch: 1, expiresAt };
          continue;
        }
        if (current.instance === holder.instance && holder.instance !== "") {
          const extended = await cql.lwt("UPDATE leases SET expires_at = ? WHERE shard = ? IF instance = ? AND epoch = ?", [BigInt(expiresAt), shard, holder.instance, current.epoch]);
          if (extended.applied) return { ...current, expiresAt };
          continue;
        }
        if (!isFreeFor(current, holder, now)) return current;
        const taken = await takeFrom(current, holder, now, expiresAt);
        if (taken) return taken;
      }
      throw new Error(`lease of shard ${shard}: still contended after ${maxAcquireAttempts} attempts`);
    },

    async takeOver(shard, holder, from, now, ttlMs) {
      return (await takeFrom(from, holder, now, now + ttlMs)) ?? (await read(shard)) ?? this.acquire(shard, holder, now, ttlMs);
    },

    async renew(holder, fences, now, ttlMs) {
      // One LWT per shard: a conditional batch would be all-or-nothing, and each shard is kept or lost on its own.
      const outcomes = await Promise.all(
        fences.map((fence) => cql.lwt("UPDATE leases SET expires_at = ? WHERE shard = ? IF instance = ? AND epoch = ?", [BigInt(now + ttlMs), fence.shard, holder.instance, fence.epoch])),
      );
      return fences.filter((_fence, i) => outcomes[i].applied).map((fence) => fence.shard);
    },

    async release(holder, fences) {
      await Promise.all(
        fences.map((fence) => cql.lwt("UPDATE leases SET instance = '', expires_at = 0 WHERE shard = ? IF instance = ? AND epoch = ?", [fence.shard, holder.instance, fence.epoch])),
      );
    },

    getLease: read,
  };
}

/** Released, expired at `now`, or held by an earlier instance of the same node (it restarted). */
function isFreeFor(lease: LeaseRecord, holder: LeaseHolder, now: number): boolean {
  return lease.instance === "" || lease.expiresAt <= now || lease.node === holder.node;
}
