// How sweeps find their work without scanning (DATA-MODEL.md §6.4). A writer that puts work in a
// queue partition (a conversation's outbox, an agent's webhook jobs, an open stream, an expiring
// upload) also writes an index row naming that partition, in the hour bucket of the adapter's wall
// clock and one of a fixed number of slots. A sweep walks the (slot, hour) partitions from a per-slot
// low-water mark to now: a bounded number of known keys, never a token range. Index rows are
// idempotent (the same partition written twice is one row), so a busy queue costs one row an hour.
import { shardOf } from "../../../shared/shards.js";
import { readAll, type Cql, type Statement } from "./cql.js";

export type SweepKind = "outbox" | "open_streams" | "webhooks" | "uploads";

/** Slots per kind: sweeps read this many partitions per hour walked; writers spread over them. */
export const sweepSlots = 16;
const hourMs = 3_600_000;
/** An hour is only let go once writers' clocks are surely past it (clock skew between nodes). */
const settleMs = 5 * 60_000;

/** Index partitions a sweep reads at once. */
const sweepReadWidth = 32;

export const hourOf = (ms: number) => Math.floor(ms / hourMs);
export const slotOf = (item: string) => shardOf(item, sweepSlots);

/** The index row for `item`, written with the work (in its batch, or before it). */
export function sweepEntry(kind: SweepKind, item: string, wallClockMs: number = Date.now()): Statement {
  return {
    query: "INSERT INTO sweep_index (kind, slot, hour, item) VALUES (?, ?, ?, ?)",
    params: [kind, slotOf(item), hourOf(wallClockMs), item],
  };
}

/** An index row as found by a sweep: where it lives, so the sweep can drop it once its queue is empty. */
export interface SweepItem {
  item: string;
  slot: number;
  hour: number;
}

export class SweepIndex {
  constructor(
    private readonly cql: Cql,
    private readonly wallClock: () => number = Date.now,
  ) {}

  /**
   * Every indexed item of the kind, oldest hour first. The walk starts at each slot's mark; when the
   * store is new the first walk starts at the current hour (nothing older can exist). It ends at the
   * current hour, or at `throughHour` when later (a kind that indexes work at the hour it falls due).
   */
  async items(kind: SweepKind, throughHour?: number): Promise<SweepItem[]> {
    const current = Math.max(hourOf(this.wallClock()), throughHour ?? -Infinity);
    const marks = new Map<number, number>();
    for (const row of await this.cql.rows("SELECT slot, hour FROM sweep_marks WHERE kind = ?", [kind])) marks.set(row.slot as number, row.hour as number);
    const firstHour = await this.firstHour();
    const partitions: { slot: number; hour: number }[] = [];
    for (let slot = 0; slot < sweepSlots; slot++) {
      for (let hour = marks.get(slot) ?? firstHour; hour <= current; hour++) partitions.push({ slot, hour });
    }
    // Bounded: after a long outage the walk spans many hours, and it must not flood the cluster.
    const found = await readAll(partitions, sweepReadWidth, ({ slot, hour }) =>
      this.cql
        .rows("SELECT item FROM sweep_index WHERE kind = ? AND slot = ? AND hour = ?", [kind, slot, hour])
        .then((rows) => rows.map((row) => ({ item: row.item as string, slot, hour }))),
    );
    return found.flat().sort((a, b) => a.hour - b.hour);
  }

  /**
   * The sweep found the item's queue empty: drops the index row if its hour is settled (a writer of
   * the current hour may still be adding work behind it), then moves the slot's mark past hours
   * with no rows left.
   */
  async drop(kind: SweepKind, found: readonly SweepItem[], emptied: readonly SweepItem[]): Promise<void> {
    const settled = hourOf(this.wallClock() - settleMs);
    const dropped = emptied.filter((entry) => entry.hour < settled);
    await this.cql.writeAll(
      dropped.map((entry) => ({ query: "DELETE FROM sweep_index WHERE kind = ? AND slot = ? AND hour = ? AND item = ?", params: [kind, entry.slot, entry.hour, entry.item] })),
    );
    const droppedKeys = new Set(dropped.map((entry) => `${entry.slot}/${entry.hour}/${entry.item}`));
    const lowestLive = new Map<number, number>();
    for (const entry of found) {
      if (droppedKeys.has(`${entry.slot}/${entry.hour}/${entry.item}`)) continue;
      lowestLive.set(entry.slot, Math.min(lowestLive.get(entry.slot) ?? Infinity, entry.hour));
    }
    const marks: Statement[] = [];
    for (let slot = 0; slot < sweepSlots; slot++) {
      const mark = Math.min(lowestLive.get(slot) ?? Infinity, settled);
      marks.push({ query: "INSERT INTO sweep_marks (kind, slot, hour) VALUES (?, ?, ?)", params: [kind, slot, mark] });
    }
    await this.cql.writeAll(marks);
  }

  private firstHourCache: number | undefined;

  /** The hour the keyspace's schema was first applied: no index row is older. */
  private async firstHour(): Promise<number> {
    if (this.firstHourCache === undefined) {
      const row = await this.cql.row("SELECT applied_at FROM schema_version WHERE component = 'store' LIMIT 1");
      this.firstHourCache = hourOf(Number(row?.applied_at ?? this.wallClock()));
    }
    return this.firstHourCache;
  }
}
