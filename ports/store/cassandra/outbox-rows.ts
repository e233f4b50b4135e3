// How a change records its events (DATA-MODEL.md §1.6 P2, §5.5): the outbox rows go in the same
// logged batch as the change, so a change is never durable without its events. Where a record
// lives follows its scope: a conversation's fan-outs (scope = the conversation id) in that
// conversation's partition, an account's ("user:<id>") in the scope's own, a system message as a
// clustering row of its conversation's head. Each also names its partition in the sweep index.
import type { EventsOf, FanOutRecord, OutboxRecord, SystemMessageRecord } from "../store.js";
import type { Cql, Statement } from "./cql.js";
import { sweepEntry } from "./sweep-index.js";

/** A conversation's scope is its id in decimal; every other scope is an account's or the engine's own. */
export const conversationOfScope = (scope: string): bigint | undefined => (/^\d{1,20}$/.test(scope) ? BigInt(scope) : undefined);

/** The sweep index item of a system message's conversation (the outbox kind, beside fan-out scopes). */
export const systemMessagesItem = (conversationId: bigint) => `system:${conversationId}`;

/** The conversation a sweep index item of system messages names, or undefined for a fan-out scope. */
export const conversationOfSystemMessagesItem = (item: string): bigint | undefined => (/^system:\d{1,20}$/.test(item) ? BigInt(item.slice("system:".length)) : undefined);

export function fanOutStatements(record: FanOutRecord, wallClockMs?: number): Statement[] {
  const conversationId = conversationOfScope(record.scope);
  const row =
    conversationId === undefined
      ? {
          query: "INSERT INTO account_outbox (scope, fan_out_id, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?, ?)",
          params: [record.scope, record.fanOutId, record.recipients, Buffer.from(record.entry), record.related, BigInt(record.createdAt)],
        }
      : {
          query: "INSERT INTO conversation_outbox (conversation_id, fan_out_id, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?, ?)",
          params: [conversationId, record.fanOutId, record.recipients, Buffer.from(record.entry), record.related, BigInt(record.createdAt)],
        };
  return [sweepEntry("outbox", record.scope, wallClockMs), row];
}

export function systemMessageStatements(record: SystemMessageRecord, wallClockMs?: number): Statement[] {
  return [
    sweepEntry("outbox", systemMessagesItem(record.conversationId), wallClockMs),
    {
      query: "INSERT INTO conversations (conversation_id, system_message_id, body, extra_recipients, recorded_at) VALUES (?, ?, ?, ?, ?)",
      params: [record.conversationId, record.systemMessageId, Buffer.from(record.body), record.extraRecipients, BigInt(record.createdAt)],
    },
  ];
}

/**
 * The statements recording these events. An id already recorded (or given twice) refuses them all:
 * ids are unique by construction, so this only ever catches a bug, but the port promises it.
 */
export async function outboxStatements(cql: Cql, records: readonly OutboxRecord[]): Promise<Statement[]> {
  if (records.length === 0) return [];
  const seen = new Set<bigint>();
  for (const record of records) {
    const id = "fanOutId" in record ? record.fanOutId : record.systemMessageId;
    if (seen.has(id)) throw new Error(`outbox record ${id} is given twice`);
    seen.add(id);
  }
  const existing = await Promise.all(records.map((record) => isRecorded(cql, record)));
  const repeated = records.find((_record, i) => existing[i]);
  if (repeated) throw new Error(`outbox record ${"fanOutId" in repeated ? repeated.fanOutId : repeated.systemMessageId} is recorded already`);
  return records.flatMap((record) => ("fanOutId" in record ? fanOutStatements(record) : systemMessageStatements(record)));
}

async function isRecorded(cql: Cql, record: OutboxRecord): Promise<boolean> {
  if (!("fanOutId" in record)) {
    return (
      (await cql.row("SELECT system_message_id FROM conversations WHERE conversation_id = ? AND system_message_id = ?", [record.conversationId, record.systemMessageId])) !==
      undefined
    );
  }
  const conversationId = conversationOfScope(record.scope);
  const row =
    conversationId === undefined
      ? await cql.row("SELECT fan_out_id FROM account_outbox WHERE scope = ? AND fan_out_id = ?", [record.scope, record.fanOutId])
      : await cql.row("SELECT fan_out_id FROM conversation_outbox WHERE conversation_id = ? AND fan_out_id = ?", [conversationId, record.fanOutId]);
  return row !== undefined;
}

/**
 * Commits a change (its statements, computed for `result`) with the events it answers for, in one
 * logged batch. Events that throw write nothing.
 */
export async function commitWithEvents<Result>(cql: Cql, result: Result, change: readonly Statement[], events: EventsOf<Result> | undefined): Promise<Result> {
  const records = events ? events(result) : [];
  await cql.batch([...change, ...(await outboxStatements(cql, records))]);
  return result;
}
