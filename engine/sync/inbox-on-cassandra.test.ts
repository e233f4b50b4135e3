// The inbox's promise that a stream takes a fan-out once, on the cluster's store: two engines,
// each with its own handle on one keyspace, finish one fan-out across a lease move (the race is
// told in test/support/fan-out-races.ts; engine/sync/inbox.test.ts runs it on SQLite).
import { expect } from "chai";
import { AdjustableClock } from "../../shared/clock.js";
import type { EngineDeps } from "../deps.js";
import { Inbox } from "./inbox.js";
import type { Ownership } from "../ownership.js";
import type { Store } from "../../ports/store/store.js";
import type { CassandraStore } from "../../ports/store/cassandra/cassandra-store.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../test/support/cassandra.js";
import { finishAcrossLeaseMove, nicknamesIn } from "../../test/support/fan-out-races.js";

before(cassandraStarts);

describe("Inbox actor on Cassandra", () => {
  const handles: CassandraStore[] = [];
  afterEach(async () => {
    for (const handle of handles.splice(0)) await handle.close();
  });

  it("takes a recorded fan-out into each stream once when two engines finish it across a lease move: the old owner's write lands between the new owner's read of the holders and its write", async () => {
    const old = await openTestCassandraStore(adapterTestKeyspace, { fresh: true });
    handles.push(old);
    const next = await openTestCassandraStore(adapterTestKeyspace, { fresh: false });
    handles.push(next);
    const clock = new AdjustableClock();
    // The inbox uses only these of an engine's parts.
    const inboxOf = (store: Store, ownership: Ownership) => new Inbox({ store, clock, ownership } as Partial<EngineDeps> as EngineDeps, () => {});
    const { recovered, late } = await finishAcrossLeaseMove({ stores: { old, new: next }, clock, inboxOf, recipients: [10073, 10074] });
    expect(recovered).to.deep.equal([]);
    expect(late).to.deep.equal([]);
    for (const userId of [10073, 10074]) {
      expect(await nicknamesIn(old, userId)).to.deep.equal([
        [1, "before"],
        [2, "recovered"],
      ]);
    }
  });
});
