// What the storage port promises of its update streams, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describeUpdates(t: StoreSuite): void {
  describe("update log", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });
    const { expectRejected } = t;

    const event = (eventId: bigint, byte = Number(eventId % 200n)) => ({ eventId, entry: new Uint8Array([byte, 1, 2]) });
    /** A write of the given events to the given (user, sn, event) positions. */
    const write = (events: { eventId: bigint; entry: Uint8Array }[], entries: [number, number, bigint][], handoffs?: Parameters<Store["updates"]["append"]>[0]["handoffs"]) =>
      store.updates.append({ events, entries: entries.map(([userId, sn, eventId]) => ({ userId, sn, eventId })), handoffs, createdAt: 10 });
    const stream = async (userId: number, afterSn = 0, limit = 100) => (await store.updates.readUpdates(userId, afterSn, limit)).map((row) => [row.sn, [...row.entry]]);

    it("answers 0 and nothing for a user without entries", async () => {
      expect(await store.updates.latestSn(7)).to.equal(0);
      expect(await store.updates.latestSns([7, 8])).to.deep.equal(new Map([[7, 0], [8, 0]]));
      expect(await store.updates.latestSns([])).to.deep.equal(new Map());
      expect(await store.updates.oldestRetainedSn(7)).to.equal(undefined);
      expect(await store.updates.readUpdates(7, 0, 10)).to.deep.equal([]);
    });

    it("stores an event once for many streams, reads each stream in order with a limit, and prunes", async () => {
      expect(await write([event(1n), event(2n)], [[7, 1, 1n], [8, 1, 1n], [7, 2, 2n], [9, 5, 2n]])).to.deep.equal({ ok: true });
      expect(await write([event(3n), event(4n)], [[7, 3, 3n], [7, 4, 4n]])).to.deep.equal({ ok: true });
      expect(await store.updates.latestSn(7)).to.equal(4);
      expect(await store.updates.latestSns([7, 8, 9, 10])).to.deep.equal(new Map([[7, 4], [8, 1], [9, 5], [10, 0]]));
      expect(await stream(7)).to.deep.equal([[1, [1, 1, 2]], [2, [2, 1, 2]], [3, [3, 1, 2]], [4, [4, 1, 2]]]);
      expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
      expect(await stream(7, 1, 2)).to.deep.equal([[2, [2, 1, 2]], [3, [3, 1, 2]]]);
      expect(await store.updates.readUpdates(7, 4, 10)).to.deep.equal([]);
      await store.updates.pruneUpdates(7, 2);
      expect(await store.updates.oldestRetainedSn(7)).to.equal(3);
      // The other streams still read the events user 7 no longer holds.
      expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
      expect(await stream(9)).to.deep.equal([[5, [2, 1, 2]]]);
    });

    it("references an event stored before again without rewriting it", async () => {
      await write([event(1n)], [[7, 1, 1n]]);
      expect(await write([event(1n)], [[8, 1, 1n]])).to.deep.equal({ ok: true });
      await store.updates.pruneUpdates(7, 1);
      expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
    });

    it("forgets an event once no stream holds it: its id may then hold another entry", async () => {
      await write([event(1n, 50)], [[7, 1, 1n], [8, 1, 1n]]);
      await expectRejected(write([event(1n, 60)], [[9, 1, 1n]]));
      expect(await store.updates.latestSn(9)).to.equal(0);
      await store.updates.pruneUpdates(7, 1);
      await expectRejected(write([event(1n, 60)], [[9, 1, 1n]]));
      await store.updates.pruneUpdates(8, 1);
      expect(await write([event(1n, 60)], [[9, 1, 1n]])).to.deep.equal({ ok: true });
      expect(await stream(9)).to.deep.equal([[1, [60, 1, 2]]]);
    });

    it("refuses a taken sn, naming the users whose sn was taken, and writes nothing of that write", async () => {
      await write([event(1n), event(3n)], [[7, 1, 1n], [7, 2, 3n]]);
      expect(await write([event(2n), event(4n)], [[8, 1, 2n], [7, 3, 2n], [7, 2, 4n]])).to.deep.equal({ ok: false, conflicts: [7] });
      expect(await store.updates.latestSn(7)).to.equal(2);
      expect(await store.updates.latestSn(8)).to.equal(0);
      // The event was not kept either: its id is free for any entry.
      expect(await write([event(2n, 99)], [[8, 1, 2n]])).to.deep.equal({ ok: true });
      expect(await stream(8)).to.deep.equal([[1, [99, 1, 2]]]);
    });

    it("refuses a write that gives one sn twice, writing none of it", async () => {
      expect(await write([event(1n), event(2n)], [[7, 1, 1n], [7, 2, 2n], [7, 2, 2n]])).to.deep.equal({ ok: false, conflicts: [7] });
      expect(await store.updates.latestSn(7)).to.equal(0);
      expect(await write([event(1n)], [[7, 1, 1n]])).to.deep.equal({ ok: true });
    });

    it("refuses an event a stream already holds, or is given twice, naming the user, and writes nothing of that write", async () => {
      expect(await write([event(1n)], [[7, 1, 1n]])).to.deep.equal({ ok: true });
      expect(await write([event(1n), event(2n)], [[8, 1, 1n], [7, 2, 2n], [7, 3, 1n]])).to.deep.equal({ ok: false, conflicts: [7] });
      expect(await write([event(2n)], [[8, 1, 2n], [8, 2, 2n]])).to.deep.equal({ ok: false, conflicts: [8] });
      expect(await store.updates.latestSns([7, 8])).to.deep.equal(new Map([[7, 1], [8, 0]]));
      expect(await write([event(1n), event(2n)], [[8, 1, 1n], [7, 2, 2n]])).to.deep.equal({ ok: true });
      expect(await stream(7)).to.deep.equal([[1, [1, 1, 2]], [2, [2, 1, 2]]]);
      // Held means retained: once pruned, the entry is no longer there to repeat.
      await store.updates.pruneUpdates(7, 1);
      expect(await write([event(1n)], [[7, 3, 1n]])).to.deep.equal({ ok: true });
    });

    it("tells which streams hold an event, however far back among their retained entries", async () => {
      await write([event(41n)], [[7, 1, 41n], [8, 1, 41n]]);
      expect((await store.updates.holders(41n, [7, 8, 9])).sort()).to.deep.equal([7, 8]);
      expect(await store.updates.holders(42n, [7, 8])).to.deep.equal([]);
      expect(await store.updates.holders(41n, [])).to.deep.equal([]);
      for (let sn = 2; sn <= 300; sn++) await write([event(BigInt(1000 + sn))], [[7, sn, BigInt(1000 + sn)]]);
      expect(await store.updates.holders(41n, [7])).to.deep.equal([7]);
      await store.updates.pruneUpdates(8, 1);
      expect(await store.updates.holders(41n, [7, 8])).to.deep.equal([7]);
    });
  });
}
