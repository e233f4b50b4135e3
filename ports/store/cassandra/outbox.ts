// The outbox as the engine reads and finishes it (DATA-MODEL.md §5.5); outbox-rows.ts records it.
// A conversation's fan-outs are one partition of `conversation_outbox`, an account's one of
// `account_outbox`, a conversation's pending system messages clustering rows of its head. Sweeps
// find those partitions through the sweep index (kind "outbox"), never by a scan.
import type { FanOutRecord, OutboxStore, SystemMessageRecord } from "../store.js";
import { bytesOf, numberOf, type Row, type Statement } from "./cql.js";
import type { CassandraContext } from "./context.js";
import { conversationHeads } from "./conversation-head.js";
import { conversationOfScope, conversationOfSystemMessagesItem } from "./outbox-rows.js";
import { isAgentChangeGuard, settleAgentChange } from "./agents.js";
import { settleTentative } from "./contacts.js";
import type { SweepItem } from "./sweep-index.js";
import { tentativeSettleAfterMs } from "./tentative-outbox.js";

/**
 * Finished fan-outs are deleted a few milliseconds later, many in one round: a conversation's by one
 * range delete up to the highest finished id (one tombstone however many were finished), an
 * account's row by row. A crash before the write only makes the sweep deliver them again, which
 * every stream refuses as a repeat. Reads of the outbox write what is waiting first.
 */
const finishBatch = { size: 256, delayMs: 20 };

const byId = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

export function outboxStore(ctx: CassandraContext): OutboxStore {
  const { cql } = ctx;
  const heads = conversationHeads(ctx);

  const fanOutOf = (scope: string, row: Row): FanOutRecord => ({
    fanOutId: row.fan_out_id as bigint,
    scope,
    recipients: (row.recipients as number[] | null) ?? [],
    entry: bytesOf(row.entry),
    related: row.related as string,
    createdAt: numberOf(row.created_at),
  });

  /**
   * One scope's fan-outs, oldest first; a conversation's head write is rolled forward first so its
   * fan-out is among them. A tentative record (DATA-MODEL.md §1.6 P4) is not an event until its change
   * is decided: a sweep settles those old enough (their writer died or stalled past any retry), which
   * keeps the partition indexed while any stays undecided.
   */
  const pendingOf = async (scope: string, limit: number, settleOld = false): Promise<{ records: FanOutRecord[]; undecided: number }> => {
    const conversationId = conversationOfScope(scope);
    if (conversationId === undefined) {
      const rows = await cql.rows(
        "SELECT fan_out_id, recipients, entry, related, created_at, tentative, guard, WRITETIME(tentative) AS tentative_at FROM account_outbox WHERE scope = ? LIMIT ?",
        [scope, limit],
      );
      const records: FanOutRecord[] = [];
      let undecided = 0;
      for (const row of rows) {
        if (row.tentative !== true) records.push(fanOutOf(scope, row));
        else if (settleOld && Date.now() - numberOf(row.tentative_at) / 1000 > tentativeSettleAfterMs) {
          const guard = row.guard as string;
          const settle = isAgentChangeGuard(guard) ? settleAgentChange : settleTentative;
          if (await settle(cql, { scope, fanOutId: row.fan_out_id as bigint }, guard)) records.push(fanOutOf(scope, row));
        } else undecided++;
      }
      return { records, undecided };
    }
    await heads.settle(conversationId);
    const rows = await cql.rows("SELECT fan_out_id, recipients, entry, related, created_at FROM conversation_outbox WHERE conversation_id = ? LIMIT ?", [conversationId, limit]);
    return { records: rows.map((row) => fanOutOf(scope, row)), undecided: 0 };
  };

  const systemMessagesOf = async (conversationId: bigint): Promise<SystemMessageRecord[]> => {
    const rows = await cql.rows("SELECT system_message_id, body, extra_recipients, recorded_at FROM conversations WHERE conversation_id = ?", [conversationId]);
    return rows
      .filter((row) => row.system_message_id !== null)
      .map((row) => ({
        systemMessageId: row.system_message_id as bigint,
        conversationId,
        body: bytesOf(row.body),
        extraRecipients: (row.extra_recipients as number[] | null) ?? [],
        createdAt: numberOf(row.recorded_at),
      }));
  };

  /**
   * Reads the queue of every indexed item of the outbox that `wanted` selects, drops the index
   * entries of those found empty, and answers what was found, ordered by `idOf`, at most `limit`.
   */
  const sweep = async <T>(
    wanted: (item: string) => boolean,
    read: (item: string) => Promise<{ records: T[]; undecided: number }>,
    idOf: (record: T) => bigint,
    limit: number,
  ): Promise<T[]> => {
    const found = (await ctx.sweeps.items("outbox")).filter((entry) => wanted(entry.item));
    const entriesOf = new Map<string, SweepItem[]>();
    for (const entry of found) entriesOf.set(entry.item, [...(entriesOf.get(entry.item) ?? []), entry]);
    const emptied: SweepItem[] = [];
    const records = await Promise.all(
      [...entriesOf].map(async ([item, entries]) => {
        const { records, undecided } = await read(item);
        if (records.length === 0 && undecided === 0) emptied.push(...entries);
        return records;
      }),
    );
    await ctx.sweeps.drop("outbox", found, emptied);
    return records
      .flat()
      .sort((a, b) => byId(idOf(a), idOf(b)))
      .slice(0, limit);
  };

  const finishedUpTo = new Map<bigint, bigint>();
  const finishedRows: { scope: string; fanOutId: bigint }[] = [];
  let flushTimer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();
  const flush = (): Promise<void> => {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    const deletes: Statement[] = [
      ...[...finishedUpTo].map(([conversationId, upTo]) => ({ query: "DELETE FROM conversation_outbox WHERE conversation_id = ? AND fan_out_id <= ?", params: [conversationId, upTo] })),
      ...finishedRows.map(({ scope, fanOutId }) => ({ query: "DELETE FROM account_outbox WHERE scope = ? AND fan_out_id = ?", params: [scope, fanOutId] })),
    ];
    finishedUpTo.clear();
    finishedRows.length = 0;
    // Flushes run one after another, so a read that waits for the last one sees every finish before it.
    flushing = flushing.catch(() => undefined).then(() => (deletes.length > 0 ? cql.writeAll(deletes) : undefined));
    return flushing;
  };
  ctx.onClose(flush);

  return {
    async pending(limit, scope) {
      await flush();
      if (scope !== undefined) return (await pendingOf(scope, limit)).records;
      return sweep(
        (item) => conversationOfSystemMessagesItem(item) === undefined,
        (item) => pendingOf(item, limit, true),
        (record) => record.fanOutId,
        limit,
      );
    },

    async finish({ fanOutId, scope }) {
      const conversationId = conversationOfScope(scope);
      // A conversation's fan-outs are finished in the order they were recorded (fan-out.ts; a new
      // owner finishes the recorded ones before writing): finishing one finishes every earlier one.
      if (conversationId === undefined) finishedRows.push({ scope, fanOutId });
      else if ((finishedUpTo.get(conversationId) ?? -1n) < fanOutId) finishedUpTo.set(conversationId, fanOutId);
      if (finishedUpTo.size + finishedRows.length >= finishBatch.size) await flush();
      else if (!flushTimer) {
        flushTimer = setTimeout(() => void flush().catch(() => undefined), finishBatch.delayMs);
        flushTimer.unref();
      }
    },

    async pendingSystemMessages(limit) {
      return sweep(
        (item) => conversationOfSystemMessagesItem(item) !== undefined,
        async (item) => ({ records: await systemMessagesOf(conversationOfSystemMessagesItem(item)!), undecided: 0 }),
        (record) => record.systemMessageId,
        limit,
      );
    },

    async isSystemMessagePending(conversationId, systemMessageId) {
      return (await cql.row("SELECT system_message_id FROM conversations WHERE conversation_id = ? AND system_message_id = ?", [conversationId, systemMessageId])) !== undefined;
    },
  };
}
