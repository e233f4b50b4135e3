import type Database from "better-sqlite3";
import type { EventsOf, FanOutRecord, FanOutStore, NewFanOut } from "../store.js";

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
  const insert = db.prepare("INSERT INTO fan_outs (scope, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?)").safeIntegers(true);
  return (fanOut: NewFanOut): bigint =>
    insert.run(fanOut.scope, JSON.stringify(fanOut.recipients), Buffer.from(fanOut.entry), fanOut.related, fanOut.createdAt).lastInsertRowid as bigint;
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

export function fanOutStore(db: Database.Database, write: FanOutWriter): FanOutStore {
  const pending = db.prepare<[number], FanOutRow>("SELECT * FROM fan_outs ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const pendingOf = db.prepare<[string, number], FanOutRow>("SELECT * FROM fan_outs WHERE scope = ? ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const finish = db.prepare("DELETE FROM fan_outs WHERE fan_out_id = ?");
  const recordAll = db.transaction((fanOuts: readonly NewFanOut[]) => fanOuts.map(write));
  return {
    async record(fanOuts) {
      return recordAll(fanOuts);
    },
    async pending(limit, scope) {
      return (scope === undefined ? pending.all(limit) : pendingOf.all(scope, limit)).map(toFanOut);
    },
    async finish(fanOutId) {
      finish.run(fanOutId);
    },
  };
}
