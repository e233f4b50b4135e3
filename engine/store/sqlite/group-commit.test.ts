import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { expect } from "chai";
import { GroupCommit } from "./group-commit.js";
import { beginTransactionsImmediately } from "./sqlite-store.js";

describe("SQLite group commit", () => {
  let dir: string;
  let db: Database.Database;
  let reader: Database.Database;
  let commits: GroupCommit;
  let insert: (id: number, text: string) => Promise<number>;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "parley-group-commit-"));
    db = new Database(join(dir, "t.db"));
    db.pragma("journal_mode = WAL");
    beginTransactionsImmediately(db);
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT NOT NULL CHECK (text <> 'refused'))");
    reader = new Database(join(dir, "t.db"), { readonly: true });
    commits = new GroupCommit(db);
    const row = db.prepare("INSERT INTO t (id, text) VALUES (?, ?)");
    const second = db.prepare("INSERT INTO t (id, text) VALUES (? + 1000, ?)");
    insert = commits.transaction((id: number, text: string) => {
      row.run(id, text);
      // A second statement: a write refused after it must leave neither standing.
      second.run(id, text);
      return id;
    });
  });
  afterEach(() => {
    reader.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const stored = () => (reader.prepare("SELECT id FROM t ORDER BY id").all() as { id: number }[]).map((row) => row.id);

  /** Transactions committed to the write-ahead log: frames whose header names the database's size after a commit. */
  function commitsInLog(): number {
    const log = readFileSync(join(dir, "t.db-wal"));
    const frameBytes = 24 + log.readUInt32BE(8);
    let commits = 0;
    for (let at = 32; at + frameBytes <= log.length; at += frameBytes) if (log.readUInt32BE(at + 4) !== 0) commits += 1;
    return commits;
  }

  it("commits the writes of one turn together, once: none is visible or answered before the commit", async () => {
    const before = commitsInLog();
    const answered: number[] = [];
    const writes = [1, 2, 3].map((id) => insert(id, `row ${id}`).then((value) => answered.push(value)));
    expect([stored(), answered]).to.deep.equal([[], []]);
    await Promise.all(writes);
    expect(answered).to.deep.equal([1, 2, 3]);
    expect(stored()).to.deep.equal([1, 2, 3, 1001, 1002, 1003]);
    expect(commitsInLog() - before).to.equal(1);
    await insert(4, "next turn");
    expect(commitsInLog() - before).to.equal(2);
  });

  it("fails a refused write alone, rolling back all of it, and commits the others", async () => {
    const outcomes = await Promise.all(
      [insert(1, "kept"), insert(2, "refused"), insert(1, "same id"), insert(3, "kept")].map((write) =>
        write.then(
          () => "ok",
          (err: { code?: string }) => err.code,
        ),
      ),
    );
    expect(outcomes).to.deep.equal(["ok", "SQLITE_CONSTRAINT_CHECK", "SQLITE_CONSTRAINT_PRIMARYKEY", "ok"]);
    expect(stored()).to.deep.equal([1, 3, 1001, 1003]);
  });

  it("fails every write of the group when the commit itself fails, storing none", async () => {
    // Another connection holding the write lock: the group's BEGIN IMMEDIATE cannot start.
    const other = new Database(join(dir, "t.db"));
    other.pragma("busy_timeout = 0");
    db.pragma("busy_timeout = 0");
    other.exec("BEGIN IMMEDIATE");
    try {
      const outcomes = await Promise.all([insert(1, "a"), insert(2, "b")].map((write) => write.then(() => "ok", (err: { code?: string }) => err.code)));
      expect(outcomes).to.deep.equal(["SQLITE_BUSY", "SQLITE_BUSY"]);
    } finally {
      other.exec("ROLLBACK");
      other.close();
    }
    expect(stored()).to.deep.equal([]);
    expect(await insert(4, "after")).to.equal(4);
  });

  it("commits what is queued at once when asked (the store's close)", async () => {
    const write = insert(7, "queued");
    commits.commit();
    expect(stored()).to.deep.equal([7, 1007]);
    expect(await write).to.equal(7);
  });
});
