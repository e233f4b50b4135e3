// int32 ids (users, groups) from blocks taken with an LWT (DATA-MODEL.md §4): one Paxos round per
// block, not per id. Ids of a block are handed out in order in memory; close() gives the unused
// rest back when no other process took a block since, so a restarted process continues densely.
// Ids from blocks are unique but increase only within one process's block (two processes hand out
// interleaved ranges): a sequence the spec calls increasing uses IncreasingIds instead.
import type { Cql } from "./cql.js";

export type IdSequence = "user" | "group" | "friend_request";

export const maxInt32 = 2 ** 31 - 1;

/** Hands out the ids of one sequence; every process holds one per sequence (CassandraContext.ids). */
export interface IdAllocator {
  /** An id no process was handed before. */
  take(): Promise<number>;
  /** An id taken but not used, where nothing was written with it: it may be handed out again. */
  giveBack(id: number): void | Promise<void>;
  /** Gives back what the allocator holds unused, at store close. */
  close(): Promise<void>;
}

export interface IdSequencePolicy {
  /** The first id the sequence hands out. */
  first: number;
  blockSize: number;
}

export class IdBlocks implements IdAllocator {
  private next = 0;
  private end = 0;
  /** Ids given back (a creation refused after it took one): handed out again first, so a refusal leaves no gap. */
  private readonly returned: number[] = [];
  private taking: Promise<void> | undefined;

  constructor(
    private readonly cql: Cql,
    private readonly sequence: IdSequence,
    private readonly policy: IdSequencePolicy,
  ) {}

  async take(): Promise<number> {
    if (this.returned.length > 0) return this.returned.shift()!;
    while (this.next >= this.end) {
      this.taking ??= this.takeBlock().finally(() => (this.taking = undefined));
      await this.taking;
    }
    return this.next++;
  }

  /** An id taken but not used: the next take answers it again. */
  giveBack(id: number): void {
    if (id === this.next - 1) this.next--;
    else this.returned.unshift(id);
  }

  /** Returns the unused rest of the block when the sequence still ends with it. */
  async close(): Promise<void> {
    if (this.next >= this.end) return;
    await this.cql.lwt("UPDATE id_blocks SET next_free = ? WHERE sequence = ? IF next_free = ?", [this.next, this.sequence, this.end]);
    this.end = this.next;
  }

  private async takeBlock(): Promise<void> {
    for (;;) {
      const current = await this.cql.row("SELECT next_free FROM id_blocks WHERE sequence = ?", [this.sequence], { serial: true });
      const from = (current?.next_free as number | undefined) ?? this.policy.first;
      if (from + this.policy.blockSize - 1 > maxInt32) throw new Error(`the ${this.sequence} id sequence is exhausted (ids are int32 and never reused)`);
      const to = from + this.policy.blockSize;
      const outcome = current
        ? await this.cql.lwt("UPDATE id_blocks SET next_free = ? WHERE sequence = ? IF next_free = ?", [to, this.sequence, from])
        : await this.cql.lwt("INSERT INTO id_blocks (sequence, next_free) VALUES (?, ?) IF NOT EXISTS", [this.sequence, to]);
      if (outcome.applied) {
        this.next = from;
        this.end = to;
        return;
      }
    }
  }
}
