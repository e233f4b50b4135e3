// Times every statement and transaction the SQLite store runs, for /metrics
// (parley_store_query_duration_seconds{store="sqlite"} and its error counter). The store's
// modules prepare their statements and transactions through the connection once, at open; the
// connection hands them out already timed, so none of them changes. A statement's kind (read or
// write) is fixed when it is prepared, so timing one costs two clock readings and a few additions.
import type Database from "better-sqlite3";
import { storeQueryMeasure, type StoreQueryMeasure } from "../../../shared/metrics.js";

/** A constraint violation is how the store learns a name or id is taken: an answer, not a failure. */
const isConstraintViolation = (err: unknown) => String((err as { code?: unknown } | null)?.code ?? "").startsWith("SQLITE_CONSTRAINT");

type AnyFunction = (...args: never[]) => unknown;

function timed<F extends AnyFunction>(run: F, measure: StoreQueryMeasure): F {
  return function (this: unknown, ...args: Parameters<F>) {
    const startedAt = performance.now();
    try {
      return run.apply(this, args);
    } catch (err) {
      if (!isConstraintViolation(err)) measure.errors.inc();
      throw err;
    } finally {
      measure.time.observeSince(startedAt);
    }
  } as F;
}

/** Makes the connection hand out timed statements and transactions from now on. */
export function measureQueries(db: Database.Database): void {
  const reads = storeQueryMeasure("sqlite", "read");
  const writes = storeQueryMeasure("sqlite", "write");
  const transactions = storeQueryMeasure("sqlite", "transaction");
  const prepare = db.prepare.bind(db);
  db.prepare = ((source: string) => {
    const statement = prepare(source);
    const measure = statement.reader ? reads : writes;
    // Own properties in front of the prototype's methods; safeIntegers() and the like answer the same object.
    statement.run = timed(statement.run, measure);
    statement.get = timed(statement.get, measure);
    statement.all = timed(statement.all, measure);
    return statement;
  }) as Database.Database["prepare"];
  const transaction = db.transaction.bind(db);
  db.transaction = (<F extends (...args: never[]) => unknown>(fn: F) => {
    const made = transaction(fn);
    return Object.assign(timed(made, transactions), {
      default: timed(made.default, transactions),
      deferred: timed(made.deferred, transactions),
      immediate: timed(made.immediate, transactions),
      exclusive: timed(made.exclusive, transactions),
    });
  }) as Database.Database["transaction"];
}
