// The Cassandra side of conditional agent changes that the conformance suite cannot see: the events
// of a writer that died between its tentative events and their confirmation are settled by the
// guard (confirmed when its change is in the row, deleted otherwise), also through the outbox sweep.
import { expect } from "chai";
import { afterEach, before, beforeEach, describe, it } from "mocha";
import { AccountType, AgentStatus, AgentVisibility, DeliveryMode, type FanOutRecord } from "../store.js";
import type { CassandraStore } from "./cassandra-store.js";
import { settleAgentChange } from "./agents.js";
import { tentativeEvents, tentativeSettleAfterMs } from "./tentative-outbox.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;

before(cassandraStarts);

describe("cassandra store: tentative events of a conditional agent change", () => {
  let store: CassandraStore;
  let agentUserId: number;
  beforeEach(async () => {
    store = await openTestCassandraStore(keyspace, { fresh: true });
    const created = await store.agents.createAgent(
      { accountType: AccountType.agent, username: "settle_bot", nickname: "Bot", signature: "", createdAt: 1000 },
      {
        creatorId: 7,
        status: AgentStatus.active,
        visibility: AgentVisibility.private,
        isSystem: false,
        tokenHash: "settle-token",
        tokenPrefix: "nxa_",
        secretKey: "nxk_",
        deliveryMode: DeliveryMode.websocket,
        webhookUrl: "",
        ipWhitelist: [],
        commands: [],
        miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
        createdAt: 1000,
        updatedAt: 1000,
      },
    );
    agentUserId = created.agent.agentUserId;
  });
  afterEach(async () => store.close());

  const fanOut = (fanOutId: bigint): FanOutRecord => ({ fanOutId, scope: `user:${agentUserId}`, recipients: [7], entry: new Uint8Array([1]), related: "{}", createdAt: 1 });
  const outboxRow = (fanOutId: bigint) => store.cql.row("SELECT tentative, guard FROM account_outbox WHERE scope = ? AND fan_out_id = ?", [`user:${agentUserId}`, fanOutId]);
  /** What a deletion writes before its LWT: the events, tentative under the guard of the version it will write. */
  const tentativeDeletion = async (fanOutId: bigint, version: number) => {
    const guard = `agent:${agentUserId}:${version}:${AgentStatus.deleted}`;
    await store.cql.batch((await tentativeEvents(store.cql, undefined, () => [fanOut(fanOutId)], guard)).tentative);
    return guard;
  };

  it("confirms the events of a writer that died after its LWT applied", async () => {
    const guard = await tentativeDeletion(1n, 1001);
    await store.cql.lwt("UPDATE agents SET status = ?, updated_at = ? WHERE agent_user_id = ? IF updated_at = ?", [AgentStatus.deleted, 1001n, agentUserId, 1000n]);
    expect(await settleAgentChange(store.cql, fanOut(1n), guard)).to.equal(true);
    expect(await outboxRow(1n)).to.deep.include({ tentative: false, guard: null });
  });

  it("deletes the events of a writer that died before its LWT, or whose LWT another change won", async () => {
    const guard = await tentativeDeletion(2n, 1001);
    expect(await settleAgentChange(store.cql, fanOut(2n), guard)).to.equal(false);
    expect(await outboxRow(2n)).to.equal(undefined);
    // Another writer's change took version 1001 (and on): not a deletion, so these events report nothing that happened.
    const lost = await tentativeDeletion(3n, 1001);
    await store.agents.updateAgent(agentUserId, { visibility: AgentVisibility.public });
    await store.agents.updateAgent(agentUserId, { visibility: AgentVisibility.private });
    expect(await settleAgentChange(store.cql, fanOut(3n), lost)).to.equal(false);
    expect(await outboxRow(3n)).to.equal(undefined);
  });

  it("has the outbox sweep settle an agent change's events once they are old enough", async () => {
    const guard = `agent:${agentUserId}:1001:${AgentStatus.deleted}`;
    const [index] = (await tentativeEvents(store.cql, undefined, () => [fanOut(4n)], guard)).tentative;
    const record = fanOut(4n);
    // Written as a writer that stopped longer ago than any LWT can still be retried would have left it.
    const longAgoMicros = BigInt(Date.now() - 2 * tentativeSettleAfterMs) * 1000n;
    await store.cql.batch([
      index,
      {
        query: "INSERT INTO account_outbox (scope, fan_out_id, recipients, entry, related, created_at, tentative, guard) VALUES (?, ?, ?, ?, ?, ?, true, ?) USING TIMESTAMP ?",
        params: [record.scope, record.fanOutId, record.recipients, Buffer.from(record.entry), record.related, BigInt(record.createdAt), guard, longAgoMicros],
      },
    ]);
    await store.cql.lwt("UPDATE agents SET status = ?, updated_at = ? WHERE agent_user_id = ? IF updated_at = ?", [AgentStatus.deleted, 1001n, agentUserId, 1000n]);
    expect((await store.outbox.pending(10)).map((f) => f.fanOutId)).to.deep.equal([4n]);
    expect(await outboxRow(4n)).to.deep.include({ tentative: false });
  });
});
