// What the Cassandra message path adds to the port's promises (DATA-MODEL.md §5.10): a write whose
// head LWT applied is complete even if its rows were lost, handles condition on the head they saw,
// messages span bucket partitions, and a head raised by a newer owner refuses an older fence.
import { expect } from "chai";
import { OwnershipLostError, type MessageRecord } from "../store.js";
import type { CassandraStore } from "./cassandra-store.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;

before(cassandraStarts);

describe("cassandra message path", () => {
  let store: CassandraStore;
  beforeEach(async () => {
    store = await openTestCassandraStore(keyspace, { fresh: true });
  });
  afterEach(async () => store.close());

  const message = (conversationId: bigint, messageId: bigint, overrides: Partial<MessageRecord> = {}): MessageRecord => ({
    conversationId,
    messageId,
    senderId: 3,
    clientMessageId: 100n + messageId,
    body: new Uint8Array([1]),
    replyTo: null,
    metadata: { a: "b" },
    createdAt: 7,
    updatedAt: null,
    edited: false,
    ...overrides,
  });

  it("rolls a committed write forward for whoever reads its head, when its rows were lost", async () => {
    const conversationId = 77n;
    const first = message(conversationId, 1n);
    const fanOut = { fanOutId: 2n ** 60n, scope: "77", recipients: [3], entry: new Uint8Array([1]), related: "{}", createdAt: 7 };
    await store.messages.insertMessage(first, { fanOut, opensStream: true });
    // As a crash right after the head LWT would leave it.
    await store.cql.writeAll([
      { query: "DELETE FROM messages WHERE conversation_id = ? AND bucket = 0", params: [conversationId] },
      { query: "DELETE FROM message_client_ids WHERE conversation_id = ? AND sender_id = 3 AND client_message_id = 101", params: [conversationId] },
      { query: "DELETE FROM conversation_outbox WHERE conversation_id = ?", params: [conversationId] },
      { query: "DELETE FROM open_streams WHERE conversation_id = ?", params: [conversationId] },
    ]);
    const other = await openTestCassandraStore(keyspace, { fresh: false });
    try {
      expect(await other.messages.latestMessageId(conversationId)).to.equal(1n);
      expect(await other.messages.getMessage(conversationId, 1n)).to.deep.equal(first);
      expect(await other.messages.findByClientMessageId(conversationId, 3, 101n)).to.deep.equal(first);
      expect(await other.outbox.pending(10, "77")).to.deep.equal([fanOut]);
      expect(await other.messages.listOpenStreams(10, 10)).to.have.length(1);
    } finally {
      await other.close();
    }
  });

  it("conditions each write on the head its handle saw: a handle that missed a write reloads and answers from the head", async () => {
    const conversationId = 78n;
    const other = await openTestCassandraStore(keyspace, { fresh: false });
    try {
      expect((await store.messages.insertMessage(message(conversationId, 1n))).outcome).to.equal("ok");
      expect((await other.messages.insertMessage(message(conversationId, 2n))).outcome).to.equal("ok");
      // `store` still believes the sequence is at 1: its LWT is refused, it reloads, and id 2 is taken.
      expect((await store.messages.insertMessage(message(conversationId, 2n, { clientMessageId: 900n }))).outcome).to.equal("conflict");
      expect((await store.messages.insertMessage(message(conversationId, 3n))).outcome).to.equal("ok");
      await other.messages.updateMessage(conversationId, 3n, { body: new Uint8Array([9]), updatedAt: 8, edited: true });
      expect(await store.messages.getMessage(conversationId, 3n)).to.deep.include({ edited: true, updatedAt: 8 });
      expect((await store.messages.insertMessage(message(conversationId, 4n))).outcome).to.equal("ok");
      expect(await other.messages.latestMessageId(conversationId)).to.equal(4n);
    } finally {
      await other.close();
    }
  });

  it("lists and deletes messages across bucket partitions (4,096 ids each)", async () => {
    const conversationId = 99n;
    const rows = [];
    for (let id = 4080n; id <= 4116n; id++) {
      rows.push({
        query: "INSERT INTO messages (conversation_id, bucket, message_id, sender_id, client_message_id, body, created_at, edited) VALUES (?, ?, ?, 3, 0, 0x01, 7, false)",
        params: [conversationId, Number(id >> 12n), id],
      });
    }
    await store.cql.writeAll(rows);
    await store.cql.write("UPDATE conversations SET latest_message_id = 4116 WHERE conversation_id = ?", [conversationId]);
    const ids = (list: { messageId: bigint }[]) => list.map((m) => Number(m.messageId));
    expect(await store.messages.deleteFor(5, conversationId, [4095n, 4096n, 4097n, 5000n], 0n)).to.deep.equal([4095n, 4096n, 4097n]);
    expect(ids(await store.messages.listVisible(5, conversationId, "before", 2n ** 62n, 4090n, 5))).to.deep.equal([4116, 4115, 4114, 4113, 4112]);
    expect(ids(await store.messages.listVisible(5, conversationId, "before", 4099n, 4090n, 5))).to.deep.equal([4098, 4094, 4093, 4092, 4091]);
    expect(ids(await store.messages.listVisible(5, conversationId, "after", 4092n, 4090n, 5))).to.deep.equal([4093, 4094, 4098, 4099, 4100]);
    expect(ids(await store.messages.listVisible(5, conversationId, "after", 4110n, 0n, 50))).to.deep.equal([4111, 4112, 4113, 4114, 4115, 4116]);
  });

  it("refuses a fence older than the head's owner epoch even when the lease read passes", async () => {
    const conversationId = 55n;
    const fence = { shard: 1, epoch: 1 };
    await store.leases.acquire(1, { node: "a", instance: "a1" }, 0, 1000);
    expect((await store.messages.insertMessage(message(conversationId, 1n), { fence })).outcome).to.equal("ok");
    // A newer owner's first write raised the head's epoch.
    await store.cql.write("UPDATE conversations SET owner_epoch = 5 WHERE conversation_id = ?", [conversationId]);
    let caught: unknown;
    await store.messages.insertMessage(message(conversationId, 2n), { fence }).catch((err: unknown) => (caught = err));
    expect(caught).to.be.instanceOf(OwnershipLostError);
    expect(await store.messages.latestMessageId(conversationId)).to.equal(1n);
  });

  it("finishing a conversation's fan-out finishes the earlier ones of that conversation, not the later ones", async () => {
    const fanOut = (fanOutId: bigint) => ({ fanOutId, scope: "12", recipients: [3], entry: new Uint8Array([1]), related: "{}", createdAt: 7 });
    const conversationId = 12n;
    for (const [id, fanOutId] of [[1n, 10n], [2n, 11n], [3n, 12n]] as const) await store.messages.insertMessage(message(conversationId, id), { fanOut: fanOut(fanOutId) });
    await store.outbox.finish(fanOut(11n));
    expect((await store.outbox.pending(10, "12")).map((f) => f.fanOutId)).to.deep.equal([12n]);
  });
});

