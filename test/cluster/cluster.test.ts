// Against the local cluster (`npm run cluster`: 2 api, 2 engine, 2 gateway and 1 webhooks
// process on Cassandra, Kafka, Redis and MinIO behind nginx), through its front only: the API and
// /ws work across nodes, and losing a process loses nothing that was acknowledged.
import { createHmac } from "node:crypto";
import { expect } from "chai";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { AgentDeliveryMode } from "../../shared/gen/shared/v1/agent_pb.js";
import { startHttpsReceiver } from "../support/https-receiver.js";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import type { SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { StreamPhase } from "../../shared/gen/shared/v1/message_pb.js";
import { restartRedis } from "../../scripts/services/redis.js";
import { signInWithCode, type SignedIn } from "../support/accounts.js";
import { clusterPid, testCluster, type TestCluster } from "../support/cluster.js";
import { client, freshEmail, lastCode } from "../support/harness.js";
import { eventually, nextClientMessageId, pushedSnUpdates, streamStartBody, textBody, wholeStream } from "../support/messaging.js";
import { befriend, createAgent } from "../support/social.js";
import { GatewayClient } from "../support/ws-client.js";

const envelopesIn = (updates: SnUpdate[], conversationId: bigint) =>
  updates.flatMap((u) => (u.update.case === "messageEnvelope" && u.update.value.conversationId === conversationId ? [u.update.value] : []));

/** Retries a call a client would retry (the node it reached died or lost the key): same request, so idempotent. */
async function retried<T>(call: () => Promise<T>, deadlineMs = 60_000): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      return await call();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

describe("the local cluster, through its front", function () {
  this.timeout(300_000);
  let cluster: TestCluster;

  before(async () => {
    cluster = await testCluster();
  });

  /** Each fault test begins on the whole cluster: the nodes killed by the tests before are back (the launcher restarts them). */
  const wholeAgain = () =>
    eventuallyAsync(async () => {
      const answer = await fetch(`${cluster.url}/healthz`);
      return answer.status === 200 && ((await answer.json()) as { down: string[] }).down.length === 0;
    }, "every node ready");

  it("serves sign-in, messages and live pushes across api, engine and gateway nodes", async () => {
    const [a, b, c] = [await signInWithCode(cluster), await signInWithCode(cluster), await signInWithCode(cluster)];
    const ab = await befriend(cluster, a, b);
    await befriend(cluster, a, c);
    // nginx spreads sockets over both gateways: several per user, so both gateways hold some.
    const sockets: GatewayClient[] = [];
    for (const user of [b, b, c, c]) {
      const socket = await GatewayClient.connect(cluster.url, "json");
      await socket.authenticate(user.accessToken);
      sockets.push(socket);
    }
    const group = (await client(cluster, GroupService, "json", a.accessToken).createGroup({ name: "cluster", memberIds: [b.userId, c.userId] })).group!;
    const privateSent = await client(cluster, MessageService, "json", a.accessToken).sendMessage({ conversationId: ab, clientMessageId: nextClientMessageId(), body: textBody("hello b") });
    const groupSent = await client(cluster, MessageService, "json", a.accessToken).sendMessage({ conversationId: BigInt(group.groupId), clientMessageId: nextClientMessageId(), body: textBody("hello all") });
    for (const [i, socket] of sockets.entries()) {
      const expected = i < 2 ? [privateSent.messageId, groupSent.messageId] : [groupSent.messageId];
      await eventually(
        () => expected.every((id) => pushedSnUpdates(socket).some((u) => u.update.case === "messageEnvelope" && u.update.value.messageId === id)),
        `socket ${i} receiving its messages`,
        10_000,
      );
    }
    for (const socket of sockets) socket.close();
  });

  it("loses nothing acknowledged when an engine is killed under sends, group sends and a stream: ids and sns dense, the stream finished", async () => {
    const users: SignedIn[] = [];
    for (let i = 0; i < 4; i++) users.push(await signInWithCode(cluster));
    const [owner, ...others] = users;
    const privates = await Promise.all(others.map((other) => befriend(cluster, owner, other)));
    const group = (await client(cluster, GroupService, "json", owner.accessToken).createGroup({ name: "under fire", memberIds: others.map((u) => u.userId) })).group!;
    const groupId = BigInt(group.groupId);
    const agent = await createAgent(cluster as never, owner);

    const acknowledged = new Map<bigint, bigint[]>();
    let killedAt = Infinity;
    let acknowledgedAfterKill = 0;
    const send = async (sender: SignedIn, conversationId: bigint, text: string) => {
      const clientMessageId = nextClientMessageId();
      const { messageId } = await retried(() => client(cluster, MessageService, "json", sender.accessToken).sendMessage({ conversationId, clientMessageId, body: textBody(text) }));
      acknowledged.set(conversationId, [...(acknowledged.get(conversationId) ?? []), messageId]);
      if (Date.now() > killedAt) acknowledgedAfterKill += 1;
    };
    let stop = false;
    const senders = [
      ...privates.map(async (conversationId, i) => {
        for (let n = 0; !stop; n++) await send(n % 2 ? owner : others[i], conversationId, `p${n}`);
      }),
      (async () => {
        for (let n = 0; !stop; n++) await send(users[n % users.length], groupId, `g${n}`);
      })(),
    ];
    // The agent streams into its conversation with the owner while the engine dies.
    const asAgent = client(cluster, MessageService, "json", agent.token);
    const stream = await retried(() => asAgent.sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() }));
    let text = "";
    for (let seq = 1; seq <= 5; seq++) {
      text += `token${seq} `;
      await retried(() => asAgent.pushStreamDelta({ conversationId: agent.conversationId, messageId: stream.messageId, seq, delta: `token${seq} ` }));
    }

    await new Promise((resolve) => setTimeout(resolve, 1_500));
    killedAt = Date.now();
    process.kill(clusterPid(cluster, "engine-1"), "SIGKILL");
    for (let seq = 6; seq <= 10; seq++) {
      text += `token${seq} `;
      // A delta that met the dead node is lost (deltas are not stored); the END carries the whole text.
      await retried(() => asAgent.pushStreamDelta({ conversationId: agent.conversationId, messageId: stream.messageId, seq, delta: `token${seq} ` })).catch(() => undefined);
    }
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    // An END whose answer was lost to the move may have been applied: its retry then finds the
    // stream ended (FAILED_PRECONDITION), and the message itself says how it ended (below).
    let endAttempts = 0;
    await retried(async () => {
      endAttempts += 1;
      try {
        await asAgent.endStream({ conversationId: agent.conversationId, messageId: stream.messageId, accumulatedText: text });
      } catch (err) {
        if (endAttempts > 1 && String(err).includes("failed_precondition")) return;
        throw err;
      }
    });
    stop = true;
    await Promise.all(senders);
    // The load went on across the kill: sends were acknowledged after it.
    expect(acknowledgedAfterKill).to.be.above(10);

    for (const [conversationId, ids] of acknowledged) {
      const sorted = [...ids].sort((x, y) => (x < y ? -1 : 1));
      // No id given twice, and every acknowledged message kept.
      expect(new Set(ids).size).to.equal(ids.length);
      const history = envelopesIn(await wholeStream(cluster, owner), conversationId).map((envelope) => envelope.messageId);
      for (const id of sorted) expect(history).to.include(id);
      // Dense: the ids the conversation holds run without a gap (system messages included).
      const held = [...new Set(history)].sort((x, y) => (x < y ? -1 : 1));
      expect(held.map((id, i) => id - held[0] - BigInt(i)).every((gap) => gap === 0n)).to.equal(true);
    }
    for (const user of users) {
      const stream = await wholeStream(cluster, user);
      expect(stream.map((u) => u.sn)).to.deep.equal(stream.map((_u, i) => i + 1));
    }
    const ended = (await client(cluster, MessageService, "json", owner.accessToken).getMessage({ conversationId: agent.conversationId, messageId: stream.messageId })).message!;
    const content = ended.body?.content;
    expect(content?.case).to.equal("stream");
    expect(content?.case === "stream" && [content.value.phase, content.value.accumulatedText]).to.deep.equal([StreamPhase.END, text]);
  });

  it("a killed gateway's clients reconnect through the front and catch up with GetDifference without a gap", async () => {
    await wholeAgain();
    const [a, b] = [await signInWithCode(cluster), await signInWithCode(cluster)];
    const conversationId = await befriend(cluster, a, b);
    const { state } = await client(cluster, SyncService, "json", b.accessToken).getCurrentState({});
    const baseSn = state!.latestSn;
    const sockets: GatewayClient[] = [];
    for (let i = 0; i < 4; i++) {
      const socket = await GatewayClient.connect(cluster.url, "json");
      await socket.authenticate(b.accessToken);
      sockets.push(socket);
    }
    const say = (text: string) => retried(() => client(cluster, MessageService, "json", a.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) }));
    await say("before");
    process.kill(clusterPid(cluster, "gateway-1"), "SIGKILL");
    for (let i = 0; i < 5; i++) await say(`during ${i}`);
    // Each client: the sn it saw last, then a fresh connection (through the front) and GetDifference from there.
    for (const socket of sockets) {
      const seen = pushedSnUpdates(socket).map((u) => u.sn);
      const last = seen.length > 0 ? Math.max(...seen) : baseSn;
      const fresh = await retried(async () => {
        const again = await GatewayClient.connect(cluster.url, "json");
        await again.authenticate(b.accessToken);
        return again;
      });
      const caughtUp = await client(cluster, SyncService, "json", b.accessToken).getDifference({ sn: last });
      // Every sn after the connection was made, once: what was pushed before the kill, then the rest.
      const all = [...new Set([...seen, ...caughtUp.updates.map((u) => u.sn)])].sort((x, y) => x - y);
      expect(all).to.deep.equal(all.map((_sn, i) => baseSn + 1 + i));
      expect(all.at(-1)).to.equal(caughtUp.sn);
      expect(envelopesIn([...pushedSnUpdates(socket), ...caughtUp.updates], conversationId)).to.have.length(6);
      fresh.close();
      socket.close();
    }
  });

  it("a killed webhooks node's deliveries resume in order per agent, and a dead endpoint delays no other agent", async () => {
    await wholeAgain();
    const owner = await signInWithCode(cluster);
    const [live, dead] = [await createAgent(cluster as never, owner), await createAgent(cluster as never, owner)];
    const liveReceiver = await startHttpsReceiver(() => 200);
    // It answers the configuration's test request, then fails every delivery.
    const deadReceiver = await startHttpsReceiver((request) => (request.body === "{}" ? 200 : 503));
    try {
      const agents = client(cluster, AgentService, "json", owner.accessToken);
      // Each configuration answers a fresh signing key.
      const { secretKey } = await agents.setAgentConfig({ agentUserId: live.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: liveReceiver.url });
      await agents.setAgentConfig({ agentUserId: dead.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: deadReceiver.url });
      const say = (agent: typeof live, text: string) =>
        retried(() => client(cluster, MessageService, "json", owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) }));
      const texts = Array.from({ length: 10 }, (_, i) => `w${i}`);
      for (const text of texts.slice(0, 5)) {
        await say(dead, text);
        await say(live, text);
      }
      await liveReceiver.waitFor(6);
      process.kill(clusterPid(cluster, "webhooks-1"), "SIGKILL");
      for (const text of texts.slice(5)) await say(live, text);
      // The launcher starts the node again; it rejoins the fleet's group and takes the agents back.
      const deliveries = () => liveReceiver.received.filter((request) => request.body !== "{}");
      await eventuallyAsync(async () => new Set(deliveries().map((r) => r.body)).size >= 10, "every delivery to the live agent", 120_000);
      const received = deliveries().map((request) => {
        const expected = createHmac("sha256", secretKey).update(`${String(request.headers["x-service-timestamp"])}.${request.body}`).digest("hex");
        expect(request.headers["x-service-signature"]).to.equal(`sha256=${expected}`);
        const update = JSON.parse(request.body) as { snUpdate?: { messageEnvelope?: { body?: { text?: { text?: string } } } } };
        return update.snUpdate?.messageEnvelope?.body?.text?.text;
      });
      // At least once: a delivery cut off by the kill may come again, never out of order.
      const distinct = received.filter((text, i) => text !== received[i - 1]);
      expect(distinct).to.deep.equal(texts);
      // The dead endpoint kept being tried meanwhile, beside the live one.
      expect(deadReceiver.received.filter((request) => request.body !== "{}").length).to.be.above(0);
    } finally {
      await liveReceiver.close();
      await deadReceiver.close();
    }
  });

  it("logins and rate limits recover after Redis restarts, without a node crashing", async () => {
    const nodes = ["api-1", "api-2", "engine-1", "engine-2", "gateway-1", "gateway-2", "webhooks-1"];
    await wholeAgain();
    const pidsBefore = nodes.map((node) => clusterPid(cluster, node));
    await restartRedis(cluster.dataDir, { downMs: 1_000 });
    const email = freshEmail();
    const auth = client(cluster, AuthService, "json");
    const { verifyToken } = await retried(() => auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email }), 30_000);
    const signed = await auth.verifyCode({ verifyToken, code: lastCode(cluster, email), deviceInfo: { deviceId: "d1", platform: 1, deviceName: "t", appVersion: "1", osVersion: "1" } as never });
    expect(signed.userId).to.be.above(0);
    // The per-identity code limit holds again: a second code at once is refused.
    const again = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email }).catch((err: unknown) => err);
    expect(String(again)).to.match(/resource_exhausted/);
    expect(nodes.map((node) => clusterPid(cluster, node))).to.deep.equal(pidsBefore);
  });
});

async function eventuallyAsync(condition: () => Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what}: not in time`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
