// An agent built on an upstream SDK (nexus-x, nexus-openclaw) turning its own webhook on, driven
// as those SDKs do it (../shared/upstream-wire/notes.md): its handler verifies every request
// exactly as nexus-x does (X-Nexus-Timestamp in seconds within 5 minutes, X-Nexus-Signature
// compared whole, "sha256=" prefix included) and answers 401 otherwise; it handles every message
// it receives, by socket or webhook, with no sn deduplication, so anything sent twice is handled
// twice. nexus-x speaks binary Connect and binary WebSocket frames, openclaw JSON Connect.
import { createHmac } from "node:crypto";
import { create, fromJsonString, toBinary } from "@bufbuild/protobuf";
import { expect } from "chai";
import { AgentService, UpdateAgentSelfConfigRequestSchema } from "../shared/gen/api/v1/agent_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { UpdateSchema, type Update } from "../shared/gen/api/v1/updates_pb.js";
import { AgentDeliveryMode } from "../shared/gen/shared/v1/agent_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer, type WireMode } from "./support/harness.js";
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from "./support/https-receiver.js";
import { eventually, nextClientMessageId, textBody, textOf } from "./support/messaging.js";
import { postRpc } from "./support/raw-rpc.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

const maxSkewSeconds = 300;
const maxBodyBytes = 1 << 20;

/** What nexus-x's webhook handler answers for a request, given the key it was configured with. */
function nexusVerdict(request: ReceivedRequest, secretKey: string): { status: number; update?: Update } {
  const timestamp = request.headers["x-nexus-timestamp"];
  const signature = request.headers["x-nexus-signature"];
  if (typeof timestamp !== "string" || typeof signature !== "string" || !/^\d+$/.test(timestamp)) return { status: 401 };
  if (Math.abs(Math.floor(Date.now() / 1000) - Number(timestamp)) > maxSkewSeconds) return { status: 401 };
  const expected = "sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${request.body}`).digest("hex");
  if (signature !== expected) return { status: 401 };
  try {
    return { status: 200, update: fromJsonString(UpdateSchema, Buffer.from(request.body).subarray(0, maxBodyBytes).toString("utf8")) };
  } catch {
    return { status: 400 };
  }
}

/** The agent: its webhook handler (keyed as its developer configured it) and what it handled. */
class UpstreamAgent {
  secretKey: string;
  /** Texts of the messages the handler acted on, each time it did, by socket or webhook. */
  readonly handled: string[] = [];
  readonly rejected: ReceivedRequest[] = [];
  receiver!: HttpsReceiver;

  constructor(readonly agent: TestAgent) {
    this.secretKey = agent.secretKey;
  }

  async listen(): Promise<void> {
    this.receiver = await startHttpsReceiver((request) => {
      const verdict = nexusVerdict(request, this.secretKey);
      if (verdict.status !== 200) this.rejected.push(request);
      // The empty Update of a configuration's test request carries nothing to act on.
      if (verdict.update) this.handle(verdict.update);
      return verdict.status;
    });
  }

  get webhookUrl(): string {
    return `${this.receiver.url}/nexus/${this.agent.userId}`;
  }

  handle(update: Update): void {
    if (update.update.case !== "snUpdate") return;
    const entry = update.update.value.update;
    if (entry.case === "messageEnvelope") this.handled.push(textOf(entry.value) ?? "");
  }

  /** Handles every message its socket receives, as the SDK's WebSocket transport does. */
  handleSocket(socket: GatewayClient, handledFrames = { count: 0 }): void {
    const take = () => {
      for (; handledFrames.count < socket.frames.length; handledFrames.count++) {
        const frame = socket.frames[handledFrames.count];
        if (frame.payload.case === "update") this.handle(frame.payload.value);
      }
    };
    take();
    socket.socket.on("message", () => setImmediate(take));
  }

  async close(): Promise<void> {
    await this.receiver?.close();
  }
}

describe("an agent on an upstream SDK turns its own webhook on", () => {
  let server: TestServer;
  let owner: SignedIn;
  const agents: UpstreamAgent[] = [];
  before(async () => {
    server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" } });
    owner = await signInWithCode(server);
  });
  after(async () => {
    for (const agent of agents) await agent.close();
    await server.dispose();
  });

  async function upstreamAgent(): Promise<UpstreamAgent> {
    const agent = new UpstreamAgent(await createAgent(server, owner));
    agents.push(agent);
    await agent.listen();
    return agent;
  }
  const say = (agent: UpstreamAgent, words: string) =>
    client(server, MessageService, "json", owner.accessToken).sendMessage({ conversationId: agent.agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody(words) });
  const sayAll = async (agent: UpstreamAgent, words: string[]) => {
    for (const w of words) await say(agent, w);
  };
  const handledAll = (agent: UpstreamAgent, words: string[], what: string) => eventually(() => words.every((w) => agent.handled.includes(w)), what, 10_000);
  /** Waits a little longer for anything sent twice to arrive, then counts. */
  const settled = () => new Promise((resolve) => setTimeout(resolve, 500));

  for (const mode of wireModes) {
    it(`through the owner's SetAgentConfig (${mode}): the test request passes the agent's current verifier, and the key the answer carries signs every delivery after it`, async () => {
      const agent = await upstreamAgent();
      const { secretKey } = await client(server, AgentService, mode, owner.accessToken).setAgentConfig({
        agentUserId: agent.agent.userId,
        deliveryMode: AgentDeliveryMode.WEBHOOK,
        webhookUrl: agent.webhookUrl,
      });
      expect(agent.receiver.received).to.have.length(1, "the test request");
      expect(agent.rejected).to.deep.equal([]);
      // The developer gives the SDK the key the owner's call answered.
      expect(secretKey).to.not.equal(agent.secretKey);
      agent.secretKey = secretKey;
      await say(agent, "after setting the webhook");
      await handledAll(agent, ["after setting the webhook"], "the message by webhook");
      expect(agent.rejected).to.deep.equal([]);
    });

    it(`through its own UpdateAgentSelfConfig (${mode}): tested with the key it holds, which stays; deliveries pass its verifier`, async () => {
      const agent = await upstreamAgent();
      await client(server, AgentService, mode, agent.agent.token).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: agent.webhookUrl });
      await sayAll(agent, ["one", "two"]);
      await handledAll(agent, ["one", "two"], "both messages by webhook");
      expect(agent.rejected).to.deep.equal([]);
      expect(agent.handled).to.deep.equal(["one", "two"]);
    });
  }

  it("is refused WEBHOOK_VERIFICATION_FAILED when its verifier holds another key, and nothing changes", async () => {
    const agent = await upstreamAgent();
    agent.secretKey = "nxk_not_the_agents_key";
    const detail = await expectError(
      client(server, AgentService, "binary", agent.agent.token).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: agent.webhookUrl }),
      Errors.webhookUnreachable,
    );
    expect(detail.metadata.reason).to.equal("answered HTTP 401");
    const { profile } = await client(server, AgentService, "json", owner.accessToken).getMyAgent({ agentUserId: agent.agent.userId });
    expect(profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
  });

  it("gets UpdateAgentSelfConfig answered as upstream's empty response, in binary and in JSON", async () => {
    const agent = await upstreamAgent();
    const path = "/api.v1.AgentService/UpdateAgentSelfConfig";
    const request = create(UpdateAgentSelfConfigRequestSchema, { deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: agent.webhookUrl });
    const binary = await postRpc(server, path, toBinary(UpdateAgentSelfConfigRequestSchema, request), { contentType: "application/proto", token: agent.agent.token });
    expect(binary.status).to.equal(200);
    expect(binary.bytes.length).to.equal(0, "upstream's UpdateAgentSelfConfigResponse has no fields");
    const json = await postRpc(server, path, JSON.stringify({ commands: { items: [{ command: "help", description: "Help" }] } }), { token: agent.agent.token });
    expect(json.status).to.equal(200);
    expect(JSON.parse(new TextDecoder().decode(json.bytes))).to.deep.equal({});
  });

  for (const [how, mode] of [["its own UpdateAgentSelfConfig", "binary"], ["the owner's SetAgentConfig", "json"]] as [string, WireMode][]) {
    it(`switching between socket and webhook by ${how} hands nothing over twice that its live socket received`, async () => {
      const agent = await upstreamAgent();
      const socket = await GatewayClient.connect(server.url, "binary");
      try {
        await socket.authenticate(agent.agent.token);
        agent.handleSocket(socket);
        const early = ["s1", "s2", "s3", "s4", "s5"];
        await sayAll(agent, early);
        await handledAll(agent, early, "the first messages on the socket");

        // No heartbeat since (nexus-x pings every 30 s): the switch itself learns what the socket delivered.
        const toWebhook = { deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: agent.webhookUrl };
        if (mode === "binary") await client(server, AgentService, "binary", agent.agent.token).updateAgentSelfConfig(toWebhook);
        else agent.secretKey = (await client(server, AgentService, "json", owner.accessToken).setAgentConfig({ agentUserId: agent.agent.userId, ...toWebhook })).secretKey;
        const later = ["w1", "w2"];
        await sayAll(agent, later);
        await handledAll(agent, later, "the later messages by webhook");
        await settled();
        expect(agent.handled).to.deep.equal([...early, ...later], "each message handled once, in order");
        expect(agent.rejected).to.deep.equal([]);

        // Back to the socket, which stayed open: it carries the agent's messages again, none twice.
        const toSocket = { deliveryMode: AgentDeliveryMode.WEBSOCKET };
        if (mode === "binary") await client(server, AgentService, "binary", agent.agent.token).updateAgentSelfConfig(toSocket);
        else await client(server, AgentService, "json", owner.accessToken).setAgentConfig({ agentUserId: agent.agent.userId, ...toSocket });
        const webhookRequests = agent.receiver.received.length;
        await say(agent, "back on the socket");
        await handledAll(agent, ["back on the socket"], "the message on the socket again");
        await settled();
        expect(agent.handled).to.deep.equal([...early, ...later, "back on the socket"]);
        expect(agent.receiver.received.length).to.equal(webhookRequests, "nothing more by webhook");
      } finally {
        socket.close();
      }
    });
  }
});
