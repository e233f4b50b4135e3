import type Database from "better-sqlite3";
import type { EventsOf, FanOutRecord, OutboxStore, OutboxRecord, SystemMessageRecord } from "../store.js";

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

interface SystemMessageRow {
  system_message_id: bigint;
  conversation_id: bigint;
  body: Buffer;
  extra_recipients: string;
  created_at: bigint;
}

const toSystemMessage = (row: SystemMessageRow): SystemMessageRecord => ({
  systemMessageId: row.system_message_id,
  conversationId: row.conversation_id,
  body: new Uint8Array(row.body),
  extraRecipients: JSON.parse(row.extra_recipients) as number[],
  createdAt: Number(row.created_at),
});

/** Writes outbox rows; shared with the stores whose changes record their events in the same transaction. */
export function outboxWriter(db: Database.Database) {
  const insertFanOut = db.prepare("INSERT INTO fan_outs (fan_out_id, scope, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  const insertSystemMessage = db.prepare("INSERT INTO system_messages (system_message_id, conversation_id, body, extra_recipients, created_at) VALUES (?, ?, ?, ?, ?)");
  const deleteSystemMessage = db.prepare("DELETE FROM system_messages WHERE system_message_id = ?");
  return {
    write(record: OutboxRecord): void {
      if ("fanOutId" in record) {
        insertFanOut.run(record.fanOutId, record.scope, JSON.stringify(record.recipients), Buffer.from(record.entry), record.related, record.createdAt);
      } else {
        insertSystemMessage.run(record.systemMessageId, record.conversationId, Buffer.from(record.body), JSON.stringify(record.extraRecipients), record.createdAt);
      }
    },
    systemMessagePosted(systemMessageId: bigint): void {
      deleteSystemMessage.run(systemMessageId);
    },
  };
}

export type OutboxWriter = ReturnType<typeof outboxWriter>;

/** Runs a synchronous change and records the events it answers for in one transaction. */
export type Recorder = <Result>(change: () => Result, events: EventsOf<Result> | undefined) => Result;

export function recorder(db: Database.Database, outbox: OutboxWriter): Recorder {
  const run = db.transaction((change: () => unknown, events: EventsOf<unknown> | undefined) => {
    const result = change();
    for (const record of events?.(result) ?? []) outbox.write(record);
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

export function outboxStore(db: Database.Database): OutboxStore & { close(): void } {
  const pending = db.prepare<[number], FanOutRow>("SELECT * FROM fan_outs ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const pendingOf = db.prepare<[string, number], FanOutRow>("SELECT * FROM fan_outs WHERE scope = ? ORDER BY fan_out_id LIMIT ?").safeIntegers(true);
  const finishAll = db.prepare("DELETE FROM fan_outs WHERE fan_out_id IN (SELECT value FROM json_each(?))");
  const pendingSystemMessages = db.prepare<[number], SystemMessageRow>("SELECT * FROM system_messages ORDER BY system_message_id LIMIT ?").safeIntegers(true);
  const systemMessage = db.prepare<[bigint], { n: number }>("SELECT 1 AS n FROM system_messages WHERE system_message_id = ?");
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
    async pending(limit, scope) {
      flush();
      return (scope === undefined ? pending.all(limit) : pendingOf.all(scope, limit)).map(toFanOut);
    },
    async finish({ fanOutId }) {
      finished.add(fanOutId);
      if (finished.size >= finishBatch.size) flush();
      else if (!flushTimer) {
        flushTimer = setTimeout(() => {
          try {
            flush();
          } catch {
            // Out of a timer a throw would end the process. The ids stay in `finished` for the
            // next flush; the statement's failure is counted with the store's query errors.
          }
        }, finishBatch.delayMs);
        flushTimer.unref();
      }
    },
    async pendingSystemMessages(limit) {
      return pendingSystemMessages.all(limit).map(toSystemMessage);
    },
    async isSystemMessagePending(_conversationId, systemMessageId) {
      return systemMessage.get(systemMessageId) !== undefined;
    },
    close: flush,
  };
}
