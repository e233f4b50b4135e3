// Events of a change that an LWT in another partition decides (DATA-MODEL.md §1.6 P4): they are
// recorded before the LWT as tentative account_outbox rows naming a guard, so a change is never
// durable without its events; the LWT's outcome then confirms them (or deletes them), so events never
// report a change that did not happen. A process that dies in between leaves tentative rows: the
// outbox reader skips rows with `tentative = true` and, once one is older than
// `tentativeSettleAfterMs` (by WRITETIME(tentative)), hands it to its guard's owner (`settleTentative`
// of contacts.ts for friend requests, `settleAgentChange` of agents.ts for agent changes), which
// confirms or deletes it.
import type { EventsOf, FanOutRecord } from "../store.js";
import type { Cql, Statement } from "./cql.js";
import { conversationOfScope, fanOutStatements, outboxStatements } from "./outbox-rows.js";

/** Older than this, no LWT of the guard's change can still be running (driver and CAS timeouts are far shorter). */
export const tentativeSettleAfterMs = 60_000;

/** The events a decided change records: tentatively for the outcome it expects, then settled by the real one. */
export interface TentativeEvents<Result> {
  /** Statements recording the events expected for the success outcome, tentative under the guard. */
  tentative: Statement[];
  /** Statements making the tentative events final (the change happened), for the change's own batch. */
  confirm(): Statement[];
  /** Statements deleting the tentative events and recording what `events` says of the real outcome. */
  refuse(outcome: Result): Promise<Statement[]>;
}

/**
 * Prepares the tentative events `events` gives for `expected`. Only account-scope fan-outs can wait
 * tentatively (conversation fan-outs and system messages belong to a conversation's owner): any
 * other record is refused here, before anything is written.
 */
export async function tentativeEvents<Result>(cql: Cql, expected: Result, events: EventsOf<Result> | undefined, guard: string): Promise<TentativeEvents<Result>> {
  const records = events ? events(expected) : [];
  const fanOuts = records.map((record) => {
    if (!("fanOutId" in record) || conversationOfScope(record.scope) !== undefined) {
      throw new Error("the events of a change decided by a lightweight transaction must be account-scope fan-outs");
    }
    return record;
  });
  // Checks repeated ids (refusing the change); the statements themselves are written tentatively below.
  await outboxStatements(cql, fanOuts);
  return {
    tentative: fanOuts.flatMap((record) => tentativeStatements(record, guard)),
    confirm: () => fanOuts.map(confirmStatement),
    async refuse(outcome) {
      return [...fanOuts.map(discardStatement), ...(await outboxStatements(cql, events ? events(outcome) : []))];
    },
  };
}

function tentativeStatements(record: FanOutRecord, guard: string): Statement[] {
  const [index, row] = fanOutStatements(record);
  return [
    index,
    {
      query: "INSERT INTO account_outbox (scope, fan_out_id, recipients, entry, related, created_at, tentative, guard) VALUES (?, ?, ?, ?, ?, ?, true, ?)",
      params: [...row.params, guard],
    },
  ];
}

/** Makes a tentative fan-out an ordinary one. */
export function confirmStatement(record: Pick<FanOutRecord, "scope" | "fanOutId">): Statement {
  return { query: "UPDATE account_outbox SET tentative = false, guard = null WHERE scope = ? AND fan_out_id = ?", params: [record.scope, record.fanOutId] };
}

/** Deletes a tentative fan-out whose change did not happen. */
export function discardStatement(record: Pick<FanOutRecord, "scope" | "fanOutId">): Statement {
  return { query: "DELETE FROM account_outbox WHERE scope = ? AND fan_out_id = ?", params: [record.scope, record.fanOutId] };
}
