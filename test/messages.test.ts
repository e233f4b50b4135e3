import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationActionType, ConversationType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, MessageEntityType } from "../shared/gen/shared/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { befriend } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { MessageBodySchema } from "../shared/gen/shared/v1/message_pb.js";

type BodyInit = MessageInitShape<typeof MessageBodySchema>;
const text = (t: string): BodyInit => ({ type: MessageType.TEXT, content: { case: "text", value: { text: t } } });
let clientIds = 1n;
const nextClientId = () => clientIds++;

for (const mode of wireModes) {
  describe(`MessageService and ConversationService (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const messages = (u: SignedIn) => client(server, MessageService, mode, u.accessToken);
    const conversations = (u: SignedIn) => client(server, ConversationService, mode, u.accessToken);
    const sync = (u: SignedIn) => client(server, SyncService, mode, u.accessToken);
    const latestSn = async (u: SignedIn) => (await sync(u).getCurrentState({})).state!.latestSn;

    async function pair() {
      const alice = await signInWithCode(server, mode);
      const bob = await signInWithCode(server, mode);
      const conversationId = await befriend(server, alice, bob, mode);
      return { alice, bob, conversationId };
    }

    const send = (u: SignedIn, conversationId: bigint, body: BodyInit = text("hello"), extra: { replyToMessageId?: bigint; clientMessageId?: bigint } = {}) =>
      messages(u).sendMessage({ conversationId, body, clientMessageId: extra.clientMessageId ?? nextClientId(), replyToMessageId: extra.replyToMessageId });

    describe("SendMessage", () => {
      it("assigns dense ids and delivers the envelope to both participants' streams", async () => {
        const { alice, bob, conversationId } = await pair();
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        const first = await send(alice, conversationId, text("one"));
        const second = await send(bob, conversationId, text("two"));
        expect(first.messageId).to.equal(1n);
        expect(second.messageId).to.equal(2n);
        for (const [user, base] of [[alice, aliceBase], [bob, bobBase]] as const) {
          const diff = await sync(user).getDifference({ sn: base });
          const envelopes = diff.updates.map((u) => (u.update.case === "messageEnvelope" ? u.update.value : undefined));
          expect(envelopes.map((e) => e?.messageId)).to.deep.equal([1n, 2n]);
          expect(envelopes[0]?.body?.content.case === "text" && envelopes[0].body.content.value.text).to.equal("one");
          expect(envelopes[0]?.senderId).to.equal(alice.userId);
          expect(envelopes[1]?.conversationId).to.equal(conversationId);
        }
      });

      it("is idempotent by clientMessageId per sender", async () => {
        const { alice, bob, conversationId } = await pair();
        const first = await send(alice, conversationId, text("once"), { clientMessageId: 4242n });
        const again = await send(alice, conversationId, text("once"), { clientMessageId: 4242n });
        expect(again).to.deep.include({ messageId: first.messageId, createdAt: first.createdAt });
        const other = await send(bob, conversationId, text("same client id, other sender"), { clientMessageId: 4242n });
        expect(other.messageId).to.equal(first.messageId + 1n);
        const history = await messages(alice).getMessageHistory({ conversationId });
        expect(history.messages).to.have.length(2);
      });

      it("accepts every client body type within its bounds and rejects those outside", async () => {
        const { alice, conversationId } = await pair();
        const bodies: BodyInit[] = [
          text("x".repeat(10000)),
          { type: MessageType.MARKDOWN, content: { case: "markdown", value: { rawMarkdown: "**bold**" } } },
          { type: MessageType.CARD, content: { case: "card", value: { cardJson: "{}", fallbackText: "card" } } },
          { type: MessageType.IMAGE, content: { case: "image", value: { fileId: "f1", width: 10, height: 10, format: "png" } } },
          { type: MessageType.AUDIO, content: { case: "audio", value: { fileId: "f2", durationMs: 1000 } } },
          { type: MessageType.VIDEO, content: { case: "video", value: { fileId: "f3", durationMs: 1000 } } },
          { type: MessageType.FILE, content: { case: "file", value: { fileId: "f4", filename: "a.pdf", mimeType: "application/pdf" } } },
          { type: MessageType.TEXT, content: { case: "text", value: { text: "hi @bob", entities: [{ type: MessageEntityType.MENTION, offset: 3, length: 4, data: { case: "mention", value: { userId: 1 } } }] } } },
        ];
        for (const body of bodies) await send(alice, conversationId, body);
        await expectError(send(alice, conversationId, text("")), Errors.invalidArgument);
        await expectError(send(alice, conversationId, text("x".repeat(10001))), Errors.invalidArgument);
        await expectError(send(alice, conversationId, { type: MessageType.MARKDOWN, content: { case: "markdown", value: { rawMarkdown: "m".repeat(20001) } } }), Errors.invalidArgument);
        await expectError(send(alice, conversationId, { type: MessageType.CARD, content: { case: "card", value: { cardJson: "{not json}" } } }), Errors.invalidBody);
        await expectError(send(alice, conversationId, { type: MessageType.CARD, content: { case: "card", value: { cardJson: "{" } } }), Errors.invalidArgument);
        await expectError(send(alice, conversationId, { type: MessageType.CARD, content: { case: "card", value: { cardJson: JSON.stringify({ a: "x".repeat(51200) }) } } }), Errors.invalidArgument);
        await expectError(send(alice, conversationId, { type: MessageType.IMAGE, content: { case: "text", value: { text: "mismatch" } } }), Errors.invalidBody);
        await expectError(send(alice, conversationId, { type: MessageType.RECALLED, content: { case: "recalled", value: {} } }), Errors.invalidBody);
        await expectError(send(alice, conversationId, { type: MessageType.STREAM, content: { case: "stream", value: {} } }), Errors.invalidBody);
        await expectError(
          send(alice, conversationId, { type: MessageType.TEXT, content: { case: "text", value: { text: "short", entities: [{ type: MessageEntityType.URL, offset: 3, length: 10 }] } } }),
          Errors.invalidBody,
        );
        const history = await messages(alice).getMessageHistory({ conversationId, limit: 200 });
        expect(history.messages).to.have.length(bodies.length);
      });

      it("attaches a ReplyContext with the first 100 characters", async () => {
        const { alice, bob, conversationId } = await pair();
        const original = await send(alice, conversationId, text("r".repeat(150)));
        const reply = await send(bob, conversationId, text("answer"), { replyToMessageId: original.messageId });
        const { message } = await messages(alice).getMessage({ conversationId, messageId: reply.messageId });
        expect(message?.replyTo).to.deep.include({ messageId: original.messageId, senderId: alice.userId, contentPreview: "r".repeat(100) });
        await expectError(send(bob, conversationId, text("to nothing"), { replyToMessageId: 999n }), Errors.replyTargetNotFound);
      });

      it("answers NOT_FOUND for an unknown conversation and PERMISSION_DENIED for an outsider", async () => {
        const { conversationId } = await pair();
        const outsider = await signInWithCode(server, mode);
        await expectError(send(outsider, conversationId), Errors.notMember);
        await expectError(send(outsider, (BigInt(outsider.userId) << 32n) | 1n), Errors.conversationNotFound);
        await expectError(send(outsider, 12345n), Errors.conversationNotFound);
      });

      it("answers FAILED_PRECONDITION after a one-sided DeleteContact, until re-friended", async () => {
        const { alice, bob, conversationId } = await pair();
        await send(alice, conversationId);
        await client(server, ContactService, mode, alice.accessToken).deleteContact({ contactUserId: bob.userId });
        await expectError(send(alice, conversationId), Errors.contactRemoved);
        await expectError(send(bob, conversationId), Errors.contactRemoved);
        // The conversation stays readable.
        expect((await messages(bob).getMessageHistory({ conversationId })).messages).to.have.length(1);
        await befriend(server, bob, alice, mode);
        await send(alice, conversationId);
      });

      it("answers PERMISSION_DENIED once either side blocked the other", async () => {
        const { alice, bob, conversationId } = await pair();
        await client(server, ContactService, mode, bob.accessToken).blockUser({ targetUserId: alice.userId });
        await expectError(send(alice, conversationId), Errors.blocked);
        await expectError(send(bob, conversationId), Errors.blocked);
      });

      it("keeps ids dense with many concurrent senders", async () => {
        const { alice, bob, conversationId } = await pair();
        const sends = Array.from({ length: 60 }, (_, i) => send(i % 2 ? alice : bob, conversationId, text(`c${i}`)));
        const ids = (await Promise.all(sends)).map((r) => r.messageId).sort((a, b) => (a < b ? -1 : 1));
        expect(ids).to.deep.equal(Array.from({ length: 60 }, (_, i) => BigInt(i + 1)));
        // Each participant's stream carries the conversation's messages in id order.
        for (const user of [alice, bob]) {
          const diff = await sync(user).getDifference({ sn: 0 });
          const seen = diff.updates.flatMap((u) => (u.update.case === "messageEnvelope" ? [u.update.value.messageId] : []));
          expect(seen).to.deep.equal(ids);
        }
      });
    });

    describe("EditMessage and RecallMessage", () => {
      it("edits the sender's message: edited, updatedAt, same type, pushed to both", async () => {
        const { alice, bob, conversationId } = await pair();
        const sent = await send(alice, conversationId, text("draft"));
        const bobBase = await latestSn(bob);
        const { updatedAt } = await messages(alice).editMessage({ conversationId, messageId: sent.messageId, newBody: text("final") });
        const { message } = await messages(bob).getMessage({ conversationId, messageId: sent.messageId });
        expect(message?.edited).to.equal(true);
        expect(message?.updatedAt).to.equal(updatedAt);
        expect(message?.body?.content.case === "text" && message.body.content.value.text).to.equal("final");
        const diff = await sync(bob).getDifference({ sn: bobBase });
        expect(diff.updates).to.have.length(1);
        expect(diff.updates[0].update.case === "messageEnvelope" && diff.updates[0].update.value.edited).to.equal(true);
      });

      it("answers PERMISSION_DENIED for another's message, INVALID_ARGUMENT for another type, FAILED_PRECONDITION after 24 h or a recall", async () => {
        const { alice, bob, conversationId } = await pair();
        const sent = await send(alice, conversationId, text("mine"));
        await expectError(messages(bob).editMessage({ conversationId, messageId: sent.messageId, newBody: text("theirs") }), Errors.notSender);
        await expectError(
          messages(alice).editMessage({ conversationId, messageId: sent.messageId, newBody: { type: MessageType.MARKDOWN, content: { case: "markdown", value: { rawMarkdown: "x" } } } }),
          Errors.bodyTypeChanged,
        );
        await expectError(messages(alice).editMessage({ conversationId, messageId: 999n, newBody: text("x") }), Errors.messageNotFound);
        await messages(alice).recallMessage({ conversationId, messageId: sent.messageId });
        await expectError(messages(alice).editMessage({ conversationId, messageId: sent.messageId, newBody: text("x") }), Errors.messageRecalled);
        await expectError(messages(alice).recallMessage({ conversationId, messageId: sent.messageId }), Errors.messageRecalled);
        const old = await send(alice, conversationId, text("old"));
        server.clock.advance(24 * 60 * 60 * 1000 + 1000);
        const renewed = await client(server, AuthService, mode).refreshToken({ refreshToken: alice.refreshToken });
        const later = { ...alice, accessToken: renewed.accessToken };
        await expectError(messages(later).editMessage({ conversationId, messageId: old.messageId, newBody: text("x") }), Errors.editWindowClosed);
        await expectError(messages(later).recallMessage({ conversationId, messageId: old.messageId }), Errors.recallWindowClosed);
      });

      it("recalls: the body becomes RECALLED for everyone, sender kept, not marked edited", async () => {
        const { alice, bob, conversationId } = await pair();
        const sent = await send(alice, conversationId, text("oops"));
        await expectError(messages(bob).recallMessage({ conversationId, messageId: sent.messageId }), Errors.notSender);
        await messages(alice).recallMessage({ conversationId, messageId: sent.messageId });
        const { message } = await messages(bob).getMessage({ conversationId, messageId: sent.messageId });
        expect(message?.body?.type).to.equal(MessageType.RECALLED);
        expect(message?.body?.content.case).to.equal("recalled");
        expect(message?.senderId).to.equal(alice.userId);
        expect(message?.edited).to.equal(false);
        expect(message?.updatedAt).to.be.a("bigint");
      });
    });

    describe("DeleteMessages, DeleteHistory, GetMessage, GetMessageHistory", () => {
      it("deletes for the caller only and counts what it actually deleted", async () => {
        const { alice, bob, conversationId } = await pair();
        for (let i = 0; i < 3; i++) await send(alice, conversationId, text(`m${i}`));
        const base = await latestSn(alice);
        const { deletedCount } = await messages(alice).deleteMessages({ conversationId, messageIds: [1n, 2n, 2n, 99n] });
        expect(deletedCount).to.equal(2);
        expect((await messages(alice).deleteMessages({ conversationId, messageIds: [1n] })).deletedCount).to.equal(0);
        expect((await messages(alice).getMessageHistory({ conversationId })).messages.map((m) => m.messageId)).to.deep.equal([3n]);
        expect((await messages(bob).getMessageHistory({ conversationId })).messages).to.have.length(3);
        await expectError(messages(alice).getMessage({ conversationId, messageId: 1n }), Errors.messageNotFound);
        const diff = await sync(alice).getDifference({ sn: base });
        const event = diff.updates[0].update;
        expect(event.case).to.equal("messageDeleted");
        if (event.case === "messageDeleted") expect(event.value).to.deep.include({ conversationId, upToMessageId: 0n });
        await expectError(messages(alice).deleteMessages({ conversationId, messageIds: Array.from({ length: 201 }, (_, i) => BigInt(i + 1)) }), Errors.invalidArgument);
      });

      it("DeleteHistory hides everything up to the id for the caller", async () => {
        const { alice, bob, conversationId } = await pair();
        for (let i = 0; i < 4; i++) await send(alice, conversationId, text(`m${i}`));
        await messages(bob).deleteHistory({ conversationId, upToMessageId: 3n });
        expect((await messages(bob).getMessageHistory({ conversationId })).messages.map((m) => m.messageId)).to.deep.equal([4n]);
        expect((await messages(alice).getMessageHistory({ conversationId })).messages).to.have.length(4);
        const outsider = await signInWithCode(server, mode);
        await expectError(messages(outsider).deleteHistory({ conversationId, upToMessageId: 1n }), Errors.notMember);
      });

      it("pages history with both cursors and answers the related users", async () => {
        const { alice, bob, conversationId } = await pair();
        for (let i = 1; i <= 7; i++) await send(i % 2 ? alice : bob, conversationId, text(`h${i}`));
        const latest = await messages(alice).getMessageHistory({ conversationId, limit: 3 });
        expect(latest.messages.map((m) => m.messageId)).to.deep.equal([7n, 6n, 5n]);
        expect(latest.hasMore).to.equal(true);
        expect(latest.relatedUsers.map((u) => u.userId).sort()).to.deep.equal([alice.userId, bob.userId].sort());
        const older = await messages(alice).getMessageHistory({ conversationId, beforeMessageId: 5n, limit: 3 });
        expect(older.messages.map((m) => m.messageId)).to.deep.equal([4n, 3n, 2n]);
        const rest = await messages(alice).getMessageHistory({ conversationId, beforeMessageId: 2n, limit: 3 });
        expect(rest.messages.map((m) => m.messageId)).to.deep.equal([1n]);
        expect(rest.hasMore).to.equal(false);
        const newer = await messages(alice).getMessageHistory({ conversationId, afterMessageId: 2n, limit: 3 });
        expect(newer.messages.map((m) => m.messageId)).to.deep.equal([3n, 4n, 5n]);
        expect(newer.hasMore).to.equal(true);
        await expectError(messages(alice).getMessageHistory({ conversationId, afterMessageId: 1n, beforeMessageId: 5n }), Errors.invalidArgument);
        await expectError(messages(alice).getMessageHistory({ conversationId, limit: 201 }), Errors.invalidArgument);
      });
    });

    describe("ConversationService", () => {
      it("GetConversation answers the PRIVATE conversation with the peer for both users", async () => {
        const { alice, bob, conversationId } = await pair();
        const { conversation } = await conversations(alice).getConversation({ conversationId });
        expect(conversation).to.deep.include({ conversationId, type: ConversationType.PRIVATE, peerId: bob.userId, lastMessageId: 0n, isMuted: false });
        expect((await conversations(bob).getConversation({ conversationId })).conversation?.peerId).to.equal(alice.userId);
        const outsider = await signInWithCode(server, mode);
        await expectError(conversations(outsider).getConversation({ conversationId }), Errors.notMember);
        await expectError(conversations(outsider).getConversation({ conversationId: 77n }), Errors.conversationNotFound);
      });

      it("ListConversations orders by last message time with the latest messages and related users", async () => {
        const alice = await signInWithCode(server, mode);
        const friends = [await signInWithCode(server, mode), await signInWithCode(server, mode), await signInWithCode(server, mode)];
        const ids: bigint[] = [];
        for (const friend of friends) ids.push(await befriend(server, alice, friend, mode));
        await send(alice, ids[1], text("second"));
        server.clock.advance(10);
        await send(friends[0], ids[0], text("first"));
        server.clock.advance(10);
        await send(alice, ids[2], text("third"));
        const page = await conversations(alice).listConversations({ limit: 2 });
        expect(page.conversations.map((c) => c.conversationId)).to.deep.equal([ids[2], ids[0]]);
        expect(page.hasMore).to.equal(true);
        expect(page.messages.map((m) => m.body?.content.case === "text" && m.body.content.value.text)).to.deep.equal(["third", "first"]);
        expect(page.relatedUsers.map((u) => u.userId).sort()).to.deep.equal([friends[2].userId, friends[0].userId].sort());
        const next = await conversations(alice).listConversations({ beforeTime: page.conversations[1].lastMessageTime, limit: 2 });
        expect(next.conversations.map((c) => c.conversationId)).to.deep.equal([ids[1]]);
        expect(next.hasMore).to.equal(false);
      });

      it("MUTE, UNMUTE and DELETE with clearMessages, restored by a new message, each with its event", async () => {
        const { alice, bob, conversationId } = await pair();
        await send(bob, conversationId, text("before delete"));
        const base = await latestSn(alice);
        await conversations(alice).updateConversationAction({ conversationId, action: ConversationActionType.MUTE });
        expect((await conversations(alice).getConversation({ conversationId })).conversation?.isMuted).to.equal(true);
        await conversations(alice).updateConversationAction({ conversationId, action: ConversationActionType.UNMUTE });
        await conversations(alice).updateConversationAction({ conversationId, action: ConversationActionType.DELETE, clearMessages: true });
        expect((await conversations(alice).listConversations({})).conversations.map((c) => c.conversationId)).to.not.include(conversationId);
        expect((await messages(alice).getMessageHistory({ conversationId })).messages).to.deep.equal([]);
        const events = (await sync(alice).getDifference({ sn: base })).updates.map((u) => u.update);
        expect(events.map((e) => e.case === "conversationAction" && [e.value.action, e.value.clearMessages])).to.deep.equal([
          [ConversationActionType.MUTE, false],
          [ConversationActionType.UNMUTE, false],
          [ConversationActionType.DELETE, true],
        ]);
        await send(bob, conversationId, text("after delete"));
        const listed = await conversations(alice).listConversations({});
        expect(listed.conversations.map((c) => c.conversationId)).to.include(conversationId);
        expect((await messages(alice).getMessageHistory({ conversationId })).messages.map((m) => m.body?.content.case === "text" && m.body.content.value.text)).to.deep.equal(["after delete"]);
        expect((await messages(bob).getMessageHistory({ conversationId })).messages).to.have.length(2);
        await expectError(conversations(alice).updateConversationAction({ conversationId, action: ConversationActionType.UNSPECIFIED }), Errors.invalidArgument);
      });

      it("hides a conversation from both users while either blocks the other, without deleting it", async () => {
        const { alice, bob, conversationId } = await pair();
        await send(alice, conversationId, text("kept"));
        await client(server, ContactService, mode, alice.accessToken).blockUser({ targetUserId: bob.userId });
        for (const user of [alice, bob]) {
          expect((await conversations(user).listConversations({})).conversations.map((c) => c.conversationId)).to.not.include(conversationId);
        }
        await client(server, ContactService, mode, alice.accessToken).unblockUser({ targetUserId: bob.userId });
        expect((await conversations(bob).listConversations({})).conversations.map((c) => c.conversationId)).to.include(conversationId);
        expect((await messages(alice).getMessageHistory({ conversationId })).messages).to.have.length(1);
      });

      it("MarkAsRead moves forward only and emits ReadReceiptEvent to the reader only", async () => {
        const { alice, bob, conversationId } = await pair();
        for (let i = 0; i < 3; i++) await send(bob, conversationId, text(`r${i}`));
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        await conversations(alice).markAsRead({ conversationId, upToMessageId: 2n });
        const info = (await conversations(alice).getConversation({ conversationId })).conversation!;
        expect(info.lastReadMessageId).to.equal(2n);
        expect(info.lastMessageId - info.lastReadMessageId).to.equal(1n);
        await expectError(conversations(alice).markAsRead({ conversationId, upToMessageId: 1n }), Errors.readPositionBackwards);
        await expectError(conversations(alice).markAsRead({ conversationId, upToMessageId: 9n }), Errors.invalidArgument);
        const [event] = (await sync(alice).getDifference({ sn: aliceBase })).updates;
        expect(event.update.case === "readReceipt" && event.update.value).to.deep.include({ conversationId, readerUserId: alice.userId, lastReadMessageId: 2n });
        expect(await latestSn(bob)).to.equal(bobBase);
      });
    });

    it("pushes a new message live to the recipient's socket", async () => {
      const { alice, bob, conversationId } = await pair();
      const ws = await GatewayClient.connect(server.url, mode);
      try {
        await ws.authenticate(bob.accessToken);
        await send(alice, conversationId, text("live!"));
        const frame = await ws.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.update.case === "messageEnvelope");
        const update = frame.payload.case === "update" ? frame.payload.value : undefined;
        expect(update?.users.map((u) => u.userId)).to.deep.equal([alice.userId]);
      } finally {
        ws.close();
      }
    });

    it("answers UNAUTHENTICATED without a token", async () => {
      await expectError(client(server, MessageService, mode).sendMessage({ conversationId: 1n, clientMessageId: 1n, body: text("x") }), Code.Unauthenticated);
    });
  });
}
