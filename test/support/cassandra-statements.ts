// Counts the statements this process sends to Cassandra, by text, as the driver is given them: a
// conditional one (the store marks them not idempotent) is a Paxos round. Every client of the
// process is counted while a tally runs (the servers of the tests run in the test's process).
import cassandra from "cassandra-driver";

export interface StatementTally {
  /** Each statement's count by its text (whitespace folded; a batch is one entry naming its statements). */
  readonly counts: Map<string, { conditional: boolean; count: number }>;
  /** Statements sent whose text starts with `prefix`, those inside batches included. */
  statementsStarting(prefix: string): number;
  /** Paxos rounds counted, leaving out the statements `skip` names. */
  paxosRounds(skip?: (text: string) => boolean): number;
  clear(): void;
  /** Stops counting (the driver is as it was). */
  stop(): void;
}

const textOf = (statement: string | { query: string }) => (typeof statement === "string" ? statement : statement.query).replace(/\s+/g, " ").trim();

export function tallyCassandraStatements(): StatementTally {
  const counts = new Map<string, { conditional: boolean; count: number }>();
  /** Every statement by its text, a batch's one by one. */
  const statements = new Map<string, number>();
  const noteStatement = (text: string) => statements.set(text, (statements.get(text) ?? 0) + 1);
  const note = (text: string, conditional: boolean) => {
    const counted = counts.get(text) ?? { conditional, count: 0 };
    counted.count++;
    counts.set(text, counted);
  };
  const prototype = cassandra.Client.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
  const originals = { execute: prototype.execute, batch: prototype.batch };
  prototype.execute = function (this: unknown, ...args: unknown[]) {
    note(textOf(args[0] as string), (args[2] as { isIdempotent?: boolean } | undefined)?.isIdempotent === false);
    noteStatement(textOf(args[0] as string));
    return originals.execute.apply(this, args);
  };
  prototype.batch = function (this: unknown, ...args: unknown[]) {
    const batched = args[0] as (string | { query: string })[];
    const kinds = [...new Set(batched.map((statement) => textOf(statement).slice(0, 60)))].join(" + ");
    note(`BATCH of ${batched.length}: ${kinds}`, (args[1] as { isIdempotent?: boolean } | undefined)?.isIdempotent === false);
    for (const statement of batched) noteStatement(textOf(statement));
    return originals.batch.apply(this, args);
  };
  return {
    counts,
    paxosRounds(skip = () => false) {
      let rounds = 0;
      for (const [text, { conditional, count }] of counts) if (conditional && !skip(text)) rounds += count;
      return rounds;
    },
    statementsStarting(prefix) {
      let found = 0;
      for (const [text, count] of statements) if (text.startsWith(prefix)) found += count;
      return found;
    },
    clear() {
      counts.clear();
      statements.clear();
    },
    stop() {
      prototype.execute = originals.execute;
      prototype.batch = originals.batch;
    },
  };
}
