// What operators watch at GET /metrics (docs/METRICS.md), through a real server: each series moves
// when the thing it counts happens. Series are read from a node of the role that produces them.
// The cluster shape's nodes run inside this test process and so share one registry: any node of
// the role shows them (in a deployment each process shows only its own work).
import { expect } from "chai";
import { MessagePolicy } from "../engine/messages/conversation-actor.js";
import { webhookFleetGroup } from "../webhooks/fleet.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { AgentDeliveryMode } from "../shared/gen/shared/v1/agent_pb.js";
import { roles, type Role } from "../shared/config.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { clusterTopology, type TestCluster } from "./support/cluster-topology.js";
import { callOnEveryNode, client, startTestServer, testStore, type TestServer } from "./support/harness.js";
import { startHttpsReceiver, type HttpsReceiver, type Responder } from "./support/https-receiver.js";
import { nextClientMessageId, streamStartBody, textBody, updateOf } from "./support/messaging.js";
import { samplesOf, scrape, sumOf } from "./support/prometheus-text.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

/** Polls until `probe` answers true; the timeout is only a safety net. */
async function eventually(probe: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("GET /metrics: what operators watch", () => {
  let server: TestServer;
  let owner: SignedIn;
  const receivers: HttpsReceiver[] = [];

  before(async () => {
    // Retries wait a minute of engine clock, so a failed attempt stays the only one a test sees.
    server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }, webhooks: { retryBaseMs: 60_000, timeoutMs: 2_000, pollIntervalMs: 25 } });
    owner = await signInWithCode(server);
  });
  after(async () => {
    for (const receiver of receivers) await receiver.close();
    await server.dispose();
  });

  /** The base URL of a node serving `role`: the server itself when it is one process. */
  const nodeOf = (role: Role): string => {
    const nodes = (server as TestServer & Partial<Pick<TestCluster, "nodes">>).nodes;
    if (!nodes) return server.url;
    const name = Object.keys(clusterTopology).find((candidate) => clusterTopology[candidate].includes(role));
    if (!name) throw new Error(`no node of the cluster's shape serves ${role}`);
    return nodes[name].url;
  };
  const metricsOf = (role: Role) => scrape(nodeOf(role));
  const messages = (token: string) => client(server, MessageService, "json", token);

  it("labels every series with the roles and node ids of the process", async () => {
    const text = await metricsOf("api");
    const [cpu] = samplesOf(text, "parley_process_cpu_user_seconds_total");
    expect(cpu, "the process's CPU series").to.not.equal(undefined);
    // One process holds every role: embedded, or the cluster's shape run inside this test process.
    expect(cpu.labels.role.split(",")).to.include.members([...roles]);
    const nodes = (server as TestServer & Partial<Pick<TestCluster, "nodes">>).nodes;
    const nodeIds = nodes ? Object.values(nodes).map((node) => node.broker.nodeID) : [server.config.cluster.nodeId];
    expect(cpu.labels.node_id.split(",")).to.include.members(nodeIds);
    const rpcs = samplesOf(text, "parley_rpc_requests_total");
    expect(rpcs.length).to.be.greaterThan(0);
    for (const sample of rpcs) expect(sample.labels).to.include({ role: cpu.labels.role, node_id: cpu.labels.node_id });
  });

  it("counts the frames and bytes a gateway pushes, the engine's calls to it, the fan-out and the store queries behind a message", async () => {
    const reader = await signInWithCode(server);
    const sender = await signInWithCode(server);
    const conversationId = await befriend(server, sender, reader);
    const socket = await GatewayClient.connect(server.url, "json");
    try {
      await socket.authenticate(reader.accessToken);
      const [gatewayBefore, engineBefore] = await Promise.all([metricsOf("gateway"), metricsOf("engine")]);
      const { messageId } = await messages(sender.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("counted") });
      await socket.next((frame) => {
        const entry = updateOf(frame)?.update;
        return entry?.case === "snUpdate" && entry.value.update.case === "messageEnvelope" && entry.value.update.value.messageId === messageId;
      });
      const [gatewayAfter, engineAfter] = await Promise.all([metricsOf("gateway"), metricsOf("engine")]);
      expect(sumOf(gatewayAfter, "parley_gateway_push_frames_total") - sumOf(gatewayBefore, "parley_gateway_push_frames_total")).to.be.at.least(1);
      expect(sumOf(gatewayAfter, "parley_gateway_push_bytes_total") - sumOf(gatewayBefore, "parley_gateway_push_bytes_total")).to.be.at.least(100);
      const calls = (text: string) => sumOf(text, "parley_push_gateway_calls_total", { result: "ok" });
      expect(calls(engineAfter) - calls(engineBefore)).to.be.at.least(1);
      const firstDeliveries = (text: string) => sumOf(text, "parley_fanouts_delivered_total", { delivery: "first" });
      expect(firstDeliveries(engineAfter) - firstDeliveries(engineBefore)).to.be.at.least(1);
      // The message's write: one SQLite transaction, or Cassandra's lightweight transaction on the conversation's head.
      const writeKind = testStore === "sqlite" ? "transaction" : "lwt";
      for (const kind of ["read", writeKind]) {
        const count = (text: string) => sumOf(text, "parley_store_query_duration_seconds_count", { store: testStore, kind });
        const sum = (text: string) => sumOf(text, "parley_store_query_duration_seconds_sum", { store: testStore, kind });
        expect(count(engineAfter) - count(engineBefore), `${kind} queries`).to.be.at.least(1);
        expect(sum(engineAfter) - sum(engineBefore), `${kind} query time`).to.be.greaterThan(0);
      }
    } finally {
      socket.close();
    }
  });

  it("counts a connection the client closed", async () => {
    const user = await signInWithCode(server);
    const closedByPeer = async () => sumOf(await metricsOf("gateway"), "parley_gateway_connection_closes_total", { reason: "peer" });
    const before = await closedByPeer();
    const socket = await GatewayClient.connect(server.url, "json");
    await socket.authenticate(user.accessToken);
    socket.close();
    await socket.closed;
    await eventually(async () => (await closedByPeer()) >= before + 1, "the close to be counted");
  });

  /** A new agent of `owner` in WEBHOOK mode, set up as its developer does, with a receiver of its own. */
  async function webhookAgent(respond: Responder): Promise<TestAgent> {
    const agent = await createAgent(server, owner);
    const receiver = await startHttpsReceiver(respond);
    receivers.push(receiver);
    await client(server, AgentService, "json", owner.accessToken).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: `${receiver.url}/hooks` });
    return agent;
  }

  it("records a delivered webhook's outcome, request time and delay since queueing, and the update log's append", async () => {
    const agent = await webhookAgent(() => 200);
    const delivered = (text: string) => sumOf(text, "parley_webhook_attempts_total", { result: "delivered", status_class: "2xx" });
    const requests = (text: string) => sumOf(text, "parley_webhook_request_duration_seconds_count", { result: "delivered" });
    const delays = (text: string) => sumOf(text, "parley_webhook_delivery_delay_seconds_count");
    const appends = (text: string) => sumOf(text, "parley_update_log_append_duration_seconds_count", { result: "ok" });
    const [fleetBefore, engineBefore] = await Promise.all([metricsOf("webhooks"), metricsOf("engine")]);
    await messages(owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody("hello hook") });
    await eventually(async () => delivered(await metricsOf("webhooks")) >= delivered(fleetBefore) + 1, "the delivery to be counted");
    const fleetAfter = await metricsOf("webhooks");
    expect(requests(fleetAfter) - requests(fleetBefore)).to.be.at.least(1);
    expect(delays(fleetAfter) - delays(fleetBefore)).to.be.at.least(1);
    // The engine announces the queued job to the fleet on the update log (Kafka in the cluster's
    // shape) without waiting: the dispatcher's poll may deliver before the append is acknowledged.
    await eventually(async () => appends(await metricsOf("engine")) >= appends(engineBefore) + 1, "the engine's append to be timed");
    const group = webhookFleetGroup(server.config.cluster.kafkaTopicPrefix);
    await eventually(async () => samplesOf(await metricsOf("webhooks"), "parley_update_log_consumer_lag_records", { group }).some((sample) => sample.value === 0), "the fleet's consumer lag to be reported, caught up");
  });

  it("records a failed webhook attempt by status class, and the agent waiting for its retry", async () => {
    // The configuration's own test request (the first) must succeed; every delivery after it fails.
    const agent = await webhookAgent((_, index) => (index === 0 ? 200 : 503));
    const retried = (text: string) => sumOf(text, "parley_webhook_attempts_total", { result: "retried", status_class: "5xx" });
    const failedRequests = (text: string) => sumOf(text, "parley_webhook_request_duration_seconds_count", { result: "failed" });
    const before = await metricsOf("webhooks");
    await messages(owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody("nobody home") });
    await eventually(async () => retried(await metricsOf("webhooks")) >= retried(before) + 1, "the failed attempt to be counted");
    const after = await metricsOf("webhooks");
    expect(failedRequests(after) - failedRequests(before)).to.be.at.least(1);
    expect(sumOf(after, "parley_webhook_agents", { state: "awaiting_retry" })).to.be.at.least(1);
    expect(sumOf(after, "parley_webhook_slots")).to.be.at.least(1);
  });

  it("counts streams started, open and ended by outcome (end, error, recalled, abandoned)", async () => {
    const agent = await createAgent(server, owner);
    const asAgent = messages(agent.token);
    const { conversationId } = agent;
    const start = async () => (await asAgent.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() })).messageId;
    const read = async () => {
      const text = await metricsOf("engine");
      return {
        started: sumOf(text, "parley_streams_started_total"),
        open: sumOf(text, "parley_streams_open"),
        ended: (outcome: string) => sumOf(text, "parley_streams_ended_total", { outcome }),
      };
    };
    const before = await read();
    const ending = await start();
    const failing = await start();
    const recalled = await start();
    await start(); // left silent, to be abandoned
    const started = await read();
    expect(started.started - before.started).to.equal(4);
    expect(started.open - before.open).to.equal(4);

    await asAgent.endStream({ conversationId, messageId: ending, accumulatedText: "done" });
    await asAgent.errorStream({ conversationId, messageId: failing, errorMessage: "model overloaded" });
    await asAgent.recallMessage({ conversationId, messageId: recalled });
    const finished = await read();
    for (const outcome of ["end", "error", "recalled"]) expect(finished.ended(outcome) - before.ended(outcome), outcome).to.equal(1);
    expect(finished.open - before.open).to.equal(1);

    // Last in this file: moving the engine clock also makes the failed webhook of the test above due.
    server.clock.advance(MessagePolicy.streamIdleTimeoutMs + 60_000);
    const ended = (await callOnEveryNode<{ ended: number }>(server, "messages.endAbandonedStreams")).reduce((sum, { ended }) => sum + ended, 0);
    expect(ended).to.be.at.least(1);
    const abandoned = await read();
    expect(abandoned.ended("abandoned") - before.ended("abandoned")).to.equal(1);
    expect(abandoned.open - before.open).to.equal(0);
  });
});
