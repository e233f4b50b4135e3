// Writes asked for in one turn of the event loop commit together: one BEGIN and one COMMIT, and a
// page several of them touch goes to the write-ahead log once. A commit of its own was most of a
// message's store time (a log frame per page it touched), and a busy server receives many
// messages of many conversations in one turn. Each write runs in a savepoint of its own, so one
// that is refused (a taken id, a fence another node took) is rolled back and fails alone; a
// failure of the whole (the commit, the disk) fails every write of the group. No write's promise
// settles before its group committed.
import type Database from "better-sqlite3";

interface QueuedWrite {
  run(): unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; err: unknown };

export class GroupCommit {
  private queued: QueuedWrite[] = [];
  private scheduled: NodeJS.Immediate | undefined;
  private readonly commitAll: (writes: QueuedWrite[]) => Outcome[];

  constructor(private readonly db: Database.Database) {
    this.commitAll = db.transaction((writes: QueuedWrite[]) =>
      writes.map((write): Outcome => {
        try {
          return { ok: true, value: write.run() };
        } catch (err) {
          // A failure that ended the transaction itself (SQLite rolls back on some I/O errors)
          // cannot leave the writes before it standing: the whole group fails.
          if (!db.inTransaction) throw err;
          return { ok: false, err };
        }
      }),
    );
  }

  /** Like `db.transaction(fn)`, but a call answers a promise that settles once its group committed. */
  transaction<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => Promise<R> {
    const inSavepoint = this.db.transaction(fn);
    return (...args: A) =>
      new Promise<R>((resolve, reject) => {
        this.queued.push({ run: () => inSavepoint(...args), resolve: resolve as (value: unknown) => void, reject });
        this.scheduled ??= setImmediate(() => this.commit());
      });
  }

  /** Commits the writes queued so far (at once: the store calls it before closing). */
  commit(): void {
    clearImmediate(this.scheduled);
    this.scheduled = undefined;
    const writes = this.queued;
    if (writes.length === 0) return;
    this.queued = [];
    let outcomes: Outcome[];
    try {
      outcomes = this.commitAll(writes);
    } catch (err) {
      for (const write of writes) write.reject(err);
      return;
    }
    outcomes.forEach((outcome, index) => (outcome.ok ? writes[index].resolve(outcome.value) : writes[index].reject(outcome.err)));
  }
}
