import type Database from "better-sqlite3";
import type { EventsOf, FanOutRecord, FanOutStore } from "../store.js";

interface FanOutRow {
  fan_out_id: bigint;
  scope: string;
  recipients: string;
  entry: Buffer;
  related: string;
  created_at: bigint;
}

const toFanOut = (row: FanOutRow): FanOutRecord => ({
  fanOutId: row.fan_out_id,
  scope: row.scope,
  recipients: JSON.parse(row.recipients) as number[],
  entry: new Uint8Array(row.entry),
  related: row.related,
  createdAt: Number(row.created_at),
});

/** Writes one fan-out row; shared with the stores whose changes record their event in the same transaction. */
export function fanOutWriter(db: Database.Database) {
  const insert = db.prepare("INSERT INTO fan_outs (fan_out_id, scope, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  return (fanOut: FanOutRecord): void => {
    insert.run(fanOut.fanOutId, fanOut.scope, JSON.stringify(fanOut.recipients), Buffer.from(fanOut.entry), fanOut.related, fanOut.createdAt);
  };
}

export type FanOutWriter = ReturnType<typeof fanOutWriter>;

/** Runs a synchronous change and records the events it answers for in one transaction. */
export type Recorder = <Result>(change: () => Result, events: EventsOf<Result> | undefined) => Result;

export function recorder(db: Database.Database, write: FanOutWriter): Recorder {
  const run = db.transaction((change: () => unknown, events: EventsOf<unknown> | undefined) => {
    const result = change();
    for (const fanOut of events?.(result) ?? []) write(fanOut);
    return result;
  });
  return <Result>(change: () => Result, events: EventsOf<Result> | undefined) => run(change, events as EventsOf<unknown> | undefined) as Result;
}

/**
 * Finished fan-outs are deleted in batches, a few milliseconds later: one write for many instead of
 * one per event. A crash before the batch is written only makes the start-up pass deliver them
 * again, which every stream refuses as a repeat.
 */
const finishBatch = { size: 256, delayMs: 20 };

export function fanOutStore(db: Database.Database, write: FanOutWriter): FanOutStore & { close(): void } {
  const pending = db.prepare<[number], FanOutRow>("SELECT * FROM fan_outs ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const pendingOf = db.prepare<[string, number], FanOutRow>("SELECT * FROM fan_outs WHERE scope = ? ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const finishAll = db.prepare("DELETE FROM fan_outs WHERE fan_out_id IN (SELECT value FROM json_each(?))");
  const recordAll = db.transaction((fanOuts: readonly FanOutRecord[]) => fanOuts.forEach(write));
  const finished = new Set<bigint>();
  let flushTimer: NodeJS.Timeout | undefined;
  const flush = () => {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    if (finished.size === 0 || !db.open) return;
    // Ids go past 2^53: written as JSON integers from their exact digits.
    finishAll.run(`[${[...finished].join(",")}]`);
    finished.clear();
  };
  return {
    async record(fanOuts) {
      recordAll(fanOuts);
    },
    async pending(limit, scope) {
      flush();
      return (scope === undefined ? pending.all(limit) : pendingOf.all(scope, limit)).map(toFanOut);
    },
    async finish(fanOutId) {
      finished.add(fanOutId);
      if (finished.size >= finishBatch.size) flush();
      else if (!flushTimer) {
        flushTimer = setTimeout(flush, finishBatch.delayMs);
        flushTimer.unref();
      }
    },
    close: flush,
  };
}
