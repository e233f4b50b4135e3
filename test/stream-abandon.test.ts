import { expect } from "chai";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import type { ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { Errors } from "../shared/errors.js";
import { MessagePolicy, abandonedStreamError } from "../engine/messages/conversation-actor.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { callOnEveryNode, client, startTestServer, type TestServer } from "./support/harness.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

const minute = 60 * 1000;
const streamEnvelope = (frame: ServerFrame): MessageEnvelope | undefined => {
  if (frame.payload.case !== "update" || frame.payload.value.update.case !== "snUpdate") return undefined;
  const inner = frame.payload.value.update.value.update;
  return inner.case === "messageEnvelope" && inner.value.body?.content.case === "stream" ? inner.value : undefined;
};

describe("MessageService streams abandoned by their agent", () => {
  let server: TestServer;
  let owner: SignedIn;
  let agent: TestAgent;
  before(async () => {
    server = await startTestServer();
    owner = await signInWithCode(server, "json");
    agent = await createAgent(server, owner);
  });
  after(async () => server.dispose());
  const sweep = async () => (await callOnEveryNode<{ ended: number }>(server, "messages.endAbandonedStreams")).reduce((sum, { ended }) => sum + ended, 0);

  it(`ends a stream idle for ${MessagePolicy.streamIdleTimeoutMs / minute} minutes as ERROR with the text so far, pushed to the participants`, async () => {
    const asAgent = client(server, MessageService, "json", agent.token);
    const socket = await GatewayClient.connect(server.url, "json");
    await socket.authenticate(owner.accessToken);
    const conversationId = agent.conversationId;
    const { messageId } = await asAgent.sendMessage({ conversationId, clientMessageId: 1n, body: { type: MessageType.STREAM, content: { case: "stream", value: {} } } });
    await asAgent.pushStreamDelta({ conversationId, messageId, seq: 1, delta: "Hello, " });

    // Each delta keeps the stream alive: just under the limit after the latest one, nothing ends.
    server.clock.advance(MessagePolicy.streamIdleTimeoutMs - minute);
    await asAgent.pushStreamDelta({ conversationId, messageId, seq: 2, delta: "wor" });
    server.clock.advance(MessagePolicy.streamIdleTimeoutMs - minute);
    expect(await sweep()).to.equal(0);
    const live = (await asAgent.getMessage({ conversationId, messageId })).message?.body?.content;
    expect(live?.case === "stream" && live.value.accumulatedText).to.equal("Hello, wor");

    server.clock.advance(minute);
    expect(await sweep()).to.equal(1);
    const phaseOf = (envelope: MessageEnvelope | undefined) => (envelope?.body?.content.case === "stream" ? envelope.body.content.value.phase : undefined);
    const ended = streamEnvelope(await socket.next((f) => streamEnvelope(f)?.messageId === messageId && phaseOf(streamEnvelope(f)) === StreamPhase.ERROR));
    expect(ended?.body?.content.case === "stream" && ended.body.content.value).to.deep.include({ phase: StreamPhase.ERROR, accumulatedText: "Hello, wor", errorMessage: abandonedStreamError, seq: 0, delta: "" });

    const stored = (await client(server, MessageService, "json", owner.accessToken).getMessage({ conversationId, messageId })).message?.body?.content;
    expect(stored?.case === "stream" && stored.value).to.deep.include({ phase: StreamPhase.ERROR, accumulatedText: "Hello, wor", errorMessage: abandonedStreamError });
    await expectError(asAgent.pushStreamDelta({ conversationId, messageId, seq: 3, delta: "ld" }), Errors.streamFinished);
    await expectError(asAgent.endStream({ conversationId, messageId, accumulatedText: "Hello, world" }), Errors.streamFinished);
    expect(await sweep()).to.equal(0);
    socket.close();
  });
});

describe("MessageService streams open across a restart", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("are taken in again after the restart and ended as abandoned one idle period later unless their agent comes back", async () => {
    server = await startTestServer();
    const owner = await signInWithCode(server, "json");
    const agent = await createAgent(server, owner);
    const start = () => client(server, MessageService, "json", agent.token).sendMessage({
      conversationId: agent.conversationId,
      clientMessageId: BigInt(Date.now()) + BigInt(Math.floor(Math.random() * 1000)),
      body: { type: MessageType.STREAM, content: { case: "stream", value: {} } },
    });
    const silent = (await start()).messageId;
    const resumed = (await start()).messageId;
    await client(server, MessageService, "json", agent.token).pushStreamDelta({ conversationId: agent.conversationId, messageId: silent, seq: 1, delta: "lost in memory" });
    server = await server.restart();
    const sweep = async () => (await callOnEveryNode<{ ended: number }>(server, "messages.endAbandonedStreams")).reduce((sum, { ended }) => sum + ended, 0);
    const phase = async (messageId: bigint) => {
      const content = (await client(server, MessageService, "json", agent.token).getMessage({ conversationId: agent.conversationId, messageId })).message?.body?.content;
      return content?.case === "stream" ? content.value : undefined;
    };

    server.clock.advance(MessagePolicy.streamIdleTimeoutMs + minute);
    expect(await sweep()).to.equal(0); // taken in as just active
    await client(server, MessageService, "json", agent.token).pushStreamDelta({ conversationId: agent.conversationId, messageId: resumed, seq: 5, delta: "back" });
    server.clock.advance(MessagePolicy.streamIdleTimeoutMs - minute);
    await client(server, MessageService, "json", agent.token).pushStreamDelta({ conversationId: agent.conversationId, messageId: resumed, seq: 6, delta: "!" });
    server.clock.advance(minute);
    expect(await sweep()).to.equal(1);
    expect(await phase(silent)).to.deep.include({ phase: StreamPhase.ERROR, errorMessage: abandonedStreamError });
    expect(await phase(resumed)).to.deep.include({ phase: StreamPhase.DELTA, accumulatedText: "back!" });
    await client(server, MessageService, "json", agent.token).endStream({ conversationId: agent.conversationId, messageId: resumed, accumulatedText: "back!" });
    server.clock.advance(2 * MessagePolicy.streamIdleTimeoutMs);
    expect(await sweep()).to.equal(0);
    expect(await phase(resumed)).to.deep.include({ phase: StreamPhase.END, accumulatedText: "back!" });
  });
});
