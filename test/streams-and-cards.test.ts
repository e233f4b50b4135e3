import { expect } from "chai";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { fromBinary } from "@bufbuild/protobuf";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import type { ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { MessageBodySchema, MessageEntityType, MessageType, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

type BodyInit = MessageInitShape<typeof MessageBodySchema>;
const streamStart: BodyInit = { type: MessageType.STREAM, content: { case: "stream", value: { contentType: "text/markdown" } } };
const card: BodyInit = { type: MessageType.CARD, content: { case: "card", value: { cardJson: JSON.stringify({ type: "AdaptiveCard", actions: [{ type: "Action.Submit" }] }), fallbackText: "a card" } } };
let clientIds = 1n;

/** The message envelopes a socket received, sequenced or ephemeral, in arrival order. */
function envelopes(ws: GatewayClient, kind: "snUpdate" | "nonSnUpdate"): MessageEnvelope[] {
  return ws.frames.flatMap((f) => {
    if (f.payload.case !== "update" || f.payload.value.update.case !== kind) return [];
    const inner = f.payload.value.update.value.update;
    return inner.case === "messageEnvelope" ? [inner.value] : [];
  });
}
async function eventually(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("the condition did not hold in time");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
const printable = (value: unknown) => JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
const streamOf = (e: MessageEnvelope | undefined) => (e?.body?.content.case === "stream" ? e.body.content.value : undefined);

for (const mode of wireModes) {
  describe(`streamed agent output and cards (${mode})`, () => {
    let server: TestServer;
    let owner: SignedIn;
    let agent: TestAgent;
    let userSocket: GatewayClient;
    let agentSocket: GatewayClient;
    before(async () => {
      server = await startTestServer();
      owner = await signInWithCode(server, mode);
      agent = await createAgent(server, owner, mode);
    });
    beforeEach(async () => {
      userSocket = await GatewayClient.connect(server.url, mode);
      await userSocket.authenticate(owner.accessToken);
      agentSocket = await GatewayClient.connect(server.url, mode);
      const answer = await agentSocket.authenticate(agent.token);
      expect(answer.payload.case === "authResponse" && answer.payload.value).to.deep.include({ success: true, userId: agent.userId });
    });
    afterEach(() => {
      userSocket.close();
      agentSocket.close();
    });
    after(async () => server.dispose());

    const asAgent = () => client(server, MessageService, mode, agent.token);
    const asUser = () => client(server, MessageService, mode, owner.accessToken);
    const conversationId = () => agent.conversationId;
    const startStream = () => asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: streamStart });

    it("runs a stream: START sequenced, DELTA ephemeral with seq, GetMessage mid-stream, END sequenced with text and entities", async () => {
      const { messageId } = await startStream();
      await eventually(() => envelopes(userSocket, "snUpdate").some((e) => e.messageId === messageId));
      const startContent = streamOf(envelopes(userSocket, "snUpdate").find((e) => e.messageId === messageId));
      expect(startContent).to.deep.include({ phase: StreamPhase.START, seq: 0, delta: "", accumulatedText: "", errorMessage: "", contentType: "text/markdown" });

      for (const [seq, delta] of [[1, "Hel"], [2, "lo "], [3, "world"]] as const) {
        await asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq, delta });
      }
      await eventually(() => envelopes(userSocket, "nonSnUpdate").filter((e) => e.messageId === messageId).length === 3);
      const deltas = envelopes(userSocket, "nonSnUpdate").filter((e) => e.messageId === messageId).map(streamOf);
      expect(deltas.map((d) => [d?.phase, d?.seq, d?.delta, d?.accumulatedText])).to.deep.equal([
        [StreamPhase.DELTA, 1, "Hel", ""],
        [StreamPhase.DELTA, 2, "lo ", ""],
        [StreamPhase.DELTA, 3, "world", ""],
      ]);
      expect(deltas.every((d) => d?.entities.length === 0 && d.errorMessage === "")).to.equal(true);

      const mid = await asUser().getMessage({ conversationId: conversationId(), messageId });
      expect(streamOf(mid.message)).to.deep.include({ phase: StreamPhase.DELTA, accumulatedText: "Hello world" });

      // Deltas never reach the database: the stored body is still the bare START.
      const store = await openServerStore(server);
      try {
        const stored = await store.messages.getMessage(conversationId(), messageId);
        const body = fromBinary(MessageBodySchema, stored!.body);
        expect(body.content.case === "stream" && [body.content.value.phase, body.content.value.accumulatedText]).to.deep.equal([StreamPhase.START, ""]);
      } finally {
        await store.close();
      }

      const entities = [{ type: MessageEntityType.URL, offset: 0, length: 5, data: { case: "url" as const, value: { url: "https://example.com" } } }];
      await asAgent().endStream({ conversationId: conversationId(), messageId, accumulatedText: "Hello world", entities });
      await eventually(() => envelopes(userSocket, "snUpdate").filter((e) => e.messageId === messageId).length === 2);
      const end = streamOf(envelopes(userSocket, "snUpdate").filter((e) => e.messageId === messageId)[1]);
      expect(end).to.deep.include({ phase: StreamPhase.END, seq: 0, delta: "", accumulatedText: "Hello world", errorMessage: "" });
      expect(end?.entities).to.have.length(1);
      const after = await asUser().getMessage({ conversationId: conversationId(), messageId });
      expect(streamOf(after.message)).to.deep.include({ phase: StreamPhase.END, accumulatedText: "Hello world" });
      expect(streamOf(after.message)?.entities).to.have.length(1);
    });

    it("starts a stream from a bare STREAM body (type only, no content, as the upstream Go SDK sends it) in text/plain", async () => {
      const { messageId } = await asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: { type: MessageType.STREAM } });
      await eventually(() => envelopes(userSocket, "snUpdate").some((e) => e.messageId === messageId));
      expect(streamOf(envelopes(userSocket, "snUpdate").find((e) => e.messageId === messageId))).to.deep.include({ phase: StreamPhase.START, contentType: "text/plain" });
      await asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 1, delta: "hi" });
      await asAgent().endStream({ conversationId: conversationId(), messageId, accumulatedText: "hi" });
      const after = await asUser().getMessage({ conversationId: conversationId(), messageId });
      expect(streamOf(after.message)).to.deep.include({ phase: StreamPhase.END, accumulatedText: "hi" });
      // A person may not stream, bare body or not; a body of another type still needs its content.
      await expectError(asUser().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: { type: MessageType.STREAM } }), Errors.invalidBody);
      await expectError(asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: { type: MessageType.TEXT } }), Errors.invalidBody);
    });

    it("drops repeated seq values and reorders deltas that arrive ahead of a gap", async () => {
      const { messageId } = await startStream();
      const push = (seq: number, delta: string) => asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq, delta });
      await push(1, "a");
      await push(1, "a");
      await push(3, "c");
      await push(2, "b");
      await eventually(() => envelopes(userSocket, "nonSnUpdate").filter((e) => e.messageId === messageId).length === 3);
      const seqs = envelopes(userSocket, "nonSnUpdate").filter((e) => e.messageId === messageId).map((e) => streamOf(e)?.seq);
      expect(seqs).to.deep.equal([1, 2, 3]);
      const detail = await expectError(push(500, "far ahead"), Errors.streamSequenceGap);
      expect(detail.metadata.expectedSeq).to.equal("4");
      expect(streamOf((await asUser().getMessage({ conversationId: conversationId(), messageId })).message)?.accumulatedText).to.equal("abc");
      // Without a final text, EndStream keeps what the deltas built.
      await asAgent().endStream({ conversationId: conversationId(), messageId });
      expect(streamOf((await asUser().getMessage({ conversationId: conversationId(), messageId })).message)?.accumulatedText).to.equal("abc");
    });

    it("ErrorStream persists the partial text and error; every later stream call is FAILED_PRECONDITION", async () => {
      const { messageId } = await startStream();
      await asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 1, delta: "partial" });
      await asAgent().errorStream({ conversationId: conversationId(), messageId, errorMessage: "model overloaded" });
      const { message } = await asUser().getMessage({ conversationId: conversationId(), messageId });
      expect(streamOf(message)).to.deep.include({ phase: StreamPhase.ERROR, accumulatedText: "partial", errorMessage: "model overloaded" });
      expect(streamOf(message)?.entities).to.deep.equal([]);
      await expectError(asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 2, delta: "x" }), Errors.streamFinished);
      await expectError(asAgent().endStream({ conversationId: conversationId(), messageId, accumulatedText: "x" }), Errors.streamFinished);
      await expectError(asAgent().errorStream({ conversationId: conversationId(), messageId, errorMessage: "again" }), Errors.streamFinished);
      await expectError(asAgent().errorStream({ conversationId: conversationId(), messageId, errorMessage: "e".repeat(1001) }), Errors.invalidArgument);
    });

    it("after EndStream, every later stream call is FAILED_PRECONDITION and the ended text stays", async () => {
      const { messageId } = await startStream();
      await asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 1, delta: "done" });
      await asAgent().endStream({ conversationId: conversationId(), messageId, accumulatedText: "done." });
      await expectError(asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 2, delta: "x" }), Errors.streamFinished);
      await expectError(asAgent().endStream({ conversationId: conversationId(), messageId, accumulatedText: "other" }), Errors.streamFinished);
      await expectError(asAgent().errorStream({ conversationId: conversationId(), messageId, errorMessage: "late" }), Errors.streamFinished);
      const { message } = await asUser().getMessage({ conversationId: conversationId(), messageId });
      expect(streamOf(message)).to.deep.include({ phase: StreamPhase.END, accumulatedText: "done.", errorMessage: "" });
    });

    it("answers NOT_FOUND for a message that is not the agent's stream and PERMISSION_DENIED for user tokens", async () => {
      const { messageId } = await asUser().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "not a stream" } } } });
      await expectError(asAgent().pushStreamDelta({ conversationId: conversationId(), messageId, seq: 1, delta: "x" }), Errors.streamNotFound);
      await expectError(asAgent().endStream({ conversationId: conversationId(), messageId: 9999n }), Errors.streamNotFound);
      const stream = await startStream();
      await expectError(asUser().pushStreamDelta({ conversationId: conversationId(), messageId: stream.messageId, seq: 1, delta: "x" }), Errors.agentOnly);
      await expectError(asUser().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: streamStart }), Errors.invalidBody);
    });

    it("forwards a card action to the agent and the agent's answer to the user", async () => {
      const { messageId } = await asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: card });
      const { actionId } = await asUser().submitCardAction({ conversationId: conversationId(), messageId, actionData: JSON.stringify({ choice: "yes" }), verb: "confirm" });
      expect(actionId).to.be.a("string").and.not.equal("");
      const isCardAction = (f: ServerFrame) => f.payload.case === "update" && f.payload.value.update.case === "nonSnUpdate" && f.payload.value.update.value.update.case === "cardAction";
      const frame = await agentSocket.next(isCardAction);
      const payload = frame.payload.case === "update" && frame.payload.value.update.case === "nonSnUpdate" && frame.payload.value.update.value.update.case === "cardAction" ? frame.payload.value.update.value.update.value : undefined;
      expect(payload).to.deep.include({ actionId, conversationId: conversationId(), messageId, senderId: owner.userId, actionData: '{"choice":"yes"}', verb: "confirm" });

      await asAgent().answerCardAction({ conversationId: conversationId(), messageId, actionId, text: "Done!", showAlert: true });
      const answerFrame = await userSocket.next((f) => f.payload.case === "update" && f.payload.value.update.case === "nonSnUpdate" && f.payload.value.update.value.update.case === "cardActionAnswer");
      const answer = answerFrame.payload.case === "update" && answerFrame.payload.value.update.case === "nonSnUpdate" && answerFrame.payload.value.update.value.update.case === "cardActionAnswer" ? answerFrame.payload.value.update.value.update.value : undefined;
      expect(answer).to.deep.include({ actionId, conversationId: conversationId(), messageId, agentUserId: agent.userId, text: "Done!", showAlert: true });

      await expectError(asAgent().answerCardAction({ conversationId: conversationId(), messageId, actionId: "unknown", showAlert: false }), Errors.cardActionNotFound);
      await expectError(asUser().answerCardAction({ conversationId: conversationId(), messageId, actionId, showAlert: false }), Errors.agentOnly);
      await expectError(asAgent().answerCardAction({ conversationId: conversationId(), messageId, actionId, text: "t".repeat(201), showAlert: false }), Errors.invalidArgument);
    });

    it("expires card actions after 5 minutes and refuses actions on messages that are not cards", async () => {
      const { messageId } = await asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: card });
      const { actionId } = await asUser().submitCardAction({ conversationId: conversationId(), messageId, actionData: "{}" });
      server.clock.advance(5 * 60 * 1000 + 1000);
      const renewedAgent = client(server, MessageService, mode, agent.token);
      await expectError(renewedAgent.answerCardAction({ conversationId: conversationId(), messageId, actionId, showAlert: false }), Errors.cardActionNotFound);
      const plain = await asAgent().sendMessage({ conversationId: conversationId(), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "plain" } } } });
      await expectError(asUser().submitCardAction({ conversationId: conversationId(), messageId: plain.messageId, actionData: "{}" }), Errors.notACard);
      await expectError(asUser().submitCardAction({ conversationId: conversationId(), messageId: 99999n, actionData: "{}" }), Errors.messageNotFound);
      await expectError(asUser().submitCardAction({ conversationId: conversationId(), messageId, actionData: "" }), Errors.invalidArgument);
    });

    it("CreateAgent answers the token and secret once, lists the agent, and makes it the creator's contact", async () => {
      const agents = client(server, AgentService, mode, owner.accessToken);
      const mine = await agents.listMyAgents({});
      const profile = mine.agents.find((a) => a.user?.userId === agent.userId);
      expect(profile?.tokenPrefix).to.equal(agent.token.slice(0, 12));
      expect(printable(mine)).to.not.include(agent.token);
      expect(printable(mine)).to.not.include(agent.secretKey);
      const info = await agents.getAgentInfo({ agentUserId: agent.userId });
      expect(info.agent?.creator?.userId).to.equal(owner.userId);
      await expectError(agents.getAgentInfo({ agentUserId: owner.userId }), Errors.agentNotFound);
      const other = await signInWithCode(server, mode);
      await expectError(client(server, AgentService, mode, other.accessToken).getMyAgent({ agentUserId: agent.userId }), Errors.notAgentCreator);
      await expectError(agents.createAgent({ username: `u_${agent.userId}`, name: "x" }), Errors.invalidUsername);
    });
  });
}
