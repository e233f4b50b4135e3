// What every part of the Cassandra adapter shares: the session, the id allocators, the sweep index
// and the fence check. One per open store.
import { OwnershipLostError, type Fence } from "../store.js";
import type { Cql } from "./cql.js";
import { IdBlocks, type IdAllocator, type IdSequence } from "./id-blocks.js";
import { IncreasingIds } from "./increasing-ids.js";
import { SweepIndex } from "./sweep-index.js";

export interface CassandraContext {
  cql: Cql;
  ids: Record<IdSequence, IdAllocator>;
  sweeps: SweepIndex;
  /**
   * Refuses (OwnershipLostError, before anything is written) a fence whose shard has a newer epoch
   * than it carries: one LOCAL_QUORUM read per shard (DATA-MODEL.md §3, part 2).
   */
  checkFences(fences: readonly Fence[] | undefined): Promise<void>;
  /** Work to finish before the session closes (write-behind buffers, id blocks). */
  onClose(work: () => Promise<void>): void;
}

export function cassandraContext(cql: Cql): CassandraContext & { close(): Promise<void> } {
  const closers: (() => Promise<void>)[] = [];
  const ids: Record<IdSequence, IdAllocator> = {
    user: new IdBlocks(cql, "user", { first: 10001, blockSize: 64 }),
    group: new IdBlocks(cql, "group", { first: 1, blockSize: 256 }),
    // The spec calls request ids increasing: one LWT per id, not per-process blocks (increasing-ids.ts).
    friend_request: new IncreasingIds(cql, "friend_request", 1),
  };
  return {
    cql,
    ids,
    sweeps: new SweepIndex(cql),
    async checkFences(fences) {
      if (!fences || fences.length === 0) return;
      const epochs = await Promise.all(fences.map((fence) => cql.row("SELECT epoch FROM leases WHERE shard = ?", [fence.shard])));
      fences.forEach((fence, i) => {
        if ((epochs[i]?.epoch as number | undefined) !== fence.epoch) throw new OwnershipLostError(fence);
      });
    },
    onClose(work) {
      closers.push(work);
    },
    async close() {
      for (const work of closers.reverse()) await work();
      await Promise.all(Object.values(ids).map((blocks) => blocks.close()));
    },
  };
}
