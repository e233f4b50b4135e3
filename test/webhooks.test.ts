// Agent event delivery through the real server: signed webhooks to a local HTTPS receiver (its CA
// is trusted through NODE_EXTRA_CA_CERTS), retries driven by the engine clock, and the catch-up
// of a WebSocket-mode agent. Most agents are put into WEBHOOK mode through the store, the
// BusEvents.agentChanged broadcast and the inbox's mode-change action, which is what a
// configuration change does; the mode-switch tests use the real AgentService and also drive each
// of those steps alone, to stand in the windows between them.
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { MemoryUpdateLog } from "../ports/update-log/memory-update-log.js";
import { webhookTopicName } from "../webhooks/fleet.js";
import { fromJsonString, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { snUpdateOf } from "../engine/delivery/stream-entry.js";
import { AgentVisibility, DeliveryMode, type AgentRecord, type Store, type WebhookJob } from "../ports/store/store.js";
import { verifySignature as verifyWebhookSignature } from "@parley/sdk";
import type { DeliveryModeChangedParams } from "../shared/agent-delivery.js";
import { BusEvents } from "../shared/bus.js";
import { AgentDeliveryMode } from "../shared/gen/shared/v1/agent_pb.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import type { ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageBodySchema, MessageType, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SnUpdateSchema, type SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import { UpdateSchema, type Update } from "../shared/gen/api/v1/updates_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, openServerStore, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest, type Responder } from "./support/https-receiver.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

/** Long enough that a retry happens only when a test moves the engine clock. */
const retryBaseMs = 60_000;
const webhookKinds = ["messageEnvelope", "contactAdded", "removedFromGroup", "groupDissolved"];
type BodyInit = MessageInitShape<typeof MessageBodySchema>;
const text = (value: string): BodyInit => ({ type: MessageType.TEXT, content: { case: "text", value: { text: value } } });
const streamStart: BodyInit = { type: MessageType.STREAM, content: { case: "stream", value: { contentType: "text/plain" } } };
const card: BodyInit = { type: MessageType.CARD, content: { case: "card", value: { cardJson: JSON.stringify({ type: "AdaptiveCard", actions: [{ type: "Action.Submit" }] }), fallbackText: "a card" } } };
const never = () => new Promise<number>(() => {});
let clientIds = 1n;

async function eventually<T>(probe: () => Promise<T | undefined | false>, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Checks a received request against the operator contract and answers the Update it carries. */
function verified(request: ReceivedRequest, secretKey: string): Update {
  expect(request.method).to.equal("POST");
  expect(request.headers["content-type"]).to.equal("application/json");
  const timestamp = String(request.headers["x-service-timestamp"]);
  const signature = String(request.headers["x-service-signature"]);
  expect(timestamp).to.match(/^\d+$/);
  // Seconds, not milliseconds: within the receivers' 5-minute replay window of now.
  expect(Math.abs(Number(timestamp) - Date.now() / 1000)).to.be.below(300);
  // What nexus-x compares the whole header with: the "sha256=" prefix is part of it.
  expect(signature).to.equal("sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${request.body}`).digest("hex"));
  expect(verifyWebhookSignature(secretKey, timestamp, signature, request.body)).to.equal(true);
  // The upstream SDKs read the same values under their own header names.
  expect(request.headers["x-nexus-timestamp"]).to.equal(timestamp);
  expect(request.headers["x-nexus-signature"]).to.equal(signature);
  const update = fromJsonString(UpdateSchema, request.body);
  // The body is the canonical proto3 JSON of the Update, nothing more or less.
  expect(JSON.parse(request.body)).to.deep.equal(toJson(UpdateSchema, update));
  return update;
}

/** Connects as the agent, reads what its socket catch-up replays up to `latest`, confirms it with a heartbeat, and closes. */
async function socketCatchUp(server: TestServer, agent: TestAgent, latest: number): Promise<number[]> {
  const socket = await GatewayClient.connect(server.url, "json");
  try {
    await socket.authenticate(agent.token);
    await socket.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === latest);
    await socket.ping();
    return socket.pushedSns();
  } finally {
    socket.close();
  }
}

/** WebSocket connections the server holds open, from its metrics. */
const openSockets = async (server: TestServer) => Number(/parley_websocket_connections(?:\{[^}]*\})? (\d+)/.exec(await (await fetch(server.url + "/metrics")).text())?.[1]);

/** Drops an agent's TCP connection with no close handshake and waits until the server has seen it go. */
async function dropConnection(server: TestServer, socket: GatewayClient, openBefore: number): Promise<void> {
  socket.terminate();
  await socket.closed;
  await eventually(async () => (await openSockets(server)) === openBefore, "the server to notice the dropped connection");
}

/** from, from + 1, … to (empty when to < from). */
const range = (from: number, to: number) => Array.from({ length: Math.max(to - from + 1, 0) }, (_, i) => from + i);

const sequenced = (update: Update): SnUpdate | undefined => (update.update.case === "snUpdate" ? update.update.value : undefined);
const envelopeOf = (update: Update): MessageEnvelope | undefined => {
  const entry = sequenced(update)?.update;
  return entry?.case === "messageEnvelope" ? entry.value : undefined;
};
const textOf = (update: Update) => {
  const body = envelopeOf(update)?.body;
  return body?.content.case === "text" ? body.content.value.text : undefined;
};

/** The update log of each server webhookServer starts, so a test can read what the engine announces to the fleet. */
const announcements = new WeakMap<TestServer, MemoryUpdateLog>();

async function webhookServer(overrides: { timeoutMs?: number } = {}): Promise<TestServer> {
  const log = new MemoryUpdateLog();
  const server = await startTestServer({
    env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" },
    webhooks: { retryBaseMs, timeoutMs: overrides.timeoutMs ?? 1000, pollIntervalMs: 25 },
    adapters: { log },
  });
  announcements.set(server, log);
  return server;
}

/** Changes an agent's record the way its configuration endpoints do: the write, the broadcast, the switch in its inbox. */
async function configureAgent(server: TestServer, store: Store, agentUserId: number, change: Partial<AgentRecord>): Promise<void> {
  await store.agents.updateAgent(agentUserId, change);
  await server.broker.broadcast(BusEvents.agentChanged, { agentUserId });
  if (change.deliveryMode !== undefined || change.webhookUrl !== undefined) await switchInInbox(server, agentUserId);
}

/** The step of a mode change that carries it out in the agent's inbox (what SetAgentConfig awaits). */
async function switchInInbox(server: TestServer, agentUserId: number): Promise<void> {
  await server.broker.call("sync.deliveryModeChanged", { userId: agentUserId } satisfies DeliveryModeChangedParams);
}

describe("agent event delivery by webhook", () => {
  let server: TestServer;
  let inspect: Store;
  let owner: SignedIn;
  let other: SignedIn;
  const receivers: HttpsReceiver[] = [];
  before(async () => {
    server = await webhookServer();
    inspect = await openServerStore(server);
    owner = await signInWithCode(server);
    other = await signInWithCode(server);
  });
  after(async () => {
    for (const receiver of receivers) await receiver.close();
    await inspect.close();
    await server.dispose();
  });

  const messages = (token: string) => client(server, MessageService, "json", token);
  const pending = (agent: TestAgent) => inspect.webhookJobs.pending(agent.userId);
  /** The job at the head of the agent's queue once it has failed `attempts` times. */
  const headAfter = (agent: TestAgent, attempts: number) =>
    eventually(async () => (await pending(agent)).find((job) => job.attempts === attempts), `a job with ${attempts} failed attempts`);
  const say = (agent: TestAgent, words: string) => messages(owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text(words) });

  /** A new agent of `owner` in WEBHOOK mode, with a receiver of its own. */
  async function webhookAgent(respond?: Responder): Promise<{ agent: TestAgent; receiver: HttpsReceiver }> {
    const agent = await createAgent(server, owner);
    const receiver = await startHttpsReceiver(respond);
    receivers.push(receiver);
    await configureAgent(server, inspect, agent.userId, { deliveryMode: DeliveryMode.webhook, webhookUrl: `${receiver.url}/hooks/${agent.userId}`, visibility: AgentVisibility.public });
    return { agent, receiver };
  }

  it("delivers MESSAGE, CARD_ACTION, CONTACT_ADDED, REMOVED_FROM_GROUP and GROUP_DISSOLVED signed, as the exact Update of the agent's stream", async () => {
    const { agent, receiver } = await webhookAgent();
    const asOwner = messages(owner.accessToken);
    const asAgent = messages(agent.token);
    const conversationId = agent.conversationId;

    const sent = await asOwner.sendMessage({ conversationId, clientMessageId: clientIds++, body: text("hello agent") });
    await asOwner.editMessage({ conversationId, messageId: sent.messageId, newBody: text("hello, agent") });
    await asOwner.recallMessage({ conversationId, messageId: sent.messageId });
    const finished = await asAgent.sendMessage({ conversationId, clientMessageId: clientIds++, body: streamStart });
    await asAgent.pushStreamDelta({ conversationId, messageId: finished.messageId, seq: 1, delta: "partial " });
    await asAgent.endStream({ conversationId, messageId: finished.messageId, accumulatedText: "partial answer" });
    const failed = await asAgent.sendMessage({ conversationId, clientMessageId: clientIds++, body: streamStart });
    await asAgent.pushStreamDelta({ conversationId, messageId: failed.messageId, seq: 1, delta: "half" });
    await asAgent.errorStream({ conversationId, messageId: failed.messageId, errorMessage: "model overloaded" });
    const cardMessage = await asAgent.sendMessage({ conversationId, clientMessageId: clientIds++, body: card });
    const { actionId } = await asOwner.submitCardAction({ conversationId, messageId: cardMessage.messageId, actionData: '{"choice":"yes"}', verb: "confirm" });
    await client(server, ContactService, "json", other.accessToken).addContact({ targetUserId: agent.userId });
    const groups = client(server, GroupService, "json", owner.accessToken);
    const left = (await groups.createGroup({ name: "left", memberIds: [agent.userId, other.userId] })).group!;
    await groups.removeMember({ groupId: left.groupId, targetId: agent.userId });
    const dissolved = (await groups.createGroup({ name: "dissolved", memberIds: [agent.userId, other.userId] })).group!;
    await groups.dissolveGroup({ groupId: dissolved.groupId });

    const stream = (await inspect.updates.readUpdates(agent.userId, 0, 1000)).map(snUpdateOf);
    const expected = stream.filter((entry) => webhookKinds.includes(entry.update.case ?? ""));
    await receiver.waitFor(expected.length + 1);
    await eventually(async () => (await pending(agent)).length === 0, "an empty queue");
    expect(receiver.received).to.have.length(expected.length + 1, "one request per event, and none for stream deltas");
    expect(receiver.received.every((request) => request.path === `/hooks/${agent.userId}`)).to.equal(true);
    const updates = receiver.received.map((request) => verified(request, agent.secretKey));

    // Sequenced events: every one of the agent's entries of those kinds, in sn order, unchanged.
    const delivered = updates.map(sequenced).filter((entry) => entry !== undefined);
    expect(delivered.map((entry) => toJson(SnUpdateSchema, entry))).to.deep.equal(expected.map((entry) => toJson(SnUpdateSchema, entry)));
    expect(new Set(delivered.map((entry) => entry.update.case))).to.deep.equal(new Set(webhookKinds));

    // Message ids count per conversation: the agent's groups have their own 1, 2, 3…
    const isAbout = (u: Update, messageId: bigint) => envelopeOf(u)?.conversationId === conversationId && envelopeOf(u)?.messageId === messageId;
    const aboutSent = updates.filter((u) => isAbout(u, sent.messageId));
    expect(aboutSent.map((u) => [envelopeOf(u)?.body?.type, envelopeOf(u)?.edited])).to.deep.equal([
      [MessageType.TEXT, false],
      [MessageType.TEXT, true],
      [MessageType.RECALLED, false],
    ]);
    expect(textOf(aboutSent[1])).to.equal("hello, agent");
    expect(aboutSent[0].users.map((u) => u.userId)).to.deep.equal([owner.userId]);
    const phases = (messageId: bigint) =>
      updates.flatMap((u) => {
        const body = isAbout(u, messageId) ? envelopeOf(u)?.body : undefined;
        return body?.content.case === "stream" ? [[body.content.value.phase, body.content.value.accumulatedText, body.content.value.errorMessage]] : [];
      });
    expect(phases(finished.messageId)).to.deep.equal([
      [StreamPhase.START, "", ""],
      [StreamPhase.END, "partial answer", ""],
    ]);
    expect(phases(failed.messageId)).to.deep.equal([
      [StreamPhase.START, "", ""],
      [StreamPhase.ERROR, "half", "model overloaded"],
    ]);
    const system = updates.find((u) => envelopeOf(u)?.conversationId === BigInt(left.groupId) && envelopeOf(u)?.body?.content.case === "group");
    expect(envelopeOf(system!)?.senderId).to.equal(0);

    const contactAdded = updates.find((u) => sequenced(u)?.update.case === "contactAdded")!;
    expect(sequenced(contactAdded)?.update.value).to.deep.include({ peerUserId: other.userId });
    expect(contactAdded.users.map((u) => u.userId)).to.deep.equal([other.userId]);
    const removed = updates.find((u) => sequenced(u)?.update.case === "removedFromGroup")!;
    expect(sequenced(removed)?.update.value).to.deep.include({ groupId: left.groupId, operatorId: owner.userId });
    expect(removed.groups.map((g) => g.groupId)).to.deep.equal([left.groupId]);
    const gone = updates.find((u) => sequenced(u)?.update.case === "groupDissolved")!;
    expect(sequenced(gone)?.update.value).to.deep.include({ groupId: dissolved.groupId, operatorId: owner.userId });

    // The one ephemeral event: the card action, after the card it answers.
    const ephemeral = updates.filter((u) => u.update.case === "nonSnUpdate");
    expect(ephemeral).to.have.length(1);
    const action = ephemeral[0].update.case === "nonSnUpdate" && ephemeral[0].update.value.update.case === "cardAction" ? ephemeral[0].update.value.update.value : undefined;
    expect(action).to.deep.include({ actionId, conversationId, messageId: cardMessage.messageId, senderId: owner.userId, actionData: '{"choice":"yes"}', verb: "confirm" });
    expect(ephemeral[0].users.map((u) => u.userId)).to.deep.equal([owner.userId]);
    expect(updates.indexOf(ephemeral[0])).to.be.above(updates.findIndex((u) => isAbout(u, cardMessage.messageId)));
  });

  it("retries a failing endpoint after 1, 2 and 4 backoff steps, then drops the job; each retry is signed with the key current at send time", async () => {
    const { agent, receiver } = await webhookAgent(() => 500);
    const before = server.clock.now();
    await say(agent, "are you there?");
    await receiver.waitFor(1);
    const first = await headAfter(agent, 1);
    expect(first.nextAttemptAt).to.be.within(before + retryBaseMs, server.clock.now() + retryBaseMs);

    const rotatedKey = `sk_rotated_${agent.userId}_${"x".repeat(40)}`;
    await configureAgent(server, inspect, agent.userId, { secretKey: rotatedKey });
    let job: WebhookJob = first;
    for (const [attempt, delay] of [[2, 2 * retryBaseMs], [3, 4 * retryBaseMs]] as const) {
      expect(receiver.received).to.have.length(attempt - 1, "no retry before it is due");
      server.clock.advance(job.nextAttemptAt - server.clock.now());
      await receiver.waitFor(attempt);
      const failedAt = server.clock.now();
      job = await headAfter(agent, attempt);
      expect(job.nextAttemptAt).to.be.within(failedAt + delay, server.clock.now() + delay);
    }
    server.clock.advance(job.nextAttemptAt - server.clock.now());
    await receiver.waitFor(4);
    await eventually(async () => (await pending(agent)).length === 0, "the job to be dropped");
    server.clock.advance(8 * retryBaseMs);
    // A few polls go by: the dropped job never comes back.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(receiver.received).to.have.length(4);
    expect(new Set(receiver.received.map((r) => r.body)).size).to.equal(1);
    verified(receiver.received[0], agent.secretKey);
    for (const retry of receiver.received.slice(1)) {
      verified(retry, rotatedKey);
      expect(verifyWebhookSignature(agent.secretKey, String(retry.headers["x-service-timestamp"]), String(retry.headers["x-service-signature"]), retry.body)).to.equal(false);
    }
  });

  it("counts an endpoint that does not answer within the time limit as a failed attempt", async () => {
    const { agent, receiver } = await webhookAgent((_request, index) => (index === 0 ? never() : 200));
    await say(agent, "slow one");
    await receiver.waitFor(1);
    const job = await headAfter(agent, 1);
    server.clock.advance(job.nextAttemptAt - server.clock.now());
    await receiver.waitFor(2);
    await eventually(async () => (await pending(agent)).length === 0, "the delivery to succeed");
    expect(receiver.received.map((r) => textOf(verified(r, agent.secretKey)))).to.deep.equal(["slow one", "slow one"]);
  });

  it("keeps an agent's order while its head job is retried", async () => {
    const { agent, receiver } = await webhookAgent((_request, index) => (index === 0 ? 500 : 200));
    for (const words of ["one", "two", "three"]) await say(agent, words);
    await receiver.waitFor(1);
    const job = await headAfter(agent, 1);
    expect((await pending(agent)).map((j) => j.jobId)[0]).to.equal(job.jobId);
    expect(receiver.received, "nothing overtakes the failed head").to.have.length(1);
    server.clock.advance(job.nextAttemptAt - server.clock.now());
    await receiver.waitFor(4);
    const updates = receiver.received.map((r) => verified(r, agent.secretKey));
    expect(updates.map(textOf)).to.deep.equal(["one", "one", "two", "three"]);
    const sns = updates.slice(1).map((u) => sequenced(u)!.sn);
    expect(sns).to.deep.equal([...sns].sort((a, b) => a - b));
  });

  it("does not hold up one agent behind another agent's dead endpoint", async () => {
    const dead = await webhookAgent(never);
    const alive = await webhookAgent();
    for (const words of ["a", "b", "c"]) await say(dead.agent, words);
    await dead.receiver.waitFor(1);
    await say(alive.agent, "still served");
    await alive.receiver.waitFor(1);
    expect(textOf(verified(alive.receiver.received[0], alive.agent.secretKey))).to.equal("still served");
    // The dead agent's first job is in flight or waiting for its retry; all three are still queued.
    expect(dead.receiver.received).to.have.length(1);
    expect((await pending(dead.agent)).length).to.equal(3);
  });

  it("drops the queue of an agent that left WEBHOOK mode at once, queues nothing more, and replays what the webhook had not delivered on its socket", async () => {
    const { agent, receiver } = await webhookAgent(() => 500);
    await say(agent, "by webhook");
    await receiver.waitFor(1);
    const job = await headAfter(agent, 1);
    const undelivered = sequenced(fromJsonString(UpdateSchema, job.body))!.sn;
    await configureAgent(server, inspect, agent.userId, { deliveryMode: DeliveryMode.websocket });
    expect(await pending(agent)).to.deep.equal([]);
    expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(undelivered - 1);
    await say(agent, "by socket");
    expect(await pending(agent)).to.deep.equal([]);
    server.clock.advance(job.nextAttemptAt - server.clock.now());
    // A few polls go by: the dropped job is not retried.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(receiver.received).to.have.length(1);

    const latest = await inspect.updates.latestSn(agent.userId);
    expect(await socketCatchUp(server, agent, latest)).to.deep.equal(range(undelivered, latest));
  });

  it("sends nothing for people and for agents in WEBSOCKET mode", async () => {
    // Every queued job is announced to the fleet; a job queued by mistake could be taken back by
    // the dispatcher before the queue is inspected, but not unannounced. The spy reads the
    // announcements as a consumer group of its own.
    const queuedFor: number[] = [];
    const spy = await announcements.get(server)!.consume({
      group: `webhook-queue-spy-${Date.now()}`,
      topic: webhookTopicName(server.config.cluster.kafkaTopicPrefix),
      handle: async (_partition, records) => {
        for (const record of records) queuedFor.push((JSON.parse(new TextDecoder().decode(record.value)) as { agentUserId: number }).agentUserId);
      },
    });
    try {
      const agent = await createAgent(server, owner);
      await say(agent, "hello socket agent");
      await client(server, ContactService, "json", other.accessToken).sendFriendRequest({ targetUserId: owner.userId, message: "hi" });
      expect(await pending(agent)).to.deep.equal([]);
      expect(await inspect.webhookJobs.pending(owner.userId)).to.deep.equal([]);
      expect(queuedFor.filter((id) => id === agent.userId || id === owner.userId)).to.deep.equal([]);
    } finally {
      await spy.close();
    }
  });
});

describe("webhook targets that are refused at send time", () => {
  /** Queues one delivery to `target` and waits until its first attempt has failed. */
  async function refusedDelivery(allowPrivate: boolean, target: string): Promise<void> {
    const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: String(allowPrivate) }, webhooks: { retryBaseMs, pollIntervalMs: 25 } });
    const store = await openServerStore(server);
    try {
      const owner = await signInWithCode(server);
      const agent = await createAgent(server, owner);
      await configureAgent(server, store, agent.userId, { deliveryMode: DeliveryMode.webhook, webhookUrl: target });
      await client(server, MessageService, "json", owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text("refused") });
      await eventually(async () => (await store.webhookJobs.pending(agent.userId)).find((job) => job.attempts === 1), "the failed attempt");
    } finally {
      await store.close();
      await server.dispose();
    }
  }

  it("counts a loopback target as a failed attempt while private networks are not allowed, and sends nothing", async () => {
    const receiver = await startHttpsReceiver();
    try {
      await refusedDelivery(false, receiver.url);
      expect(receiver.received).to.deep.equal([]);
    } finally {
      await receiver.close();
    }
  });

  it("counts a plain HTTP target as a failed attempt, and sends nothing", async () => {
    const received: string[] = [];
    const plain = createServer((req, res) => {
      received.push(req.url ?? "");
      res.writeHead(200).end();
    });
    await new Promise<void>((resolve) => plain.listen(0, "127.0.0.1", () => resolve()));
    try {
      await refusedDelivery(true, `http://localhost:${(plain.address() as AddressInfo).port}/hook`);
      expect(received).to.deep.equal([]);
    } finally {
      plain.closeAllConnections();
      await new Promise((resolve) => plain.close(resolve));
    }
  });
});

describe("agent event delivery by webhook across a restart", () => {
  const timeoutMs = 5000;
  let server: TestServer;
  let receiver: HttpsReceiver;
  after(async () => {
    await receiver.close();
    await server.dispose();
  });

  it("keeps queued deliveries, and a request cut off by the shutdown costs no attempt", async () => {
    // 1st request: still unanswered when the server stops; 2nd: fails; then success.
    receiver = await startHttpsReceiver((_request, index) => (index === 0 ? never() : index === 1 ? 500 : 200));
    server = await webhookServer({ timeoutMs });
    const owner = await signInWithCode(server);
    const agent = await createAgent(server, owner);
    const jobs = async () => {
      const store = await openServerStore(server);
      try {
        return await store.webhookJobs.pending(agent.userId);
      } finally {
        await store.close();
      }
    };
    /** Stops the server, looks at the queue while nothing runs, starts it again on the same data. */
    const restart = async () => {
      await server.stop();
      const queued = await jobs();
      server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }, webhooks: { retryBaseMs, timeoutMs, pollIntervalMs: 25 }, dataDir: server.dataDir, clock: server.clock });
      return queued;
    };
    const store = await openServerStore(server);
    await configureAgent(server, store, agent.userId, { deliveryMode: DeliveryMode.webhook, webhookUrl: receiver.url });
    await store.close();
    await client(server, MessageService, "json", owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text("survive") });
    await receiver.waitFor(1);

    const [kept, ...others] = await restart();
    expect(others).to.deep.equal([]);
    expect(kept.attempts).to.equal(0);
    await receiver.waitFor(2);
    const failed = await eventually(async () => (await jobs()).find((job) => job.attempts === 1), "the failed attempt to be recorded");

    expect((await restart()).map((job) => [job.jobId, job.attempts])).to.deep.equal([[kept.jobId, 1]]);
    server.clock.advance(failed.nextAttemptAt - server.clock.now());
    await receiver.waitFor(3);
    await eventually(async () => (await jobs()).length === 0, "the delivery to succeed after the restart");
    expect(receiver.received.map((r) => textOf(verified(r, agent.secretKey)))).to.deep.equal(["survive", "survive", "survive"]);
  });
});

describe("agent event delivery across a delivery mode switch", () => {
  let server: TestServer;
  let inspect: Store;
  let owner: SignedIn;
  const receivers: HttpsReceiver[] = [];
  before(async () => {
    server = await webhookServer();
    inspect = await openServerStore(server);
    owner = await signInWithCode(server);
  });
  after(async () => {
    for (const receiver of receivers) await receiver.close();
    await inspect.close();
    await server.dispose();
  });

  const agentsApi = () => client(server, AgentService, "json", owner.accessToken);
  const say = (agent: TestAgent, words: string) =>
    client(server, MessageService, "json", owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text(words) });
  const latestOf = (agent: TestAgent) => inspect.updates.latestSn(agent.userId);
  const pending = (agent: TestAgent) => inspect.webhookJobs.pending(agent.userId);
  /** The webhook's events (not the `{}` test request of a configuration), verified, in arrival order. */
  const events = (receiver: HttpsReceiver, secretKey: string) => receiver.received.filter((r) => r.body !== "{}").map((r) => verified(r, secretKey));
  const eventSns = (receiver: HttpsReceiver, secretKey: string) => events(receiver, secretKey).map((u) => sequenced(u)?.sn);

  async function receiver(respond?: Responder): Promise<HttpsReceiver> {
    const started = await startHttpsReceiver(respond);
    receivers.push(started);
    return started;
  }
  /** SetAgentConfig to WEBHOOK at the receiver; answers the new secret key. */
  async function toWebhook(agent: TestAgent, at: HttpsReceiver): Promise<string> {
    const { secretKey } = await agentsApi().setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: `${at.url}/hooks/${agent.userId}` });
    return secretKey;
  }
  const toWebsocket = (agent: TestAgent) => agentsApi().setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBSOCKET });
  /** Lets the agent's socket take everything so far, then goes offline with its position recorded. */
  async function seenOnSocket(agent: TestAgent): Promise<number> {
    const latest = await latestOf(agent);
    // Read before the socket connects: the gateway records its position as it goes.
    const firstUnseen = (await inspect.webhookJobs.deliveredSn(agent.userId)) + 1;
    expect(await socketCatchUp(server, agent, latest)).to.deep.equal(range(firstUnseen, latest));
    await eventually(async () => (await inspect.webhookJobs.deliveredSn(agent.userId)) === latest, "the socket's position to be recorded");
    return latest;
  }
  const sayMany = async (agent: TestAgent, prefix: string, count: number) => {
    for (let start = 0; start < count; start += 10) await Promise.all(range(start, Math.min(start + 9, count - 1)).map((i) => say(agent, `${prefix} ${i}`)));
  };

  describe("from WEBSOCKET to WEBHOOK", () => {
    it("hands the entries the offline socket never had to the webhook, over several pages, in order and each once", async () => {
      const agent = await createAgent(server, owner);
      await say(agent, "had by socket");
      const seen = await seenOnSocket(agent);
      await sayMany(agent, "missed", 130);
      const beforeSwitch = await latestOf(agent);
      const hook = await receiver();
      const secretKey = await toWebhook(agent, hook);
      // Taken over before the configuration was answered.
      expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(beforeSwitch);
      await say(agent, "after the switch");
      const latest = await latestOf(agent);
      await eventually(async () => (await pending(agent)).length === 0 && eventSns(hook, secretKey).length === latest - seen, "every entry by webhook");

      expect(eventSns(hook, secretKey)).to.deep.equal(range(seen + 1, latest));
      const updates = events(hook, secretKey);
      expect(updates.map(textOf).slice(-1)).to.deep.equal(["after the switch"]);
      expect(new Set(updates.slice(0, -1).map(textOf)).size).to.equal(130);
      // A handed-over entry carries the users it references, as a live one does.
      expect(updates[0].users.map((u) => u.userId)).to.deep.equal([owner.userId]);
      expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(latest);
    });

    it("hands the webhook the entries a dropped socket wrote but the agent never confirmed, so they arrive at least once", async () => {
      const agent = await createAgent(server, owner);
      const openBefore = await openSockets(server);
      const socket = await GatewayClient.connect(server.url, "json");
      await socket.authenticate(agent.token);
      const reached = (sn: number) => (f: ServerFrame) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === sn;
      await say(agent, "confirmed");
      const confirmed = await latestOf(agent);
      await socket.next(reached(confirmed));
      await socket.ping();
      await say(agent, "unconfirmed");
      await socket.next(reached(await latestOf(agent)));
      await dropConnection(server, socket, openBefore);
      // The gateway records the confirmed position as the socket goes, without waiting for the write.
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(agent.userId)) === confirmed, "the confirmed position to be recorded");

      const hook = await receiver();
      const secretKey = await toWebhook(agent, hook);
      await eventually(async () => (await pending(agent)).length === 0 && events(hook, secretKey).length === 1, "the unconfirmed entry by webhook");
      expect(events(hook, secretKey).map(textOf)).to.deep.equal(["unconfirmed"]);
      expect(eventSns(hook, secretKey)).to.deep.equal([confirmed + 1]);
    });

    it("routes an append made between the record write and the switch in the inbox the new way, whether or not the inbox had the old route cached", async () => {
      for (const cached of [true, false]) {
        const agent = await createAgent(server, owner);
        const hook = await receiver();
        // The route of this agent is now cached as WEBSOCKET.
        await say(agent, "before");
        await inspect.agents.updateAgent(agent.userId, { deliveryMode: DeliveryMode.webhook, webhookUrl: `${hook.url}/hooks/${agent.userId}` });
        // Without the cache the append reads the new record itself.
        if (!cached) await server.broker.broadcast(BusEvents.agentChanged, { agentUserId: agent.userId });
        await say(agent, "in the window");
        await switchInInbox(server, agent.userId);
        await server.broker.broadcast(BusEvents.agentChanged, { agentUserId: agent.userId });
        await say(agent, "after");
        const { secretKey } = (await inspect.agents.getAgent(agent.userId))!;
        await eventually(async () => (await pending(agent)).length === 0 && events(hook, secretKey).length === 3, "three deliveries");
        expect(events(hook, secretKey).map(textOf), `cached: ${cached}`).to.deep.equal(["before", "in the window", "after"]);
        expect(eventSns(hook, secretKey)).to.deep.equal([1, 2, 3]);
      }
    });

    it("delivers each entry once when messages arrive while the switch is made", async () => {
      const agent = await createAgent(server, owner);
      await say(agent, "had by socket");
      const seen = await seenOnSocket(agent);
      const hook = await receiver();
      const [secretKey] = await Promise.all([toWebhook(agent, hook), sayMany(agent, "during", 40)]);
      await say(agent, "after");
      const latest = await latestOf(agent);
      await eventually(async () => (await pending(agent)).length === 0 && eventSns(hook, secretKey).length >= latest - seen, "every entry by webhook");
      // Nobody was on the socket, so the webhook must have had all of them, and nothing else.
      expect(eventSns(hook, secretKey)).to.deep.equal(range(seen + 1, latest));
    });
  });

  describe("from WEBHOOK to WEBSOCKET", () => {
    it("replays on the socket exactly the entries the webhook had not delivered: the retrying head and everything queued behind it", async () => {
      const agent = await createAgent(server, owner);
      // The test request and the first two events succeed, then the endpoint fails.
      const hook = await receiver((_request, index) => (index <= 2 ? 200 : 500));
      const secretKey = await toWebhook(agent, hook);
      await say(agent, "delivered 1");
      await say(agent, "delivered 2");
      await eventually(async () => (await pending(agent)).length === 0, "the first two deliveries");
      for (const words of ["failing head", "queued 1", "queued 2"]) await say(agent, words);
      const head = await eventually(async () => (await pending(agent)).find((job) => job.attempts === 1), "the head's failed attempt");
      expect(await pending(agent)).to.have.length(3);

      await toWebsocket(agent);
      expect(await pending(agent)).to.deep.equal([]);
      expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(2);
      await say(agent, "by socket");
      expect(await pending(agent)).to.deep.equal([]);
      server.clock.advance(head.nextAttemptAt - server.clock.now());
      const latest = await latestOf(agent);
      const replayed = await socketCatchUp(server, agent, latest);

      const deliveredByWebhook = hook.received.slice(1, 3).map((r) => sequenced(verified(r, secretKey))!.sn);
      expect(deliveredByWebhook).to.deep.equal([1, 2]);
      expect(replayed).to.deep.equal(range(3, latest));
      expect([...deliveredByWebhook, ...replayed]).to.deep.equal(range(1, latest));
      // The dropped head was not sent again after its retry fell due.
      expect(eventSns(hook, secretKey)).to.deep.equal([1, 2, 3]);
    });

    it("takes back what was queued between the record write and the switch in the inbox", async () => {
      const agent = await createAgent(server, owner);
      const hook = await receiver((_request, index) => (index === 0 ? 200 : 500));
      await toWebhook(agent, hook);
      await say(agent, "queued");
      await eventually(async () => (await pending(agent)).find((job) => job.attempts === 1), "the failed attempt");
      await inspect.agents.updateAgent(agent.userId, { deliveryMode: DeliveryMode.websocket, webhookUrl: "" });
      // The inbox still has WEBHOOK cached: this one is queued, and the position moves past it.
      await say(agent, "in the window");
      expect(await pending(agent)).to.have.length(2);
      await switchInInbox(server, agent.userId);
      expect(await pending(agent)).to.deep.equal([]);
      await say(agent, "after");
      const latest = await latestOf(agent);
      expect(await socketCatchUp(server, agent, latest)).to.deep.equal([1, 2, 3]);
    });

    it("has the dispatcher hand a queue whose agent left WEBHOOK mode back to the inbox, which rewinds over it (a switch cut short by a crash)", async () => {
      const agent = await createAgent(server, owner);
      const hook = await receiver((_request, index) => (index === 0 ? 200 : 500));
      await toWebhook(agent, hook);
      await say(agent, "first");
      const head = await eventually(async () => (await pending(agent)).find((job) => job.attempts === 1), "the failed attempt");
      await say(agent, "second");
      // Only the record is written: neither the broadcast nor the inbox switch happen.
      await inspect.agents.updateAgent(agent.userId, { deliveryMode: DeliveryMode.websocket, webhookUrl: "" });
      expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(2);
      server.clock.advance(head.nextAttemptAt - server.clock.now());
      await eventually(async () => (await pending(agent)).length === 0, "the queue to be handed back");
      expect(await inspect.webhookJobs.deliveredSn(agent.userId)).to.equal(0);
      expect(hook.received).to.have.length(2, "the test request and the one failed attempt; nothing sent after the mode changed");
      expect(await socketCatchUp(server, agent, 2)).to.deep.equal([1, 2]);
    });

    it("delivers each entry once when messages arrive while the switch is made", async () => {
      const agent = await createAgent(server, owner);
      const hook = await receiver((_request, index) => (index === 0 ? 200 : 500));
      await toWebhook(agent, hook);
      await sayMany(agent, "before", 10);
      await Promise.all([toWebsocket(agent), sayMany(agent, "during", 40)]);
      await say(agent, "after");
      expect(await pending(agent)).to.deep.equal([]);
      const latest = await latestOf(agent);
      // The endpoint never accepted an event, so the socket must replay every one, once.
      expect(await socketCatchUp(server, agent, latest)).to.deep.equal(range(1, latest));
    });
  });
});

for (const mode of wireModes) {
  describe(`agent event delivery over WebSocket (${mode})`, () => {
    let server: TestServer;
    let inspect: Store;
    let owner: SignedIn;
    let agent: TestAgent;
    before(async () => {
      server = await startTestServer();
      inspect = await openServerStore(server);
      owner = await signInWithCode(server, mode);
      agent = await createAgent(server, owner, mode);
    });
    after(async () => {
      await inspect.close();
      await server.dispose();
    });

    const say = (words: string) => client(server, MessageService, mode, owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text(words) });
    const frameWithSn = (sn: number) => (f: ServerFrame) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === sn;
    const envelopes = (socket: GatewayClient) =>
      socket.frames.flatMap((f) => {
        const entry = f.payload.case === "update" && f.payload.value.update.case === "snUpdate" ? f.payload.value.update.value.update : undefined;
        return entry?.case === "messageEnvelope" ? [{ envelope: entry.value, users: f.payload.case === "update" ? f.payload.value.users : [] }] : [];
      });

    it("pushes live, then replays what arrived while the agent was away and joins the live stream without gap or repeat", async () => {
      const first = await GatewayClient.connect(server.url, mode);
      await first.authenticate(agent.token);
      await say("live one");
      const cardMessage = await client(server, MessageService, mode, agent.token).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: card });
      const seen = await inspect.updates.latestSn(agent.userId);
      await first.next(frameWithSn(seen));
      expect(first.pushedSns()).to.deep.equal(Array.from({ length: seen }, (_, i) => i + 1));
      await first.ping();
      first.close();
      // The delivered position follows what the agent's heartbeat confirmed.
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(agent.userId)) === seen, "the delivered position to reach the last pushed sn");

      await say("missed one");
      await say("missed two");
      // More than one backlog page.
      for (let batch = 0; batch < 11; batch++) await Promise.all(Array.from({ length: 10 }, (_, i) => say(`missed ${batch}.${i}`)));
      // Ephemeral events are for whoever is online: this one is not replayed.
      await client(server, MessageService, mode, owner.accessToken).submitCardAction({ conversationId: agent.conversationId, messageId: cardMessage.messageId, actionData: "{}" });

      // Messages keep coming while the agent reconnects and replays.
      const second = await GatewayClient.connect(server.url, mode);
      let reconnect!: () => void;
      const underWay = new Promise<void>((resolve) => (reconnect = resolve));
      const traffic = (async () => {
        for (let i = 0; i < 15; i++) {
          await say(`during ${i}`);
          if (i === 2) reconnect();
        }
      })();
      await underWay;
      const auth = await second.authenticate(agent.token);
      expect(auth.payload.case === "authResponse" && auth.payload.value.success).to.equal(true);
      await traffic;
      const latest = await inspect.updates.latestSn(agent.userId);
      await second.next(frameWithSn(latest));
      await say("after");
      await second.next(frameWithSn(latest + 1));
      await second.ping();
      second.close();

      expect(second.frames[0].payload.case).to.equal("authResponse");
      expect(second.pushedSns()).to.deep.equal(Array.from({ length: latest + 1 - seen }, (_, i) => seen + 1 + i));
      const texts = envelopes(second).map(({ envelope }) => (envelope.body?.content.case === "text" ? envelope.body.content.value.text : ""));
      expect(texts.slice(0, 2)).to.deep.equal(["missed one", "missed two"]);
      expect(texts.indexOf("during 0")).to.be.above(texts.indexOf("missed 10.0"));
      expect(texts[texts.length - 1]).to.equal("after");
      // Replayed entries carry the users they reference, as live pushes do.
      expect(envelopes(second)[0].users.map((u) => u.userId)).to.deep.equal([owner.userId]);
      expect(second.frames.some((f) => f.payload.case === "update" && f.payload.value.update.case === "nonSnUpdate")).to.equal(false);
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(agent.userId)) === latest + 1, "the delivered position to follow the live pushes");
    });

    const sayTo = (to: TestAgent, words: string) => client(server, MessageService, mode, owner.accessToken).sendMessage({ conversationId: to.conversationId, clientMessageId: clientIds++, body: text(words) });

    it("replays on reconnect every frame written since the agent's last heartbeat when its connection dies, then joins the live stream without a gap", async () => {
      const dying = await createAgent(server, owner, mode);
      const openBefore = await openSockets(server);
      const first = await GatewayClient.connect(server.url, mode);
      await first.authenticate(dying.token);
      await sayTo(dying, "confirmed 1");
      await sayTo(dying, "confirmed 2");
      const confirmed = await inspect.updates.latestSn(dying.userId);
      await first.next(frameWithSn(confirmed));
      await first.ping();
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(dying.userId)) === confirmed, "the confirmed position to be recorded");
      await sayTo(dying, "unconfirmed 1");
      await sayTo(dying, "unconfirmed 2");
      const written = await inspect.updates.latestSn(dying.userId);
      // Written to the socket (the test even sees them), but no heartbeat says the agent had them.
      await first.next(frameWithSn(written));
      expect(written).to.be.above(confirmed);
      await dropConnection(server, first, openBefore);
      expect(await inspect.webhookJobs.deliveredSn(dying.userId)).to.equal(confirmed);

      const second = await GatewayClient.connect(server.url, mode);
      await second.authenticate(dying.token);
      await second.next(frameWithSn(written));
      await sayTo(dying, "live");
      await second.next(frameWithSn(written + 1));
      // The unconfirmed frames come again (an agent drops them by sn), then the live one.
      expect(second.pushedSns()).to.deep.equal(range(confirmed + 1, written + 1));
      expect(first.pushedSns()).to.deep.equal(range(1, written));
      await second.ping();
      second.close();
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(dying.userId)) === written + 1, "the position to follow the second connection's confirmation");
    });

    it("does not replay frames the agent confirmed with a heartbeat, even when its connection then dies", async () => {
      const confirming = await createAgent(server, owner, mode);
      const openBefore = await openSockets(server);
      const first = await GatewayClient.connect(server.url, mode);
      await first.authenticate(confirming.token);
      for (const words of ["one", "two", "three"]) await sayTo(confirming, words);
      const latest = await inspect.updates.latestSn(confirming.userId);
      await first.next(frameWithSn(latest));
      await first.ping();
      await dropConnection(server, first, openBefore);
      // The gateway records the confirmed position as the connection closes, on its own time.
      await eventually(async () => (await inspect.webhookJobs.deliveredSn(confirming.userId)) === latest, "the confirmed position to be recorded");

      await sayTo(confirming, "while away");
      const second = await GatewayClient.connect(server.url, mode);
      await second.authenticate(confirming.token);
      await second.next(frameWithSn(latest + 1));
      expect(second.pushedSns()).to.deep.equal([latest + 1]);
      second.close();
    });
  });
}
