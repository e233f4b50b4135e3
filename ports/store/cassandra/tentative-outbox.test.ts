import { expect } from "chai";
import { afterEach, before, beforeEach, describe, it } from "mocha";
import { FriendRequestStatus } from "../store.js";
import type { CassandraStore } from "./cassandra-store.js";
import { settleTentative } from "./contacts.js";
import { tentativeEvents } from "./tentative-outbox.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;

before(cassandraStarts);

describe("cassandra store: tentative events of a friend request's resolution", () => {
  let store: CassandraStore;
  beforeEach(async () => (store = await openTestCassandraStore(keyspace, { fresh: true })));
  afterEach(async () => store.close());

  const fanOut = (fanOutId: bigint) => ({ fanOutId, scope: "user:8", recipients: [8, 9], entry: new Uint8Array([1]), related: "{}", createdAt: 1 });
  const outboxRow = (fanOutId: bigint) => store.cql.row("SELECT tentative, guard FROM account_outbox WHERE scope = 'user:8' AND fan_out_id = ?", [fanOutId]);

  it("settles the events of a resolver that died after its LWT: its connection is rolled forward and its events confirmed", async () => {
    const request = await store.contacts.createFriendRequest(8, 9, "", 1);
    const guard = `friend_request:${request.requestId}:tok`;
    // What resolveFriendRequest writes before dying: the tentative events, then its LWT.
    const decided = await tentativeEvents(store.cql, true, () => [fanOut(1n)], guard);
    await store.cql.batch(decided.tentative);
    expect(await outboxRow(1n)).to.deep.include({ tentative: true, guard });
    await store.cql.lwt("UPDATE friend_requests SET status = ?, handled_at = ?, resolution = 'tok' WHERE request_id = ? IF status = 1", [
      FriendRequestStatus.accepted,
      2n,
      request.requestId,
    ]);
    expect(await store.contacts.getContact(8, 9)).to.equal(undefined);

    expect(await settleTentative(store.cql, fanOut(1n), guard)).to.equal(true);
    expect(await outboxRow(1n)).to.deep.include({ tentative: false, guard: null });
    expect((await store.contacts.getContact(8, 9))?.createdAt).to.equal(2);
    expect((await store.contacts.getContact(9, 8))?.createdAt).to.equal(2);
    expect(await store.contacts.findPendingBetween(8, 9)).to.equal(undefined);
  });

  it("deletes the events of a resolver whose LWT another resolver won", async () => {
    const request = await store.contacts.createFriendRequest(8, 9, "", 1);
    const guard = `friend_request:${request.requestId}:lost`;
    await store.cql.batch((await tentativeEvents(store.cql, true, () => [fanOut(2n)], guard)).tentative);
    expect(await store.contacts.resolveFriendRequest(request.requestId, FriendRequestStatus.rejected, 2)).to.equal(true);
    expect(await settleTentative(store.cql, fanOut(2n), guard)).to.equal(false);
    expect(await outboxRow(2n)).to.equal(undefined);
    expect(await store.contacts.getContact(8, 9)).to.equal(undefined);
  });

  it("confirms the events of an applied resolution and deletes those of a refused one", async () => {
    const request = await store.contacts.createFriendRequest(8, 9, "", 1);
    expect(await store.contacts.resolveFriendRequest(request.requestId, FriendRequestStatus.accepted, 2, (done) => (done ? [fanOut(3n)] : []))).to.equal(true);
    expect(await outboxRow(3n)).to.deep.include({ tentative: false, guard: null });
    // Two resolvers racing: one LWT applies; the other's tentative events go (or were never written).
    const other = await store.contacts.createFriendRequest(8, 9, "", 3);
    const outcomes = await Promise.all([
      store.contacts.resolveFriendRequest(other.requestId, FriendRequestStatus.accepted, 4, (done) => (done ? [fanOut(4n)] : [])),
      store.contacts.resolveFriendRequest(other.requestId, FriendRequestStatus.rejected, 4, (done) => (done ? [fanOut(5n)] : [])),
    ]);
    expect(outcomes.filter(Boolean)).to.have.length(1);
    const [winner, loser] = outcomes[0] ? [4n, 5n] : [5n, 4n];
    expect(await outboxRow(winner)).to.deep.include({ tentative: false });
    expect(await outboxRow(loser)).to.equal(undefined);
  });
});

