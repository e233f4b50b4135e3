// What the store condition on agent changes costs on Cassandra: `npx tsx ports/store/cassandra/agent-changes.bench.ts`.
// Starts the test Cassandra if none runs (stopping it after if it started it) and works in a keyspace
// of its own. Prints the median of 5 rounds of: ms per change one at a time, the read and unconditioned
// logged batch the adapter wrote before (the same agents row and directory row, no LWT) beside the LWT
// write it makes now, with and without a condition, and a deletion with its tentative event; then
// 8 writers changing one agent at once (each change re-read and retried until it applies).
import { AccountType, AgentStatus, AgentVisibility, DeliveryMode, type FanOutRecord } from "../store.js";
import { directoryStatement } from "./agent-directory.js";
import { openTestCassandraStore, releaseTestCassandra, testKeyspace } from "../../../test/support/cassandra.js";

const rounds = 5;
const calls = 200;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const store = await openTestCassandraStore(testKeyspace("agentbench"), { fresh: true });
let agents = 0;
const newAgent = async () => {
  agents += 1;
  const { agent, user } = await store.agents.createAgent(
    { accountType: AccountType.agent, username: `bench_${agents}`, nickname: "Bench", signature: "", createdAt: 1 },
    {
      creatorId: 7,
      status: AgentStatus.active,
      visibility: AgentVisibility.private,
      isSystem: false,
      tokenHash: `bench-token-${agents}`,
      tokenPrefix: "nxa_",
      secretKey: "nxk_",
      deliveryMode: DeliveryMode.websocket,
      webhookUrl: "",
      ipWhitelist: [],
      commands: [],
      miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
      createdAt: 1,
      updatedAt: 1,
    },
  );
  return { agentUserId: agent.agentUserId, user };
};

/** Median over rounds of ms per call, `calls` calls one after another. */
async function measure(label: string, call: (i: number) => Promise<unknown>, perRound = calls): Promise<void> {
  const perCall: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const began = performance.now();
    for (let i = 0; i < perRound; i++) await call(i);
    perCall.push((performance.now() - began) / perRound);
  }
  console.log(`| ${label} | ${median(perCall).toFixed(2)} ms |`);
}

let fanOutId = 1n << 60n;
const deletionEvent = (agentUserId: number): FanOutRecord => ({ fanOutId: fanOutId++, scope: `user:${agentUserId}`, recipients: [7], entry: new Uint8Array([1]), related: "{}", createdAt: 1 });

try {
  console.log("| agent change (one at a time) | median per change |\n|---|---|");
  const { agentUserId, user } = await newAgent();
  await measure("read, then logged batch without condition (the write before)", async (i) => {
    await Promise.all([store.agents.getAgent(agentUserId), store.users.getUser(agentUserId)]);
    await store.cql.batch([
      { query: "UPDATE agents SET secret_key = ?, updated_at = ? WHERE agent_user_id = ?", params: [`nxk_${i}`, BigInt(i), agentUserId] },
      directoryStatement(agentUserId, false, user),
    ]);
  });
  await measure("updateAgent (LWT on the version)", (i) => store.agents.updateAgent(agentUserId, { secretKey: `nxk_${i}` }));
  await measure("updateAgent ifStatus ACTIVE", (i) => store.agents.updateAgent(agentUserId, { secretKey: `nxk_${i}` }, undefined, { ifStatus: AgentStatus.active }));
  const doomed = await Promise.all(Array.from({ length: rounds * 40 }, () => newAgent()));
  let next = 0;
  await measure(
    "deletion ifStatus ACTIVE with its event (tentative, confirmed)",
    async () => {
      const agent = doomed[next++];
      await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted }, () => [deletionEvent(agent.agentUserId)], { ifStatus: AgentStatus.active });
    },
    40,
  );

  console.log("\n| 8 writers on one agent at once, 25 changes each | median total | median per change |\n|---|---|---|");
  const contended = await newAgent();
  const totals: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const began = performance.now();
    await Promise.all(
      Array.from({ length: 8 }, async (_, writer) => {
        for (let i = 0; i < 25; i++) await store.agents.updateAgent(contended.agentUserId, { commands: [{ command: `w${writer}`, description: String(i) }] });
      }),
    );
    totals.push(performance.now() - began);
  }
  console.log(`| unconditioned updateAgent | ${median(totals).toFixed(0)} ms | ${(median(totals) / 200).toFixed(2)} ms |`);
} finally {
  await store.close();
  await releaseTestCassandra();
}
