import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { expect } from "chai";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { SnUpdateSchema } from "../../../shared/gen/shared/v1/updates_pb.js";
import { snUpdateOf } from "../../../engine/delivery/stream-entry.js";
import { describeStoreConformance } from "../conformance/store-conformance.js";
import type { Store } from "../store.js";
import { migrate, migrations } from "./migrations.js";
import { beginTransactionsImmediately, openSqliteStore } from "./sqlite-store.js";

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

describe("sqlite transactions on a file other connections write (engine processes sharing it)", () => {
  it("take the write lock as they begin: no other connection commits between a transaction's read and its write", () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-store-"));
    const [mine, another] = [new Database(join(dir, "shared.db")), new Database(join(dir, "shared.db"))];
    try {
      mine.pragma("journal_mode = WAL");
      another.pragma("busy_timeout = 0");
      mine.exec("CREATE TABLE counter (n INTEGER NOT NULL)");
      mine.exec("INSERT INTO counter VALUES (1)");
      beginTransactionsImmediately(mine);
      const next = mine.transaction(() => {
        const { n } = mine.prepare<[], { n: number }>("SELECT max(n) AS n FROM counter").get()!;
        // Begun deferred, the other's write would commit here and this one's fail (SQLITE_BUSY_SNAPSHOT).
        expect(() => another.prepare("INSERT INTO counter VALUES (100)").run()).to.throw(/database is locked/);
        mine.prepare("INSERT INTO counter VALUES (?)").run(n + 1);
      });
      next();
      expect(mine.prepare("SELECT n FROM counter ORDER BY n").pluck().all()).to.deep.equal([1, 2]);
    } finally {
      another.close();
      mine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite update log migration (version 10: events stored once)", () => {
  const profile = (sn: number, nickname: string) =>
    Buffer.from(toBinary(SnUpdateSchema, create(SnUpdateSchema, { sn, update: { case: "userProfileUpdated", value: { userId: 1, newNickname: nickname } } })));

  it("keeps every entry written before it readable, a fan-out's entries as one event, and goes on from there", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-store-"));
    try {
      const db = new Database(join(dir, "parley.db"));
      migrate(db, 9);
      const insert = db.prepare("INSERT INTO updates (user_id, sn, payload, created_at, fan_out_id) VALUES (?, ?, ?, ?, ?)");
      // One fan-out reached two streams (each row carrying its own sn); another entry came from no fan-out.
      insert.run(10001, 1, profile(1, "shared"), 5, 500n);
      insert.run(10002, 4, profile(4, "shared"), 5, 500n);
      insert.run(10001, 2, profile(2, "own"), 6, null);
      db.close();
      const store = await openSqliteStore(dir);
      try {
        const read = async (userId: number) => (await store.updates.readUpdates(userId, 0, 10)).map(snUpdateOf).map((u) => [u.sn, u.update.case === "userProfileUpdated" && u.update.value.newNickname]);
        expect(await read(10001)).to.deep.equal([
          [1, "shared"],
          [2, "own"],
        ]);
        expect(await read(10002)).to.deep.equal([[4, "shared"]]);
        // Entries are kept without sn: the stream's sn is the one read.
        expect((await store.updates.readUpdates(10002, 0, 10)).map((row) => fromBinary(SnUpdateSchema, row.entry).sn)).to.deep.equal([0]);
        expect(await store.updates.latestSns([10001, 10002])).to.deep.equal(new Map([[10001, 2], [10002, 4]]));
        // A fan-out recorded before the upgrade and delivered again after it is still recognised.
        expect((await store.updates.holders(500n, [10001, 10002, 10003])).sort()).to.deep.equal([10001, 10002]);
        expect(await store.updates.append({ events: [{ eventId: 501n, entry: profile(0, "next") }], entries: [{ userId: 10001, sn: 3, eventId: 501n }], createdAt: 7 })).to.deep.equal({ ok: true });
        expect(await read(10001)).to.deep.equal([
          [1, "shared"],
          [2, "own"],
          [3, "next"],
        ]);
        // The migrated event is held by both streams until both pruned it.
        await store.updates.pruneUpdates(10001, 2);
        expect(await read(10002)).to.deep.equal([[4, "shared"]]);
        await store.updates.pruneUpdates(10002, 4);
        expect(await store.updates.append({ events: [{ eventId: 500n, entry: profile(0, "reused") }], entries: [{ userId: 10003, sn: 1, eventId: 500n }], createdAt: 8 })).to.deep.equal({ ok: true });
        expect(await read(10003)).to.deep.equal([[1, "reused"]]);
      } finally {
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite update log migration (version 13: a stream holds an event once)", () => {
  const profile = (nickname: string) => Buffer.from(toBinary(SnUpdateSchema, create(SnUpdateSchema, { update: { case: "userProfileUpdated", value: { userId: 1, newNickname: nickname } } })));

  it("keeps a stream that took a fan-out twice readable as it was, and refuses a third", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-store-"));
    try {
      const db = new Database(join(dir, "parley.db"));
      migrate(db, 12);
      // As the double append left it: fan-out 700 at sn 1 and 3 of one stream, once in another.
      db.prepare("INSERT INTO update_events (event_id, entry, refs, created_at) VALUES (?, ?, ?, ?)").run(700n, profile("twice"), 3, 5);
      db.prepare("INSERT INTO update_events (event_id, entry, refs, created_at) VALUES (?, ?, ?, ?)").run(701n, profile("between"), 1, 5);
      const entry = db.prepare("INSERT INTO updates (user_id, sn, event_id) VALUES (?, ?, ?)");
      entry.run(10001, 1, 700n);
      entry.run(10001, 2, 701n);
      entry.run(10001, 3, 700n);
      entry.run(10002, 1, 700n);
      db.close();
      const store = await openSqliteStore(dir);
      try {
        const read = async (userId: number) => (await store.updates.readUpdates(userId, 0, 10)).map(snUpdateOf).map((u) => [u.sn, u.update.case === "userProfileUpdated" && u.update.value.newNickname]);
        expect(await read(10001)).to.deep.equal([
          [1, "twice"],
          [2, "between"],
          [3, "twice"],
        ]);
        expect((await store.updates.holders(700n, [10001, 10002])).sort()).to.deep.equal([10001, 10002]);
        expect(await store.updates.append({ events: [{ eventId: 700n, entry: profile("twice") }], entries: [{ userId: 10001, sn: 4, eventId: 700n }], createdAt: 7 })).to.deep.equal({
          ok: false,
          conflicts: [10001],
        });
        // The moved entry's event goes with it when pruned; the fan-out stays while another stream holds it.
        await store.updates.pruneUpdates(10001, 3);
        expect(await read(10002)).to.deep.equal([[1, "twice"]]);
      } finally {
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
