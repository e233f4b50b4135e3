// Messaging state across a server restart: per-user conversation state, deletions, read
// positions, requests and blocks survive; sequences continue densely; a stream interrupted by
// the restart goes on with the agent's next delta.
import { expect } from "chai";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationActionType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { StreamPhase } from "../shared/gen/shared/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { privateConversationId } from "../shared/ids.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedEnvelopes, streamOf, streamStartBody, textBody, textOf } from "./support/messaging.js";
import { befriend, createAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

describe("messaging across a restart", () => {
  let server: TestServer;
  beforeEach(async () => {
    server = await startTestServer();
  });
  afterEach(async () => server.dispose());

  const contacts = (u: SignedIn) => client(server, ContactService, "json", u.accessToken);
  const conversations = (u: SignedIn) => client(server, ConversationService, "json", u.accessToken);
  const messages = (token: string) => client(server, MessageService, "json", token);
  const sync = (u: SignedIn) => client(server, SyncService, "json", u.accessToken);
  const send = (u: SignedIn, conversationId: bigint, text: string) =>
    messages(u.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });

  it("keeps deletions, cleared history, read positions, mute and delete flags, aliases, requests and blocks", async () => {
    const [alice, bob, carol, dave, erin] = [await signInWithCode(server), await signInWithCode(server), await signInWithCode(server), await signInWithCode(server), await signInWithCode(server)];
    const withBob = await befriend(server, alice, bob);
    const withErin = await befriend(server, alice, erin);
    for (let i = 1; i <= 4; i++) await send(i % 2 ? alice : bob, withBob, `m${i}`);
    await send(erin, withErin, "hidden soon");
    await messages(alice.accessToken).deleteMessages({ conversationId: withBob, messageIds: [2n] });
    await messages(alice.accessToken).deleteHistory({ conversationId: withBob, upToMessageId: 1n });
    await conversations(alice).markAsRead({ conversationId: withBob, upToMessageId: 3n });
    await conversations(alice).updateConversationAction({ conversationId: withBob, action: ConversationActionType.MUTE });
    await conversations(alice).updateConversationAction({ conversationId: withErin, action: ConversationActionType.DELETE });
    await contacts(alice).updateContactAlias({ contactUserId: bob.userId, alias: "B" });
    const { requestId } = await contacts(carol).sendFriendRequest({ targetUserId: alice.userId, message: "later" });
    await contacts(alice).blockUser({ targetUserId: dave.userId });
    const streamBefore = await sync(alice).getDifference({ sn: 0 });

    server = await server.restart();

    expect((await messages(alice.accessToken).getMessageHistory({ conversationId: withBob })).messages.map(textOf)).to.deep.equal(["m4", "m3"]);
    expect((await messages(bob.accessToken).getMessageHistory({ conversationId: withBob })).messages.map(textOf)).to.deep.equal(["m4", "m3", "m2", "m1"]);
    expect((await conversations(alice).getConversation({ conversationId: withBob })).conversation).to.deep.include({ isMuted: true, lastReadMessageId: 3n, lastMessageId: 4n });
    expect((await conversations(alice).listConversations({})).conversations.map((c) => c.conversationId)).to.deep.equal([withBob]);
    expect((await contacts(alice).listContacts({})).contacts.find((c) => c.user?.userId === bob.userId)?.alias).to.equal("B");
    expect((await contacts(alice).listBlocked({})).blocked.map((b) => b.user?.userId)).to.deep.equal([dave.userId]);
    expect((await contacts(alice).listPendingRequests({})).items.map((r) => [r.requestId, r.message])).to.deep.equal([[requestId, "later"]]);
    await contacts(alice).acceptFriendRequest({ requestId });

    const streamAfter = await sync(alice).getDifference({ sn: 0 });
    expect(streamAfter.updates.slice(0, streamBefore.updates.length)).to.deep.equal(streamBefore.updates);
    // Sequences continue densely: the accept was the next sn, the next message the next id, and
    // a new message lists the deleted conversation again.
    expect(streamAfter.sn).to.equal(streamBefore.sn + 1);
    expect((await send(erin, withErin, "back")).messageId).to.equal(2n);
    // The list orders by last message time in milliseconds: two sends in one millisecond would tie.
    server.clock.advance(1);
    expect((await send(bob, withBob, "m5")).messageId).to.equal(5n);
    // The accepted request made a conversation without messages: listed last.
    const withCarol = privateConversationId(alice.userId, carol.userId);
    expect((await conversations(alice).listConversations({})).conversations.map((c) => c.conversationId)).to.deep.equal([withBob, withErin, withCarol]);
    expect((await sync(alice).getCurrentState({})).state?.latestSn).to.equal(streamBefore.sn + 3);
  });

  it("a stream interrupted by the restart continues with the agent's next delta and ends with its full text", async () => {
    const owner = await signInWithCode(server);
    const agent = await createAgent(server, owner);
    const conversationId = agent.conversationId;
    const { messageId } = await messages(agent.token).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
    await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 1, delta: "ab" });
    await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 2, delta: "cd" });

    server = await server.restart();

    const socket = await GatewayClient.connect(server.url, "json");
    try {
      await socket.authenticate(owner.accessToken);
      // Deltas lived only in the old process's memory: the stored state is the START.
      const recovered = streamOf((await messages(owner.accessToken).getMessage({ conversationId, messageId })).message);
      expect(recovered).to.deep.include({ phase: StreamPhase.START, accumulatedText: "" });
      await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 3, delta: "ef" });
      await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 3, delta: "ef" });
      await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 4, delta: "gh" });
      await eventually(() => pushedEnvelopes(socket, "nonSnUpdate", messageId).length === 2, "both deltas pushed");
      expect(pushedEnvelopes(socket, "nonSnUpdate", messageId).map((e) => [streamOf(e)?.seq, streamOf(e)?.delta])).to.deep.equal([
        [3, "ef"],
        [4, "gh"],
      ]);
      const mid = streamOf((await messages(owner.accessToken).getMessage({ conversationId, messageId })).message);
      expect(mid).to.deep.include({ phase: StreamPhase.DELTA, seq: 4, accumulatedText: "efgh" });
      await messages(agent.token).endStream({ conversationId, messageId, accumulatedText: "abcdefgh" });
      await eventually(() => pushedEnvelopes(socket, "snUpdate", messageId).length === 1, "END pushed");
      expect(streamOf(pushedEnvelopes(socket, "snUpdate", messageId)[0])).to.deep.include({ phase: StreamPhase.END, accumulatedText: "abcdefgh" });
    } finally {
      socket.close();
    }

    server = await server.restart();
    const ended = streamOf((await messages(owner.accessToken).getMessage({ conversationId, messageId })).message);
    expect(ended).to.deep.include({ phase: StreamPhase.END, accumulatedText: "abcdefgh" });
  });
});
