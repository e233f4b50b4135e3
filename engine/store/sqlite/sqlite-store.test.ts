import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { expect } from "chai";
import { describeStoreConformance } from "../store-conformance.js";
import type { Store } from "../store.js";
import { migrations } from "./migrations.js";
import { openSqliteStore } from "./sqlite-store.js";

describeStoreConformance("sqlite", async () => {
  const dir = mkdtempSync(join(tmpdir(), "parley-store-"));
  let current: Store = await openSqliteStore(dir);
  const others: Store[] = [];
  return {
    store: current,
    async another() {
      const other = await openSqliteStore(dir);
      others.push(other);
      return other;
    },
    async reopen() {
      await current.close();
      current = await openSqliteStore(dir);
      return current;
    },
    async cleanup() {
      for (const other of others) await other.close();
      await current.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe("sqlite store migrations", () => {
  it("records the newest schema version and refuses a database from newer code", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-store-"));
    try {
      await (await openSqliteStore(dir)).close();
      const db = new Database(join(dir, "parley.db"));
      expect(db.pragma("user_version", { simple: true })).to.equal(migrations[migrations.length - 1].version);
      expect(db.pragma("journal_mode", { simple: true })).to.equal("wal");
      db.pragma(`user_version = ${migrations[migrations.length - 1].version + 1}`);
      db.close();
      let refused: unknown;
      await openSqliteStore(dir).catch((err: unknown) => (refused = err));
      expect(String(refused)).to.match(/newer than this build/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
