// The update log in SQLite: `update_events` keeps each event's entry once, with the number of
// stream entries that hold it; `updates` is one small row per (user, sn) naming the event. Pruning
// a user's entries counts their events down and deletes those no stream holds any more.
//
// A stream holds an event at most once, checked in the append's own transaction (as the primary
// key refuses a taken sn), so whatever an engine believed about the holders when it wrote, a
// repeat cannot land twice. The event's `refs` says whether any stream holds it: an event no entry
// references yet (every first delivery) needs no check; one that is held has each user of the
// write looked up in the user's own stream. A unique index on (user_id, event_id) did the same
// for every entry and doubled the cost of an append's inserts (schema version 13, dropped in 14).
import type Database from "better-sqlite3";
import type { AppendOutcome, UpdateAppend, UpdateStreamStore } from "../store.js";
import type { FenceCheck } from "./leases.js";
import type { AgentDeliveryWriters } from "./webhook-jobs.js";

/** Thrown inside the append's transaction to roll it back when an sn was taken or the event is already held. */
class SnTaken extends Error {
  constructor(readonly conflicts: number[]) {
    super("sn taken");
  }
}

export function updateLogStore(db: Database.Database, agentDelivery: AgentDeliveryWriters, requireFence: FenceCheck): UpdateStreamStore {
  const latest = db.prepare<[number], { sn: number | null }>("SELECT MAX(sn) AS sn FROM updates WHERE user_id = ?");
  // A correlated MAX per user uses the key's last entry; MAX ... GROUP BY would walk every row.
  const latestOf = db.prepare<[string], { user_id: number; sn: number | null }>(
    "SELECT value AS user_id, (SELECT MAX(sn) FROM updates WHERE user_id = value) AS sn FROM json_each(?)",
  );
  const oldest = db.prepare<[number], { sn: number | null }>("SELECT MIN(sn) AS sn FROM updates WHERE user_id = ?");
  const read = db.prepare<[number, number, number], { sn: number; entry: Buffer }>(
    "SELECT u.sn, e.entry FROM updates u JOIN update_events e ON e.event_id = u.event_id WHERE u.user_id = ? AND u.sn > ? ORDER BY u.sn LIMIT ?",
  );
  // A repeat referencing the same event adds to its count; the same id with other bytes changes nothing (and is refused below).
  const insertEvent = db.prepare(
    `INSERT INTO update_events (event_id, entry, refs, created_at) VALUES (?, ?, ?, ?)
     ON CONFLICT (event_id) DO UPDATE SET refs = refs + excluded.refs WHERE entry = excluded.entry`,
  );
  // Refused (nothing inserted) when the sn is taken.
  const insertEntry = db.prepare("INSERT INTO updates (user_id, sn, event_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING");
  const refsOf = db.prepare<[bigint], { refs: number }>("SELECT refs FROM update_events WHERE event_id = ?");
  // A walk of the user's stream (at most its retained entries): only for an event some stream holds.
  const holds = db.prepare<[number, bigint], { held: number }>("SELECT 1 AS held FROM updates WHERE user_id = ? AND event_id = ? LIMIT 1");
  const holding = db.prepare<[string, bigint], { user_id: number }>(
    "SELECT value AS user_id FROM json_each(?) WHERE EXISTS (SELECT 1 FROM updates WHERE user_id = value AND event_id = ?)",
  );
  const countDown = db.prepare(
    `UPDATE update_events SET refs = refs - pruned.n
     FROM (SELECT event_id, COUNT(*) AS n FROM updates WHERE user_id = ? AND sn <= ? GROUP BY event_id) AS pruned
     WHERE update_events.event_id = pruned.event_id`,
  );
  const dropUnheld = db.prepare("DELETE FROM update_events WHERE refs <= 0 AND event_id IN (SELECT event_id FROM updates WHERE user_id = ? AND sn <= ?)");
  const prune = db.prepare("DELETE FROM updates WHERE user_id = ? AND sn <= ?");

  const appendAll = db.transaction((write: UpdateAppend) => {
    for (const fence of write.fences ?? []) requireFence(fence);
    const held = new Map<bigint, number>();
    for (const entry of write.entries) held.set(entry.eventId, (held.get(entry.eventId) ?? 0) + 1);
    const conflicts = new Set<number>();
    // Before the events' counts move: which of them some stream holds already.
    const heldBefore = new Set([...held.keys()].filter((eventId) => (refsOf.get(eventId)?.refs ?? 0) > 0));
    const given = new Set<string>();
    for (const { userId, eventId } of write.entries) {
      const pair = `${userId}:${eventId}`;
      if (given.has(pair) || (heldBefore.has(eventId) && holds.get(userId, eventId))) conflicts.add(userId);
      given.add(pair);
    }
    if (conflicts.size > 0) throw new SnTaken([...conflicts]);
    for (const event of write.events) {
      const refs = held.get(event.eventId);
      // An event no entry references is not stored; one listed twice is stored once.
      if (refs === undefined) continue;
      held.delete(event.eventId);
      if (insertEvent.run(event.eventId, Buffer.from(event.entry), refs, write.createdAt).changes === 0) {
        throw new Error(`event id ${event.eventId} is already stored with another entry`);
      }
    }
    for (const entry of write.entries) {
      if (insertEntry.run(entry.userId, entry.sn, entry.eventId).changes === 0) conflicts.add(entry.userId);
    }
    if (conflicts.size > 0) throw new SnTaken([...conflicts]);
    for (const handoff of write.handoffs ?? []) {
      for (const body of handoff.bodies) agentDelivery.enqueue(handoff.agentUserId, body, handoff.queuedAt);
      agentDelivery.advanceDelivered(handoff.agentUserId, handoff.deliveredSn);
    }
  });
  const pruneAll = db.transaction((userId: number, upToSn: number) => {
    countDown.run(userId, upToSn);
    dropUnheld.run(userId, upToSn);
    prune.run(userId, upToSn);
  });

  return {
    async latestSn(userId) {
      return latest.get(userId)?.sn ?? 0;
    },
    async latestSns(userIds) {
      const found = new Map<number, number>();
      if (userIds.length === 0) return found;
      for (const row of latestOf.all(JSON.stringify(userIds))) found.set(row.user_id, row.sn ?? 0);
      return found;
    },
    async oldestRetainedSn(userId) {
      return oldest.get(userId)?.sn ?? undefined;
    },
    async append(write): Promise<AppendOutcome> {
      try {
        appendAll(write);
        return { ok: true };
      } catch (err) {
        if (err instanceof SnTaken) return { ok: false, conflicts: err.conflicts };
        throw err;
      }
    },
    async holders(eventId, userIds) {
      if (userIds.length === 0 || (refsOf.get(eventId)?.refs ?? 0) === 0) return [];
      return holding.all(JSON.stringify(userIds), eventId).map((row) => row.user_id);
    },
    async readUpdates(userId, afterSn, limit) {
      return read.all(userId, afterSn, limit).map((row) => ({ sn: row.sn, entry: new Uint8Array(row.entry) }));
    },
    async pruneUpdates(userId, upToSn) {
      pruneAll(userId, upToSn);
    },
  };
}
