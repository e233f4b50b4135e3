// The update-stream entries that ContactService, ConversationService and MessageService produce:
// each goes to exactly the users the spec names, with the fields it names; sn stays dense and
// ordered, alike over GetDifference and a live socket; StreamContent carries each field only in
// its phase; card actions travel agent-ward and back to the submitter only; concurrent senders
// get dense, duplicate-free message ids.
import { expect } from "chai";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationActionType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageEntityType, MessageType, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import type { SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import {
  StreamWatch,
  cardBody,
  eventually,
  nextClientMessageId,
  pushedEnvelopes,
  pushedNonSnUpdates,
  pushedSnUpdates,
  streamOf,
  streamStartBody,
  textBody,
  textOf,
  updateOf,
  type BodyInit,
} from "./support/messaging.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

type Event = SnUpdate["update"];
type Payload<C extends Event["case"]> = Extract<Event, { case: C }>["value"];
/** The payloads of one kind of entry, in order. */
function only<C extends NonNullable<Event["case"]>>(events: Event[], kind: C): NonNullable<Payload<C>>[] {
  return events.flatMap((e) => (e.case === kind ? [e.value as NonNullable<Payload<C>>] : []));
}

for (const mode of wireModes) {
  describe(`messaging events (${mode})`, () => {
    let server: TestServer;
    const sockets: GatewayClient[] = [];
    before(async () => {
      server = await startTestServer();
    });
    afterEach(() => {
      for (const socket of sockets.splice(0)) socket.close();
    });
    after(async () => server.dispose());

    const contacts = (token: string) => client(server, ContactService, mode, token);
    const conversations = (token: string) => client(server, ConversationService, mode, token);
    const messages = (token: string) => client(server, MessageService, mode, token);
    const groups = (token: string) => client(server, GroupService, mode, token);
    const sync = (u: SignedIn) => client(server, SyncService, mode, u.accessToken);
    const fresh = () => signInWithCode(server, mode);
    const watch = (users: SignedIn[]) => StreamWatch.of(server, mode, users);
    const tokenOf = (u: SignedIn | TestAgent) => ("accessToken" in u ? u.accessToken : u.token);
    const send = (u: SignedIn | TestAgent, conversationId: bigint, body: BodyInit = textBody("hello"), clientMessageId = nextClientMessageId()) =>
      messages(tokenOf(u)).sendMessage({ conversationId, body, clientMessageId });

    async function socketOf(u: SignedIn | TestAgent): Promise<GatewayClient> {
      const socket = await GatewayClient.connect(server.url, mode);
      sockets.push(socket);
      const answer = await socket.authenticate(tokenOf(u));
      expect(answer.payload.case === "authResponse" && answer.payload.value.success).to.equal(true);
      return socket;
    }

    async function events(w: StreamWatch, u: SignedIn): Promise<Event[]> {
      return (await w.entries(u)).map((entry) => entry.update);
    }

    describe("sequenced entries go to exactly the users named", () => {
      it("SendMessage, EditMessage, RecallMessage (PRIVATE): messageEnvelope to both participants only", async () => {
        const [alice, bob, carol] = [await fresh(), await fresh(), await fresh()];
        const conversationId = await befriend(server, alice, bob, mode);
        await befriend(server, alice, carol, mode);
        const w = await watch([alice, bob, carol]);
        const bobSocket = await socketOf(bob);
        const clientMessageId = nextClientMessageId();
        const sent = await send(alice, conversationId, textBody("draft"), clientMessageId);
        const { updatedAt } = await messages(alice.accessToken).editMessage({ conversationId, messageId: sent.messageId, newBody: textBody("final") });
        await messages(alice.accessToken).recallMessage({ conversationId, messageId: sent.messageId });
        for (const user of [alice, bob]) {
          const envelopes = only(await events(w, user), "messageEnvelope");
          expect(envelopes.map((e) => [e.messageId, e.senderId, e.conversationId, e.clientMessageId])).to.deep.equal(
            Array.from({ length: 3 }, () => [sent.messageId, alice.userId, conversationId, clientMessageId]),
          );
          expect(envelopes.map((e) => e.body?.type)).to.deep.equal([MessageType.TEXT, MessageType.TEXT, MessageType.RECALLED]);
          expect([textOf(envelopes[0]), textOf(envelopes[1])]).to.deep.equal(["draft", "final"]);
          expect(envelopes.map((e) => e.edited)).to.deep.equal([false, true, false]);
          expect(envelopes[0].updatedAt).to.equal(undefined);
          expect(envelopes[1].updatedAt).to.equal(updatedAt);
          expect(envelopes[2].updatedAt! >= updatedAt).to.equal(true);
          expect(envelopes.every((e) => e.createdAt === sent.createdAt)).to.equal(true);
          expect(await w.kinds(user)).to.deep.equal(["messageEnvelope", "messageEnvelope", "messageEnvelope"]);
        }
        expect(await w.kinds(carol)).to.deep.equal([]);
        // The live push names the sender among its users.
        await eventually(() => pushedEnvelopes(bobSocket, "snUpdate", sent.messageId).length === 3, "three pushes");
        const frame = bobSocket.frames.find((f) => updateOf(f)?.update.case === "snUpdate");
        expect(updateOf(frame!)?.users.map((u) => u.userId)).to.deep.equal([alice.userId]);
      });

      it("GROUP messages, edits and recalls reach the current members only", async () => {
        const [owner, a, b, outsider] = [await fresh(), await fresh(), await fresh(), await fresh()];
        const group = (await groups(owner.accessToken).createGroup({ name: "g", memberIds: [a.userId, b.userId] })).group!;
        const conversationId = BigInt(group.groupId);
        const w = await watch([owner, a, b, outsider]);
        const sent = await send(a, conversationId, textBody("to all"));
        await messages(a.accessToken).editMessage({ conversationId, messageId: sent.messageId, newBody: textBody("to all, edited") });
        await messages(a.accessToken).recallMessage({ conversationId, messageId: sent.messageId });
        for (const member of [owner, a, b]) {
          const envelopes = only(await events(w, member), "messageEnvelope");
          expect(envelopes.map((e) => [e.messageId, e.body?.type, e.edited])).to.deep.equal([
            [2n, MessageType.TEXT, false],
            [2n, MessageType.TEXT, true],
            [2n, MessageType.RECALLED, false],
          ]);
        }
        expect(await w.kinds(outsider)).to.deep.equal([]);
        await groups(owner.accessToken).removeMember({ groupId: group.groupId, targetId: b.userId });
        const after = await watch([owner, a, b]);
        const later = await send(a, conversationId, textBody("without b"));
        expect(only(await events(after, owner), "messageEnvelope").map((e) => e.messageId)).to.deep.equal([later.messageId]);
        expect(only(await events(after, a), "messageEnvelope").map((e) => e.messageId)).to.deep.equal([later.messageId]);
        expect(await after.kinds(b)).to.deep.equal([]);
      });

      it("friend requests: Received to the target, Sent to the sender, Accepted and Rejected to both, nothing to others", async () => {
        const [alice, bob, carol, dave] = [await fresh(), await fresh(), await fresh(), await fresh()];
        const w = await watch([alice, bob, carol, dave]);
        const { requestId } = await contacts(alice.accessToken).sendFriendRequest({ targetUserId: bob.userId, message: "hi bob" });
        await contacts(bob.accessToken).acceptFriendRequest({ requestId });
        const second = await contacts(carol.accessToken).sendFriendRequest({ targetUserId: alice.userId });
        await contacts(alice.accessToken).rejectFriendRequest({ requestId: second.requestId });
        const aliceEvents = await events(w, alice);
        expect(aliceEvents.map((e) => e.case)).to.deep.equal(["friendRequestSent", "friendRequestAccepted", "friendRequestReceived", "friendRequestRejected"]);
        expect(only(aliceEvents, "friendRequestSent")[0]).to.deep.include({ requestId, targetUserId: bob.userId });
        expect(only(aliceEvents, "friendRequestAccepted")[0].request).to.deep.include({ requestId, fromUserId: alice.userId, toUserId: bob.userId, message: "hi bob" });
        expect(only(aliceEvents, "friendRequestReceived")[0].request).to.deep.include({ requestId: second.requestId, fromUserId: carol.userId, toUserId: alice.userId });
        expect(only(aliceEvents, "friendRequestRejected")[0]).to.deep.include({ requestId: second.requestId, rejectorId: alice.userId });
        const bobEvents = await events(w, bob);
        expect(bobEvents.map((e) => e.case)).to.deep.equal(["friendRequestReceived", "friendRequestAccepted"]);
        expect(only(bobEvents, "friendRequestReceived")[0].request).to.deep.include({ requestId, fromUserId: alice.userId, message: "hi bob" });
        const carolEvents = await events(w, carol);
        expect(carolEvents.map((e) => e.case)).to.deep.equal(["friendRequestSent", "friendRequestRejected"]);
        expect(only(carolEvents, "friendRequestRejected")[0]).to.deep.include({ requestId: second.requestId, rejectorId: alice.userId });
        expect(await w.kinds(dave)).to.deep.equal([]);
      });

      it("DeleteContact, BlockUser, UnblockUser and UpdateContactAlias: the caller only", async () => {
        const [alice, bob, carol] = [await fresh(), await fresh(), await fresh()];
        await befriend(server, alice, bob, mode);
        await befriend(server, alice, carol, mode);
        const w = await watch([alice, bob, carol]);
        await contacts(alice.accessToken).updateContactAlias({ contactUserId: carol.userId, alias: "C" });
        await contacts(alice.accessToken).deleteContact({ contactUserId: bob.userId });
        await contacts(alice.accessToken).blockUser({ targetUserId: bob.userId });
        await contacts(alice.accessToken).blockUser({ targetUserId: carol.userId });
        await contacts(alice.accessToken).unblockUser({ targetUserId: bob.userId });
        const aliceEvents = await events(w, alice);
        expect(aliceEvents.map((e) => e.case)).to.deep.equal([
          "contactAliasUpdated",
          "contactDeleted",
          "userBlockToggled", // bob was no longer a contact: no second contactDeleted
          "contactDeleted", // carol was: the block removes her first
          "userBlockToggled",
          "userBlockToggled",
        ]);
        expect(only(aliceEvents, "contactAliasUpdated")[0]).to.deep.include({ contactUserId: carol.userId, newAlias: "C" });
        expect(only(aliceEvents, "contactDeleted").map((e) => e.peerUserId)).to.deep.equal([bob.userId, carol.userId]);
        expect(only(aliceEvents, "userBlockToggled").map((e) => [e.targetUserId, e.isBlocked])).to.deep.equal([
          [bob.userId, true],
          [carol.userId, true],
          [bob.userId, false],
        ]);
        expect(await w.kinds(bob)).to.deep.equal([]);
        expect(await w.kinds(carol)).to.deep.equal([]);
      });

      it("AddContact: ContactAddedEvent to the caller, and to the agent's own stream", async () => {
        const [owner, other] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        await contacts(owner.accessToken).deleteContact({ contactUserId: agent.userId });
        const w = await watch([owner, other]);
        await contacts(owner.accessToken).addContact({ targetUserId: agent.userId });
        const ownerEvents = await events(w, owner);
        expect(ownerEvents.map((e) => e.case)).to.deep.equal(["contactAdded"]);
        expect(only(ownerEvents, "contactAdded")[0].peerUserId).to.equal(agent.userId);
        expect(await w.kinds(other)).to.deep.equal([]);
        const agentSocket = await socketOf(agent);
        const frame = await agentSocket.next((f) => {
          const update = updateOf(f)?.update;
          return update?.case === "snUpdate" && update.value.update.case === "contactAdded" && update.value.update.value.peerUserId === owner.userId;
        });
        expect(updateOf(frame)?.users.map((u) => u.userId)).to.deep.equal([owner.userId]);
      });

      it("UpdateConversationAction and MarkAsRead: the caller only, with their fields", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const conversationId = await befriend(server, alice, bob, mode);
        for (let i = 0; i < 3; i++) await send(bob, conversationId, textBody(`m${i}`));
        const w = await watch([alice, bob]);
        const act = (action: ConversationActionType, clearMessages = false) => conversations(alice.accessToken).updateConversationAction({ conversationId, action, clearMessages });
        await act(ConversationActionType.MUTE, true);
        await act(ConversationActionType.UNMUTE);
        const readFrom = server.clock.now();
        await conversations(alice.accessToken).markAsRead({ conversationId, upToMessageId: 2n });
        await conversations(alice.accessToken).markAsRead({ conversationId, upToMessageId: 2n });
        const readTo = server.clock.now();
        await act(ConversationActionType.DELETE, true);
        const aliceEvents = await events(w, alice);
        expect(aliceEvents.map((e) => e.case)).to.deep.equal(["conversationAction", "conversationAction", "readReceipt", "readReceipt", "conversationAction"]);
        expect(only(aliceEvents, "conversationAction").map((e) => [e.conversationId, e.action, e.clearMessages])).to.deep.equal([
          [conversationId, ConversationActionType.MUTE, false], // clearMessages is only for DELETE
          [conversationId, ConversationActionType.UNMUTE, false],
          [conversationId, ConversationActionType.DELETE, true],
        ]);
        for (const receipt of only(aliceEvents, "readReceipt")) {
          expect(receipt).to.deep.include({ conversationId, readerUserId: alice.userId, lastReadMessageId: 2n });
          expect(Number(receipt.readAt)).to.be.within(readFrom, readTo);
        }
        expect(await w.kinds(bob), "the peer is not told").to.deep.equal([]);
        // Clearing the history reads it: nothing deleted counts as unread.
        const info = (await conversations(alice.accessToken).getConversation({ conversationId })).conversation!;
        expect(info).to.deep.include({ lastMessageId: 3n, lastReadMessageId: 3n });
      });

      it("DeleteMessages and DeleteHistory: MessageDeletedEvent to the caller only, naming what was deleted", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const conversationId = await befriend(server, alice, bob, mode);
        for (let i = 0; i < 5; i++) await send(bob, conversationId, textBody(`m${i}`));
        const w = await watch([alice, bob]);
        expect((await messages(alice.accessToken).deleteMessages({ conversationId, messageIds: [4n, 2n, 2n, 99n] })).deletedCount).to.equal(2);
        expect((await messages(alice.accessToken).deleteMessages({ conversationId, messageIds: [2n, 4n] })).deletedCount).to.equal(0);
        await messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 3n });
        await messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 2n });
        await messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 500n });
        const deleted = only(await events(w, alice), "messageDeleted");
        expect(deleted.map((e) => [e.conversationId, e.messageIds, e.upToMessageId])).to.deep.equal([
          [conversationId, [4n, 2n], 0n],
          [conversationId, [], 3n],
          [conversationId, [], 5n],
        ]);
        expect(await w.kinds(alice)).to.deep.equal(["messageDeleted", "messageDeleted", "messageDeleted"]);
        expect(await w.kinds(bob)).to.deep.equal([]);
        expect((await messages(bob.accessToken).getMessageHistory({ conversationId })).messages).to.have.length(5);
      });
    });

    it("keeps sn dense and ordered over a mix of concurrent events, alike on two live sockets and over GetDifference", async function () {
      this.timeout(60_000);
      const [alice, bob, carol, dave] = [await fresh(), await fresh(), await fresh(), await fresh()];
      const withBob = await befriend(server, alice, bob, mode);
      const withCarol = await befriend(server, alice, carol, mode);
      const team = (await groups(alice.accessToken).createGroup({ name: "mix", memberIds: [bob.userId, carol.userId] })).group!;
      const [phone, laptop] = [await socketOf(alice), await socketOf(alice)];
      const base = (await sync(alice).getCurrentState({})).state!.latestSn;

      // Readers poll GetDifference while the writers run: every page is a dense run after base.
      let writing = true;
      const polled: number[][] = [];
      const reader = (async () => {
        while (writing) {
          const page = await sync(alice).getDifference({ sn: base });
          polled.push(page.updates.map((u) => u.sn));
        }
      })();
      const work: Promise<unknown>[] = [];
      for (let i = 0; i < 15; i++) {
        work.push(send(bob, withBob, textBody(`b${i}`)));
        work.push(send(carol, withCarol, textBody(`c${i}`)));
        work.push(send(i % 2 ? bob : carol, BigInt(team.groupId), textBody(`g${i}`)));
      }
      work.push(contacts(dave.accessToken).sendFriendRequest({ targetUserId: alice.userId }));
      work.push(conversations(alice.accessToken).updateConversationAction({ conversationId: withBob, action: ConversationActionType.MUTE }));
      work.push(contacts(alice.accessToken).updateContactAlias({ contactUserId: carol.userId, alias: "C" }));
      work.push(send(alice, withCarol, textBody("mine")));
      work.push(groups(alice.accessToken).updateGroupName({ groupId: team.groupId, name: "renamed" }));
      await Promise.all(work);
      writing = false;
      await reader;

      const latest = (await sync(alice).getCurrentState({})).state!.latestSn;
      // 45 messages, a friend request, a mute, an alias, her own message, a group rename message.
      expect(latest - base).to.equal(50);
      const expectedSns = Array.from({ length: latest - base }, (_, i) => base + i + 1);
      const stored: SnUpdate[] = [];
      for (let sn = base; ; ) {
        const page = await sync(alice).getDifference({ sn });
        stored.push(...page.updates);
        sn = page.sn;
        if (!page.hasMore) break;
      }
      expect(stored.map((u) => u.sn)).to.deep.equal(expectedSns);
      for (const page of polled) expect(page).to.deep.equal(expectedSns.slice(0, page.length));
      for (const socket of [phone, laptop]) {
        await eventually(() => pushedSnUpdates(socket).length >= expectedSns.length, "every entry pushed");
        const pushed = pushedSnUpdates(socket);
        expect(pushed.map((u) => u.sn)).to.deep.equal(expectedSns);
        expect(pushed).to.deep.equal(stored);
      }
      // Within each conversation, messages arrive in id order.
      for (const conversationId of [withBob, withCarol, BigInt(team.groupId)]) {
        const ids = stored.flatMap((u) => (u.update.case === "messageEnvelope" && u.update.value.conversationId === conversationId ? [u.update.value.messageId] : []));
        expect(ids).to.deep.equal([...ids].sort((x, y) => (x < y ? -1 : 1)));
        expect(new Set(ids).size).to.equal(ids.length);
      }
    });

    describe("StreamContent fields in every phase", () => {
      it("START, live DELTA pushes, GetMessage mid-stream, END; deltas never reach the update stream", async () => {
        const [owner, member] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        const group = (await groups(owner.accessToken).createGroup({ name: "stream", memberIds: [agent.userId, member.userId] })).group!;
        const conversationId = BigInt(group.groupId);
        const [ownerSocket, memberSocket] = [await socketOf(owner), await socketOf(member)];
        const w = await watch([owner, member]);
        const { messageId } = await send(agent, conversationId, streamStartBody("text/markdown"));

        const atStart = (await messages(member.accessToken).getMessage({ conversationId, messageId })).message;
        expect(streamOf(atStart)).to.deep.include({ phase: StreamPhase.START, seq: 0, delta: "", accumulatedText: "", errorMessage: "", contentType: "text/markdown" });
        for (const socket of [ownerSocket, memberSocket]) {
          await eventually(() => pushedEnvelopes(socket, "snUpdate", messageId).length === 1, "START pushed");
          const start = streamOf(pushedEnvelopes(socket, "snUpdate", messageId)[0]);
          expect(start).to.deep.include({ phase: StreamPhase.START, seq: 0, delta: "", accumulatedText: "", errorMessage: "", contentType: "text/markdown" });
          expect(start?.entities).to.deep.equal([]);
        }

        const parts = ["Hel", "lo ", "wor", "ld"];
        for (const [index, delta] of parts.entries()) {
          await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: index + 1, delta });
          if (index === 1) {
            // Mid-stream, GetMessage holds what was accumulated and the last seq it includes.
            for (const reader of [owner, member]) {
              const mid = streamOf((await messages(reader.accessToken).getMessage({ conversationId, messageId })).message);
              expect(mid).to.deep.include({ phase: StreamPhase.DELTA, seq: 2, delta: "", accumulatedText: "Hello ", errorMessage: "" });
              const listed = (await messages(reader.accessToken).getMessageHistory({ conversationId, limit: 1 })).messages[0];
              expect(streamOf(listed)).to.deep.include({ phase: StreamPhase.DELTA, seq: 2, accumulatedText: "Hello " });
            }
          }
        }
        for (const socket of [ownerSocket, memberSocket]) {
          await eventually(() => pushedEnvelopes(socket, "nonSnUpdate", messageId).length === parts.length, "every delta pushed");
          const deltas = pushedEnvelopes(socket, "nonSnUpdate", messageId);
          expect(deltas.map((d) => [streamOf(d)?.phase, streamOf(d)?.seq, streamOf(d)?.delta, streamOf(d)?.accumulatedText, streamOf(d)?.errorMessage, streamOf(d)?.entities.length])).to.deep.equal(
            parts.map((delta, index) => [StreamPhase.DELTA, index + 1, delta, "", "", 0]),
          );
          expect(deltas.every((d) => d.senderId === agent.userId && d.conversationId === conversationId && streamOf(d)?.contentType === "text/markdown")).to.equal(true);
        }

        const entities = [{ type: MessageEntityType.HASHTAG, offset: 6, length: 5, data: { case: "hashtag" as const, value: { tag: "world" } } }];
        await messages(agent.token).endStream({ conversationId, messageId, accumulatedText: "Hello world", entities });
        for (const socket of [ownerSocket, memberSocket]) {
          await eventually(() => pushedEnvelopes(socket, "snUpdate", messageId).length === 2, "END pushed");
          const end = streamOf(pushedEnvelopes(socket, "snUpdate", messageId)[1]);
          expect(end).to.deep.include({ phase: StreamPhase.END, seq: 0, delta: "", accumulatedText: "Hello world", errorMessage: "", contentType: "text/markdown" });
          expect(end?.entities.map((e) => [e.type, e.offset, e.length])).to.deep.equal([[MessageEntityType.HASHTAG, 6, 5]]);
        }
        const final = streamOf((await messages(member.accessToken).getMessage({ conversationId, messageId })).message);
        expect(final).to.deep.include({ phase: StreamPhase.END, seq: 0, delta: "", accumulatedText: "Hello world", errorMessage: "" });
        expect(final?.entities).to.have.length(1);
        // The update stream holds START and END only.
        for (const reader of [owner, member]) {
          const stored = only(await events(w, reader), "messageEnvelope").filter((e) => e.messageId === messageId);
          expect(stored.map((e) => streamOf(e)?.phase)).to.deep.equal([StreamPhase.START, StreamPhase.END]);
        }
      });

      it("ERROR: partial text and errorMessage, no entities, pushed and persisted", async () => {
        const owner = await fresh();
        const agent = await createAgent(server, owner, mode);
        const socket = await socketOf(owner);
        const { messageId } = await send(agent, agent.conversationId, streamStartBody());
        await messages(agent.token).pushStreamDelta({ conversationId: agent.conversationId, messageId, seq: 1, delta: "part" });
        await messages(agent.token).pushStreamDelta({ conversationId: agent.conversationId, messageId, seq: 2, delta: "ial" });
        await messages(agent.token).errorStream({ conversationId: agent.conversationId, messageId, errorMessage: "upstream timeout" });
        await eventually(() => pushedEnvelopes(socket, "snUpdate", messageId).length === 2, "ERROR pushed");
        const error = streamOf(pushedEnvelopes(socket, "snUpdate", messageId)[1]);
        expect(error).to.deep.include({ phase: StreamPhase.ERROR, seq: 0, delta: "", accumulatedText: "partial", errorMessage: "upstream timeout", contentType: "text/plain" });
        expect(error?.entities).to.deep.equal([]);
        const stored = streamOf((await messages(owner.accessToken).getMessage({ conversationId: agent.conversationId, messageId })).message);
        expect(stored).to.deep.include({ phase: StreamPhase.ERROR, seq: 0, accumulatedText: "partial", errorMessage: "upstream timeout" });
        await expectError(messages(agent.token).endStream({ conversationId: agent.conversationId, messageId, accumulatedText: "late" }), Errors.streamFinished);
      });
    });

    describe("card actions", () => {
      it("the action goes to the card's agent only, the answer to the submitter only; both ephemeral", async () => {
        const [owner, member] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        const group = (await groups(owner.accessToken).createGroup({ name: "cards", memberIds: [agent.userId, member.userId] })).group!;
        const conversationId = BigInt(group.groupId);
        const card = await send(agent, conversationId, cardBody('{"type":"AdaptiveCard","actions":[{"type":"Action.Submit"}]}', "vote"));
        const [agentSocket, ownerSocket, memberSocket] = [await socketOf(agent), await socketOf(owner), await socketOf(member)];
        const w = await watch([owner, member]);
        const { actionId } = await messages(member.accessToken).submitCardAction({ conversationId, messageId: card.messageId, actionData: '{"vote":"yes"}', verb: "vote" });
        const cardActions = () => pushedNonSnUpdates(agentSocket).flatMap((u) => (u.update.case === "cardAction" ? [u.update.value] : []));
        await eventually(() => cardActions().length === 1, "card action delivered");
        expect(cardActions()[0]).to.deep.include({ actionId, conversationId, messageId: card.messageId, senderId: member.userId, actionData: '{"vote":"yes"}', verb: "vote" });
        const actionFrame = agentSocket.frames.find((f) => updateOf(f)?.update.case === "nonSnUpdate");
        expect(updateOf(actionFrame!)?.users.map((u) => u.userId)).to.deep.equal([member.userId]);

        await messages(agent.token).answerCardAction({ conversationId, messageId: card.messageId, actionId, text: "counted", showAlert: false });
        await messages(agent.token).answerCardAction({ conversationId, messageId: card.messageId, actionId, text: "really counted", showAlert: true });
        const answers = (socket: GatewayClient) => pushedNonSnUpdates(socket).flatMap((u) => (u.update.case === "cardActionAnswer" ? [u.update.value] : []));
        await eventually(() => answers(memberSocket).length === 2, "answers delivered");
        expect(answers(memberSocket).map((a) => [a.actionId, a.conversationId, a.messageId, a.agentUserId, a.text, a.showAlert])).to.deep.equal([
          [actionId, conversationId, card.messageId, agent.userId, "counted", false],
          [actionId, conversationId, card.messageId, agent.userId, "really counted", true],
        ]);
        // A marker message flushes the sockets: anything pushed before it has arrived.
        const marker = await send(owner, conversationId, textBody("marker"));
        for (const socket of [ownerSocket, memberSocket]) await eventually(() => pushedEnvelopes(socket, "snUpdate", marker.messageId).length === 1, "marker pushed");
        expect(answers(ownerSocket)).to.deep.equal([]);
        expect(pushedNonSnUpdates(ownerSocket).concat(pushedNonSnUpdates(memberSocket)).some((u) => u.update.case === "cardAction")).to.equal(false);
        for (const user of [owner, member]) {
          expect(only(await events(w, user), "messageEnvelope").map((e) => e.messageId)).to.deep.equal([marker.messageId]);
        }
      });

      it("an action can be answered for 5 minutes after it was submitted, not after", async () => {
        const owner = await fresh();
        const agent = await createAgent(server, owner, mode);
        const card = await send(agent, agent.conversationId, cardBody("{}"));
        const { actionId } = await messages(owner.accessToken).submitCardAction({ conversationId: agent.conversationId, messageId: card.messageId, actionData: "{}" });
        const answer = () => messages(agent.token).answerCardAction({ conversationId: agent.conversationId, messageId: card.messageId, actionId, showAlert: false });
        server.clock.advance(5 * 60 * 1000 - 10_000);
        await answer();
        server.clock.advance(11_000);
        await expectError(answer(), Errors.cardActionNotFound);
        // A new submission gets a new, live action.
        const again = await messages(owner.accessToken).submitCardAction({ conversationId: agent.conversationId, messageId: card.messageId, actionData: "{}" });
        expect(again.actionId).to.not.equal(actionId);
        await messages(agent.token).answerCardAction({ conversationId: agent.conversationId, messageId: card.messageId, actionId: again.actionId, showAlert: true });
      });
    });

    describe("concurrency", () => {
      const byId = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
      const envelopeIds = (entries: Event[], conversationId: bigint) =>
        only(entries, "messageEnvelope").filter((e: MessageEnvelope) => e.conversationId === conversationId).map((e) => e.messageId);

      it("many senders in one group: dense ids without duplicates, every member's stream in id order", async function () {
        this.timeout(60_000);
        const people: SignedIn[] = [];
        for (let i = 0; i < 5; i++) people.push(await fresh());
        const [owner, ...rest] = people;
        const group = (await groups(owner.accessToken).createGroup({ name: "crowd", memberIds: rest.map((p) => p.userId) })).group!;
        const conversationId = BigInt(group.groupId);
        const w = await watch(people);
        const results = await Promise.all(people.flatMap((p) => Array.from({ length: 20 }, (_, i) => send(p, conversationId, textBody(`${p.userId}:${i}`)))));
        const ids = results.map((r) => r.messageId).sort(byId);
        // Id 1 is the group's creation message.
        expect(ids).to.deep.equal(Array.from({ length: 100 }, (_, i) => BigInt(i + 2)));
        for (const person of people) expect(envelopeIds(await events(w, person), conversationId)).to.deep.equal(ids);
        const history = await messages(owner.accessToken).getMessageHistory({ conversationId, limit: 200 });
        expect(history.messages.map((m) => m.messageId)).to.deep.equal(Array.from({ length: 101 }, (_, i) => BigInt(101 - i)));
      });

      it("conversations in parallel: each keeps its own dense sequence, each user's sn stays dense", async function () {
        this.timeout(60_000);
        const pairs: { a: SignedIn; b: SignedIn; conversationId: bigint }[] = [];
        for (let i = 0; i < 6; i++) {
          const [a, b] = [await fresh(), await fresh()];
          pairs.push({ a, b, conversationId: await befriend(server, a, b, mode) });
        }
        const w = await watch(pairs.flatMap((p) => [p.a, p.b]));
        const results = await Promise.all(
          pairs.map(async (p) => (await Promise.all(Array.from({ length: 24 }, (_, i) => send(i % 2 ? p.a : p.b, p.conversationId, textBody(`${i}`))))).map((r) => r.messageId)),
        );
        for (const [index, p] of pairs.entries()) {
          const ids = results[index].sort(byId);
          expect(ids).to.deep.equal(Array.from({ length: 24 }, (_, i) => BigInt(i + 1)));
          for (const user of [p.a, p.b]) {
            const entries = await w.entries(user);
            expect(envelopeIds(entries.map((e) => e.update), p.conversationId)).to.deep.equal(ids);
            const sns = entries.map((e) => e.sn);
            expect(sns).to.deep.equal(Array.from({ length: 24 }, (_, i) => sns[0] + i));
          }
        }
      });

      it("the same clientMessageId sent 10 times at once yields one message, delivered once", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const conversationId = await befriend(server, alice, bob, mode);
        const w = await watch([alice, bob]);
        const clientMessageId = nextClientMessageId();
        const answers = await Promise.all(Array.from({ length: 10 }, () => send(alice, conversationId, textBody("once"), clientMessageId)));
        expect(new Set(answers.map((a) => `${a.messageId}/${a.createdAt}`)).size).to.equal(1);
        expect(answers[0].messageId).to.equal(1n);
        // The same id from the other participant is a different message.
        const bobs = await Promise.all(Array.from({ length: 10 }, () => send(bob, conversationId, textBody("mine"), clientMessageId)));
        expect(new Set(bobs.map((a) => a.messageId))).to.deep.equal(new Set([2n]));
        const history = await messages(alice.accessToken).getMessageHistory({ conversationId });
        expect(history.messages.map((m) => [m.messageId, m.senderId, m.clientMessageId])).to.deep.equal([
          [2n, bob.userId, clientMessageId],
          [1n, alice.userId, clientMessageId],
        ]);
        for (const user of [alice, bob]) expect(envelopeIds(await events(w, user), conversationId)).to.deep.equal([1n, 2n]);
        const { conversation } = await conversations(alice.accessToken).getConversation({ conversationId });
        expect(conversation?.lastMessageId).to.equal(2n);
      });
    });
  });
}
