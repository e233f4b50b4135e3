// The whole agent journey through real clients: a user adds a public agent, the agent (the example
// under examples/webhook-agent, in webhook mode) answers with a streamed reply and a card, the user
// presses a card button and sees the agent's answer. Every step is watched on the user's socket.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AgentVisibility } from "../shared/gen/shared/v1/agent_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import type { ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { privateConversationId } from "../shared/ids.js";
import { configureOwnWebhook, startWebhookAgent, type RunningAgent } from "../examples/webhook-agent/agent.js";
import { signInWithCode } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { testTlsDir } from "./support/https-receiver.js";
import { createAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

function envelopeOf(frame: ServerFrame, kind: "snUpdate" | "nonSnUpdate"): MessageEnvelope | undefined {
  if (frame.payload.case !== "update" || frame.payload.value.update.case !== kind) return undefined;
  const inner = frame.payload.value.update.value.update;
  return inner.case === "messageEnvelope" ? inner.value : undefined;
}

describe("an agent conversation end to end (webhook agent, live user socket)", () => {
  let server: TestServer;
  let agent: RunningAgent | undefined;
  before(async () => {
    server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" } });
  });
  after(async () => {
    await agent?.close();
    await server.dispose();
  });

  it("adds the agent, gets a streamed reply and a card, presses a button, sees the answer", async () => {
    const developer = await signInWithCode(server, "json");
    const created = await createAgent(server, developer);
    // The owner's SetAgentConfig issues the agent a new key: the one the agent verifies with from now on.
    const { secretKey } = await client(server, AgentService, "json", developer.accessToken).setAgentConfig({ agentUserId: created.userId, visibility: AgentVisibility.PUBLIC });
    const tlsDir = testTlsDir();
    agent = await startWebhookAgent({
      serverUrl: server.url,
      token: created.token,
      secretKey,
      tls: { cert: readFileSync(join(tlsDir, "cert.pem")), key: readFileSync(join(tlsDir, "key.pem")) },
      wordDelayMs: 0,
      log: () => {},
    });
    // Its own webhook configuration is tested with that key, and keeps it.
    await configureOwnWebhook(server.url, created.token, agent.url);

    const user = await signInWithCode(server, "json");
    const socket = await GatewayClient.connect(server.url, "json");
    await socket.authenticate(user.accessToken);
    await client(server, ContactService, "json", user.accessToken).addContact({ targetUserId: created.userId });
    const conversationId = privateConversationId(user.userId, created.userId);

    const messages = client(server, MessageService, "json", user.accessToken);
    const question = "what is the weather like today";
    const sent = await messages.sendMessage({
      conversationId,
      clientMessageId: 1n,
      body: { type: MessageType.TEXT, content: { case: "text", value: { text: question } } },
    });

    // START arrives as a sequenced entry replying to the question, then deltas, then END.
    const startFrame = await socket.next((f) => envelopeOf(f, "snUpdate")?.body?.content.case === "stream", 15_000);
    const start = envelopeOf(startFrame, "snUpdate")!;
    expect(start.senderId).to.equal(created.userId);
    expect(start.replyTo?.messageId).to.equal(sent.messageId);
    const streamId = start.messageId;
    const endFrame = await socket.next((f) => {
      const e = envelopeOf(f, "snUpdate");
      return e?.messageId === streamId && e.body?.content.case === "stream" && e.body.content.value.phase === StreamPhase.END;
    }, 15_000);
    const expectedText = `You said: ${question}`;
    const end = envelopeOf(endFrame, "snUpdate")!;
    expect(end.body?.content.case === "stream" && end.body.content.value.accumulatedText).to.equal(expectedText);

    const deltas = socket.frames.map((f) => envelopeOf(f, "nonSnUpdate")).filter((e) => e?.messageId === streamId);
    expect(deltas.length).to.equal(expectedText.split(" ").length);
    const streamed = deltas.map((e) => (e!.body?.content.case === "stream" ? e!.body.content.value : undefined));
    expect(streamed.map((s) => s!.seq)).to.deep.equal(streamed.map((_, index) => index + 1));
    expect(streamed.map((s) => s!.delta).join("")).to.equal(expectedText);
    const endIndex = socket.frames.indexOf(endFrame);
    expect(socket.frames.indexOf(socket.frames.find((f) => envelopeOf(f, "nonSnUpdate")?.messageId === streamId)!)).to.be.lessThan(endIndex);

    // Then the card, and the user presses "Yes".
    const cardFrame = await socket.next((f) => envelopeOf(f, "snUpdate")?.body?.content.case === "card", 15_000);
    const cardMessage = envelopeOf(cardFrame, "snUpdate")!;
    expect(cardMessage.senderId).to.equal(created.userId);
    const { actionId } = await messages.submitCardAction({ conversationId, messageId: cardMessage.messageId, actionData: JSON.stringify({ helpful: true }), verb: "" });

    const answerFrame = await socket.next((f) => f.payload.case === "update" && f.payload.value.update.case === "nonSnUpdate" && f.payload.value.update.value.update.case === "cardActionAnswer", 15_000);
    const answer = answerFrame.payload.case === "update" && answerFrame.payload.value.update.case === "nonSnUpdate" && answerFrame.payload.value.update.value.update.case === "cardActionAnswer" ? answerFrame.payload.value.update.value.update.value : undefined;
    expect(answer).to.deep.include({ actionId, conversationId, messageId: cardMessage.messageId, agentUserId: created.userId, text: "Glad it helped!", showAlert: false });

    // The history holds the question, the finished stream and the card, in that order.
    const history = await messages.getMessageHistory({ conversationId, limit: 10 });
    const byId = [...history.messages].sort((a, b) => Number(a.messageId - b.messageId));
    expect(byId.map((m) => m.body?.type)).to.include.ordered.members([MessageType.TEXT, MessageType.STREAM, MessageType.CARD]);
    socket.close();
  });
});
