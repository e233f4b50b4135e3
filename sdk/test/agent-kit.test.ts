// The agent kit against a real server: a streamed message from an async iterable (finished, and
// cut short by a failing source), and card buttons dispatched to handlers and answered, with the
// agent on its own WebSocket and the user watching on hers.
import { expect } from "chai";
import {
  CardActions,
  MessageType,
  StreamAbortedError,
  StreamPhase,
  UpdateStream,
  createParleyClient,
  nextClientMessageId,
  streamMessage,
  type CardActionAnswer,
  type CardActionPayload,
  type NonSnUpdate,
  type ParleyClient,
  type StreamContent,
} from "../src/index.js";
import { privateConversationId } from "../../shared/ids.js";
import { startTestServer, type TestServer } from "../../test/support/harness.js";
import { eventually, signIn, type Person } from "./support/people.js";

async function* chunks(parts: string[], failure?: Error): AsyncGenerator<string> {
  for (const part of parts) {
    await new Promise((resolve) => setTimeout(resolve, 1));
    yield part;
  }
  if (failure) throw failure;
}

describe("sdk: agent kit against a real server", () => {
  let server: TestServer;
  let owner: Person;
  let agent: ParleyClient;
  let agentUserId: number;
  let conversationId: bigint;
  let ownerStream: UpdateStream;
  const ownerEphemeral: NonSnUpdate[] = [];

  before(async () => {
    server = await startTestServer();
    owner = await signIn(server);
    const created = await owner.client.agent.createAgent({ username: `kit_${process.pid}_${Date.now() % 100000}`.slice(0, 32), name: "Kit bot", signature: "tests" });
    agentUserId = created.profile!.user!.userId;
    agent = createParleyClient({ baseUrl: server.url, tokens: { accessToken: created.token } });
    conversationId = privateConversationId(owner.userId, agentUserId);
    ownerStream = new UpdateStream({ client: owner.client, onUpdate: () => {}, onEphemeral: (entry) => void ownerEphemeral.push(entry) });
    await ownerStream.ready();
  });
  after(async () => {
    await ownerStream.close();
    await server.dispose();
  });

  const streamOf = async (messageId: bigint): Promise<StreamContent | undefined> => {
    const { message } = await owner.client.message.getMessage({ conversationId, messageId });
    return message?.body?.content.case === "stream" ? message.body.content.value : undefined;
  };
  const deltasOf = (messageId: bigint) =>
    ownerEphemeral.flatMap((entry) =>
      entry.update.case === "messageEnvelope" && entry.update.value.messageId === messageId && entry.update.value.body?.content.case === "stream"
        ? [entry.update.value.body.content.value]
        : [],
    );

  describe("streamMessage", () => {
    it("sends START, a delta per non-empty chunk in order, then END with the whole text", async () => {
      const question = await owner.client.message.sendMessage({
        clientMessageId: nextClientMessageId(),
        conversationId,
        body: { type: MessageType.TEXT, content: { case: "text", value: { text: "hello?" } } },
      });
      const streamed = await streamMessage(agent.message, { conversationId, replyToMessageId: question.messageId, contentType: "text/markdown" }, chunks(["Hel", "", "lo, ", "world"]));
      expect(streamed.text).to.equal("Hello, world");
      const stored = await streamOf(streamed.messageId);
      expect(stored).to.deep.include({ phase: StreamPhase.END, accumulatedText: "Hello, world", contentType: "text/markdown" });
      const { message } = await owner.client.message.getMessage({ conversationId, messageId: streamed.messageId });
      expect(message?.replyTo?.messageId).to.equal(question.messageId);
      await eventually(() => deltasOf(streamed.messageId).length === 3, "three deltas on the user's socket");
      expect(deltasOf(streamed.messageId).map((delta) => [delta.seq, delta.delta])).to.deep.equal([
        [1, "Hel"],
        [2, "lo, "],
        [3, "world"],
      ]);
    });

    it("ends the message in ERROR with the text so far when the source throws, and says so", async () => {
      const failure = new Error("the model timed out");
      const outcome = await streamMessage(agent.message, { conversationId }, chunks(["partial ", "answer"], failure)).catch((err: unknown) => err);
      expect(outcome).to.be.instanceOf(StreamAbortedError);
      const aborted = outcome as StreamAbortedError;
      expect(aborted.partialText).to.equal("partial answer");
      expect(aborted.cause).to.equal(failure);
      const stored = await streamOf(aborted.messageId);
      expect(stored).to.deep.include({ phase: StreamPhase.ERROR, accumulatedText: "partial answer", errorMessage: "The answer could not be completed." });
    });

    it("tells the reader what errorMessage chooses, and ends at once when the source fails before any chunk", async () => {
      const outcome = (await streamMessage(agent.message, { conversationId }, chunks([], new Error("no capacity")), {
        errorMessage: (cause) => `Sorry: ${(cause as Error).message}`,
      }).catch((err: unknown) => err)) as StreamAbortedError;
      expect(outcome.partialText).to.equal("");
      expect(await streamOf(outcome.messageId)).to.deep.include({ phase: StreamPhase.ERROR, accumulatedText: "", errorMessage: "Sorry: no capacity" });
    });
  });

  describe("CardActions over the agent's WebSocket", () => {
    let agentStream: UpdateStream;
    let cardId: bigint;
    const handled: CardActionPayload[] = [];
    const handlerErrors: unknown[] = [];

    before(async () => {
      const cards = new CardActions(agent.message, { failureReply: { text: "That did not work.", showAlert: true }, onError: (err) => handlerErrors.push(err) })
        .on("vote", (action, data) => {
          handled.push(action);
          return { text: `Counted ${(data as { choice: string }).choice}`, showAlert: true };
        })
        .on("thanks", () => "You are welcome")
        .on("broken", () => {
          throw new Error("handler failed");
        });
      agentStream = new UpdateStream({
        client: agent,
        identity: "agent",
        onUpdate: () => {},
        onEphemeral: async (entry) => {
          if (entry.update.case === "cardAction") await cards.dispatch(entry.update.value);
        },
      });
      await agentStream.ready();
      const card = JSON.stringify({ type: "AdaptiveCard", version: "1.5", body: [{ type: "TextBlock", text: "Pick one" }] });
      ({ messageId: cardId } = await agent.message.sendMessage({
        clientMessageId: nextClientMessageId(),
        conversationId,
        body: { type: MessageType.CARD, content: { case: "card", value: { cardJson: card, fallbackText: "Pick one" } } },
      }));
    });
    after(() => agentStream.close());

    async function press(verb: string, data: object): Promise<CardActionAnswer> {
      const { actionId } = await owner.client.message.submitCardAction({ conversationId, messageId: cardId, actionData: JSON.stringify(data), verb });
      let answer: CardActionAnswer | undefined;
      await eventually(() => {
        for (const entry of ownerEphemeral) if (entry.update.case === "cardActionAnswer" && entry.update.value.actionId === actionId) answer = entry.update.value;
        return answer !== undefined;
      }, `the answer to ${verb}`);
      return answer!;
    }

    it("dispatches a button to the handler of its verb with the submitted data, and the user gets its answer", async () => {
      const answer = await press("vote", { choice: "tea" });
      expect(answer).to.deep.include({ conversationId, messageId: cardId, agentUserId, text: "Counted tea", showAlert: true });
      expect(handled.map((action) => [action.verb, action.senderId])).to.deep.equal([["vote", owner.userId]]);
    });

    it("answers with a toast when the handler returns a string", async () => {
      expect(await press("thanks", {})).to.deep.include({ text: "You are welcome", showAlert: false });
    });

    it("answers with the failure reply when the handler throws or no handler takes the verb", async () => {
      expect(await press("broken", {})).to.deep.include({ text: "That did not work.", showAlert: true });
      expect(handlerErrors.map((err) => (err as Error).message)).to.deep.equal(["handler failed"]);
      expect(await press("unknown-verb", {})).to.deep.include({ text: "That did not work.", showAlert: true });
    });
  });
});
