// What the Cassandra group path adds to the port's promises (DATA-MODEL.md §5.9): a fenced group
// change commits through its conversation's head, so a stale owner whose lease read passed is still
// refused by the head, a change whose head LWT applied is written by whoever reads the head (before
// the next change is computed), and writing a change again late never undoes what followed it.
import { expect } from "chai";
import { OwnershipLostError, type Fence } from "../store.js";
import type { CassandraStore } from "./cassandra-store.js";
import { encodePendingWrite } from "./conversation-head.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;

before(cassandraStarts);

describe("cassandra group path", () => {
  let store: CassandraStore;
  let other: CassandraStore;
  beforeEach(async () => {
    store = await openTestCassandraStore(keyspace, { fresh: true });
    other = await openTestCassandraStore(keyspace, { fresh: false });
  });
  afterEach(async () => {
    await other.close();
    await store.close();
  });

  const ttl = 30_000;
  const shard = 21;
  const member = (userId: number) => ({ userId, role: 2, joinedAt: 5 });
  const newGroup = async () => {
    const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }, member(8), member(9)]);
    return { groupId: group.groupId, conversationId: BigInt(group.groupId) };
  };
  const memberIds = async (handle: CassandraStore, groupId: number) => (await handle.groups.listMembers(groupId)).map((m) => m.userId);
  const fenceOf = (lease: { shard: number; epoch: number }): Fence => ({ shard: lease.shard, epoch: lease.epoch });

  it("refuses a stale owner whose lease read passed: the new owner's write raised the head's epoch", async () => {
    const { groupId } = await newGroup();
    const old = fenceOf(await store.leases.acquire(shard, { node: "a", instance: "a-1" }, 1000, ttl));
    expect(await store.groups.addMembers(groupId, [member(10)], undefined, { fence: old })).to.deep.equal([10]);
    const current = fenceOf(await other.leases.acquire(shard, { node: "b", instance: "b-1" }, 1000 + ttl, ttl));
    expect(await other.groups.removeMember(groupId, 9, undefined, { fence: current })).to.equal(true);
    // As if the old owner read the lease just before it changed hands: only the head can refuse it now.
    await store.cql.write("UPDATE leases SET epoch = ? WHERE shard = ?", [old.epoch, shard]);
    const fanOut = { fanOutId: 501n, scope: "user:7", recipients: [8], entry: new Uint8Array([1]), related: "{}", createdAt: 6 };
    let caught: unknown;
    await store.groups.addMembers(groupId, [member(11)], () => [fanOut], { fence: old }).catch((err: unknown) => (caught = err));
    expect(caught).to.be.instanceOf(OwnershipLostError);
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 10]);
    expect(await other.groups.groupIdsOf(11)).to.deep.equal([]);
    expect(await other.outbox.pending(10, "user:7")).to.deep.equal([]);
  });

  it("writes a change whose head LWT applied for whoever reads the head next, when its process stopped before writing it", async () => {
    const { groupId, conversationId } = await newGroup();
    const fence = fenceOf(await store.leases.acquire(shard, { node: "a", instance: "a-1" }, 1000, ttl));
    const fanOut = { fanOutId: 502n, scope: String(conversationId), recipients: [7, 8, 9, 11], entry: new Uint8Array([2]), related: "{}", createdAt: 6 };
    const change = [
      { query: "INSERT INTO group_members (group_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)", params: [groupId, 11, 2, 6n] },
      { query: "INSERT INTO groups_of_user (user_id, group_id) VALUES (?, ?)", params: [11, groupId] },
      {
        query: "INSERT INTO conversation_outbox (conversation_id, fan_out_id, recipients, entry, related, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        params: [conversationId, fanOut.fanOutId, fanOut.recipients, Buffer.from(fanOut.entry), fanOut.related, 6n],
      },
    ];
    // What the change's head LWT leaves when the process stops right after it.
    const pending = encodePendingWrite({ kind: "group", statements: change, at: store.cql.nextTimestamp() });
    await store.cql.lwt("UPDATE conversations SET owner_epoch = ?, pending_write = ? WHERE conversation_id = ? IF owner_epoch = 0", [fence.epoch, pending, conversationId]);
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 9]);
    // The conversation's outbox is read through its head: the change is written first.
    expect(await other.outbox.pending(10, String(conversationId))).to.deep.equal([fanOut]);
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 9, 11]);
    expect(await other.groups.groupIdsOf(11)).to.deep.equal([groupId]);
  });

  it("computes a change on top of one an earlier owner committed but did not write", async () => {
    const { groupId, conversationId } = await newGroup();
    const old = fenceOf(await store.leases.acquire(shard, { node: "a", instance: "a-1" }, 1000, ttl));
    // The old owner's removal of 9, committed in the head; its process stopped before writing it.
    const removal = encodePendingWrite({
      kind: "group",
      statements: [
        { query: "DELETE FROM group_members WHERE group_id = ? AND user_id = ?", params: [groupId, 9] },
        { query: "DELETE FROM groups_of_user WHERE user_id = ? AND group_id = ?", params: [9, groupId] },
      ],
      at: store.cql.nextTimestamp(),
    });
    await store.cql.lwt("UPDATE conversations SET owner_epoch = ?, pending_write = ? WHERE conversation_id = ? IF owner_epoch = 0", [old.epoch, removal, conversationId]);
    const current = fenceOf(await other.leases.acquire(shard, { node: "b", instance: "b-1" }, 1000 + ttl, ttl));
    // The new owner's invitation of 9 finds 9 gone, so it adds them back.
    expect(await other.groups.addMembers(groupId, [member(9)], undefined, { fence: current })).to.deep.equal([9]);
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 9]);
    expect(await other.groups.groupIdsOf(9)).to.deep.equal([groupId]);
  });

  it("a group change goes through while its handle writes a burst of messages to the group", async () => {
    const { groupId, conversationId } = await newGroup();
    const fence = fenceOf(await store.leases.acquire(shard, { node: "a", instance: "a-1" }, 1000, ttl));
    const message = (messageId: bigint) => ({ conversationId, messageId, senderId: 7, clientMessageId: messageId, body: new Uint8Array([1]), replyTo: null, metadata: {}, createdAt: 7, updatedAt: null, edited: false });
    // One message after another, as the conversation actor writes them; the group changes beside them.
    const burst = (async () => {
      for (let id = 1n; id <= 200n; id++) expect((await store.messages.insertMessage(message(id), { fence })).outcome).to.equal("ok");
    })();
    const joining = Array.from({ length: 24 }, (_, i) => 10 + i);
    const changes = Promise.all(joining.map((userId) => store.groups.addMembers(groupId, [member(userId)], undefined, { fence })));
    await Promise.all([burst, changes]);
    expect(await changes).to.deep.equal(joining.map((userId) => [userId]));
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 9, ...joining]);
    expect(await other.messages.latestMessageId(conversationId)).to.equal(200n);
  });

  it("a change written again late, by a process that resumed after its successor, undoes nothing its successor did", async () => {
    const { groupId, conversationId } = await newGroup();
    const fence = fenceOf(await store.leases.acquire(shard, { node: "a", instance: "a-1" }, 1000, ttl));
    await store.groups.addMembers(groupId, [member(11)], undefined, { fence });
    const addition = (await store.cql.row("SELECT pending_write FROM conversations WHERE conversation_id = ? LIMIT 1", [conversationId]))!.pending_write as Buffer;
    expect(await store.groups.removeMember(groupId, 11, undefined, { fence })).to.equal(true);
    await store.groups.updateGroup(groupId, { name: "renamed" }, undefined, { fence });
    // The addition, back in the head as a slow process would leave it, is written again by the next reader.
    await store.cql.write("UPDATE conversations SET pending_write = ? WHERE conversation_id = ?", [addition, conversationId]);
    await other.outbox.pending(10, String(conversationId));
    expect(await memberIds(other, groupId)).to.deep.equal([7, 8, 9]);
    expect(await other.groups.groupIdsOf(11)).to.deep.equal([]);
    expect(await other.groups.getGroup(groupId)).to.deep.include({ name: "renamed" });
  });
});
