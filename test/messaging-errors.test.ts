// Every error condition of ContactService, ConversationService and MessageService, through the
// real Connect client: the Connect code, the catalogue entry, and that a refused call changed
// nothing (no stored message, no state change, no update-stream entry).
import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationActionType, ConversationType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageEntityType, MessageType } from "../shared/gen/shared/v1/message_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { Errors } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import {
  cardBody,
  markdownBody,
  nextClientMessageId,
  streamStartBody,
  textBody,
  textOf,
  type BodyInit,
} from "./support/messaging.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";

for (const mode of wireModes) {
  describe(`messaging errors (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const contacts = (token: string) => client(server, ContactService, mode, token);
    const conversations = (token: string) => client(server, ConversationService, mode, token);
    const messages = (token: string) => client(server, MessageService, mode, token);
    const groups = (token: string) => client(server, GroupService, mode, token);
    const latestSn = async (u: SignedIn) => (await client(server, SyncService, mode, u.accessToken).getCurrentState({})).state!.latestSn;
    const fresh = () => signInWithCode(server, mode);

    async function pair() {
      const alice = await fresh();
      const bob = await fresh();
      const conversationId = await befriend(server, alice, bob, mode);
      return { alice, bob, conversationId };
    }

    const send = (u: SignedIn | TestAgent, conversationId: bigint, body: BodyInit = textBody("hello"), replyToMessageId?: bigint) =>
      messages("accessToken" in u ? u.accessToken : u.token).sendMessage({ conversationId, body, clientMessageId: nextClientMessageId(), replyToMessageId });

    /** Runs refused calls and checks that none of them appended to these users' streams. */
    async function withoutEvents(users: SignedIn[], refused: () => Promise<void>): Promise<void> {
      const before = await Promise.all(users.map(latestSn));
      await refused();
      expect(await Promise.all(users.map(latestSn)), "no update-stream entry after refused calls").to.deep.equal(before);
    }

    /** A group of the owner with two fresh members. */
    async function group(owner: SignedIn) {
      const members = [await fresh(), await fresh()];
      const created = (await groups(owner.accessToken).createGroup({ name: "g", memberIds: members.map((m) => m.userId) })).group!;
      return { groupId: created.groupId, conversationId: BigInt(created.groupId), members };
    }

    describe("access labels and credentials", () => {
      it("every RPC of the three services answers UNAUTHENTICATED without a token or with an unknown one", async () => {
        for (const token of [undefined, "nxs_not-a-token"]) {
          const c = client(server, ContactService, mode, token);
          const v = client(server, ConversationService, mode, token);
          const m = client(server, MessageService, mode, token);
          const calls: Promise<unknown>[] = [
            c.sendFriendRequest({ targetUserId: 1 }),
            c.listPendingRequests({}),
            c.acceptFriendRequest({ requestId: 1n }),
            c.rejectFriendRequest({ requestId: 1n }),
            c.addContact({ targetUserId: 1 }),
            c.listContacts({}),
            c.deleteContact({ contactUserId: 1 }),
            c.updateContactAlias({ contactUserId: 1 }),
            c.searchUsers({ query: "x" }),
            c.blockUser({ targetUserId: 1 }),
            c.unblockUser({ targetUserId: 1 }),
            c.listBlocked({}),
            v.getConversation({ conversationId: 1n }),
            v.listConversations({}),
            v.updateConversationAction({ conversationId: 1n, action: ConversationActionType.MUTE }),
            v.markAsRead({ conversationId: 1n, upToMessageId: 1n }),
            m.sendMessage({ conversationId: 1n, clientMessageId: 1n, body: textBody("x") }),
            m.editMessage({ conversationId: 1n, messageId: 1n, newBody: textBody("x") }),
            m.deleteMessages({ conversationId: 1n, messageIds: [1n] }),
            m.deleteHistory({ conversationId: 1n, upToMessageId: 1n }),
            m.recallMessage({ conversationId: 1n, messageId: 1n }),
            m.getMessage({ conversationId: 1n, messageId: 1n }),
            m.getMessageHistory({ conversationId: 1n }),
            m.submitCardAction({ conversationId: 1n, messageId: 1n, actionData: "{}" }),
            m.pushStreamDelta({ conversationId: 1n, messageId: 1n, seq: 1, delta: "x" }),
            m.endStream({ conversationId: 1n, messageId: 1n }),
            m.errorStream({ conversationId: 1n, messageId: 1n, errorMessage: "x" }),
            m.answerCardAction({ conversationId: 1n, messageId: 1n, actionId: "a" }),
          ];
          for (const call of calls) await expectError(call, Errors.unauthenticated);
        }
      });

      it("user-only ContactService RPCs answer PERMISSION_DENIED (USER_ONLY) to an agent token; the others serve agents", async () => {
        const owner = await fresh();
        const agent = await createAgent(server, owner, mode);
        const asAgent = contacts(agent.token);
        await expectError(asAgent.sendFriendRequest({ targetUserId: owner.userId }), Errors.userOnly);
        await expectError(asAgent.acceptFriendRequest({ requestId: 1n }), Errors.userOnly);
        await expectError(asAgent.rejectFriendRequest({ requestId: 1n }), Errors.userOnly);
        await expectError(asAgent.addContact({ targetUserId: owner.userId }), Errors.userOnly);
        // Open to either identity: the agent sees its creator as its contact.
        expect((await asAgent.listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([owner.userId]);
        expect((await asAgent.listPendingRequests({})).items).to.deep.equal([]);
        expect((await asAgent.listBlocked({})).blocked).to.deep.equal([]);
      });

      it("agent-only MessageService RPCs answer PERMISSION_DENIED (AGENT_ONLY) to a user token", async () => {
        const { alice, conversationId } = await pair();
        const sent = await send(alice, conversationId);
        const asUser = messages(alice.accessToken);
        await expectError(asUser.pushStreamDelta({ conversationId, messageId: sent.messageId, seq: 1, delta: "x" }), Errors.agentOnly);
        await expectError(asUser.endStream({ conversationId, messageId: sent.messageId, accumulatedText: "x" }), Errors.agentOnly);
        await expectError(asUser.errorStream({ conversationId, messageId: sent.messageId, errorMessage: "x" }), Errors.agentOnly);
        await expectError(asUser.answerCardAction({ conversationId, messageId: sent.messageId, actionId: "a", showAlert: false }), Errors.agentOnly);
      });
    });

    describe("ContactService", () => {
      it("SendFriendRequest to an agent answers INVALID_ARGUMENT (agents are added with AddContact)", async () => {
        const [owner, other] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        await withoutEvents([other], () => expectError(contacts(other.accessToken).sendFriendRequest({ targetUserId: agent.userId }), Errors.invalidArgument).then(() => undefined));
      });

      it("Accept and Reject validate the id and answer NOT_FOUND for ids beyond any request", async () => {
        const alice = await fresh();
        await expectError(contacts(alice.accessToken).acceptFriendRequest({ requestId: 0n }), Errors.invalidArgument);
        await expectError(contacts(alice.accessToken).acceptFriendRequest({ requestId: -5n }), Errors.invalidArgument);
        await expectError(contacts(alice.accessToken).acceptFriendRequest({ requestId: 9_007_199_254_740_993n }), Errors.friendRequestNotFound);
        await expectError(contacts(alice.accessToken).rejectFriendRequest({ requestId: 9_007_199_254_740_993n }), Errors.friendRequestNotFound);
      });

      it("AddContact answers PERMISSION_DENIED while either side blocks the agent, ALREADY_EXISTS once added", async () => {
        const [owner, other] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        await contacts(owner.accessToken).deleteContact({ contactUserId: agent.userId });
        await contacts(owner.accessToken).blockUser({ targetUserId: agent.userId });
        await withoutEvents([owner], async () => {
          await expectError(contacts(owner.accessToken).addContact({ targetUserId: agent.userId }), Errors.blocked);
        });
        await contacts(owner.accessToken).unblockUser({ targetUserId: agent.userId });
        await contacts(owner.accessToken).addContact({ targetUserId: agent.userId });
        await expectError(contacts(owner.accessToken).addContact({ targetUserId: agent.userId }), Errors.contactAlreadyExists);
        await expectError(contacts(other.accessToken).addContact({ targetUserId: 0 }), Errors.invalidArgument);
        await expectError(contacts(other.accessToken).addContact({ targetUserId: other.userId }), Errors.cannotTargetSelf);
      });

      it("ListPendingRequests: limit 0..100 (0 selects 20), anything else INVALID_ARGUMENT", async () => {
        const target = await fresh();
        for (let i = 0; i < 21; i++) {
          const sender = await fresh();
          await contacts(sender.accessToken).sendFriendRequest({ targetUserId: target.userId });
        }
        const byDefault = await contacts(target.accessToken).listPendingRequests({});
        expect(byDefault.items).to.have.length(20);
        expect(byDefault.hasMore).to.equal(true);
        expect((await contacts(target.accessToken).listPendingRequests({ limit: 0 })).items).to.have.length(20);
        const all = await contacts(target.accessToken).listPendingRequests({ limit: 100 });
        expect(all.items).to.have.length(21);
        expect(all.hasMore).to.equal(false);
        expect(all.users).to.have.length(21);
        await expectError(contacts(target.accessToken).listPendingRequests({ limit: 101 }), Errors.invalidArgument);
        await expectError(contacts(target.accessToken).listPendingRequests({ limit: -1 }), Errors.invalidArgument);
      });

      it("ListContacts: limit 0..200 (0 selects 50), anything else INVALID_ARGUMENT", async function () {
        this.timeout(60_000);
        const owner = await fresh();
        // Each agent is a contact of its creator: the cheapest way to 51 contacts.
        for (let i = 0; i < 51; i++) await createAgent(server, owner, mode);
        const byDefault = await contacts(owner.accessToken).listContacts({});
        expect(byDefault.contacts).to.have.length(50);
        expect(byDefault).to.deep.include({ totalContacts: 51, hasMore: true });
        const all = await contacts(owner.accessToken).listContacts({ limit: 200 });
        expect(all.contacts).to.have.length(51);
        expect(all.hasMore).to.equal(false);
        const ids = all.contacts.map((c) => c.user!.userId);
        expect(ids).to.deep.equal([...ids].sort((a, b) => a - b));
        expect(all.contacts.every((c) => c.alias === undefined), "agent contacts never carry an alias").to.equal(true);
        await expectError(contacts(owner.accessToken).listContacts({ limit: 201 }), Errors.invalidArgument);
        await expectError(contacts(owner.accessToken).listContacts({ limit: -1 }), Errors.invalidArgument);
      });

      it("DeleteContact answers NOT_FOUND for an unknown user or a non-contact, INVALID_ARGUMENT for id 0", async () => {
        const [alice, stranger] = [await fresh(), await fresh()];
        await withoutEvents([alice], async () => {
          await expectError(contacts(alice.accessToken).deleteContact({ contactUserId: 99_999_999 }), Errors.contactNotFound);
          await expectError(contacts(alice.accessToken).deleteContact({ contactUserId: stranger.userId }), Errors.contactNotFound);
          await expectError(contacts(alice.accessToken).deleteContact({ contactUserId: 0 }), Errors.invalidArgument);
        });
      });

      it("UpdateContactAlias answers NOT_FOUND for unknown users, INVALID_ARGUMENT for an agent alias; clearing an agent's alias is fine", async () => {
        const owner = await fresh();
        const agent = await createAgent(server, owner, mode);
        await withoutEvents([owner], async () => {
          await expectError(contacts(owner.accessToken).updateContactAlias({ contactUserId: 99_999_999, alias: "x" }), Errors.contactNotFound);
          await expectError(contacts(owner.accessToken).updateContactAlias({ contactUserId: agent.userId, alias: "Robo" }), Errors.invalidArgument);
          await expectError(contacts(owner.accessToken).updateContactAlias({ contactUserId: 0 }), Errors.invalidArgument);
        });
        await contacts(owner.accessToken).updateContactAlias({ contactUserId: agent.userId, alias: "" });
        const listed = await contacts(owner.accessToken).listContacts({});
        const agentContact = listed.contacts.find((c) => c.user?.userId === agent.userId);
        expect(agentContact, "the agent stays a contact").to.not.equal(undefined);
        expect(agentContact?.alias).to.equal(undefined);
      });

      it("alias bound is 0..64 characters", async () => {
        const { alice, bob } = await pair();
        await contacts(alice.accessToken).updateContactAlias({ contactUserId: bob.userId, alias: "é".repeat(64) });
        expect((await contacts(alice.accessToken).listContacts({})).contacts[0].alias).to.equal("é".repeat(64));
        await expectError(contacts(alice.accessToken).updateContactAlias({ contactUserId: bob.userId, alias: "é".repeat(65) }), Errors.invalidArgument);
        expect((await contacts(alice.accessToken).listContacts({})).contacts[0].alias).to.equal("é".repeat(64));
      });

      it("SearchUsers bounds the query to 1..255; Block and Unblock validate ids", async () => {
        const alice = await fresh();
        await expectError(contacts(alice.accessToken).searchUsers({ query: "q".repeat(256) }), Errors.invalidArgument);
        expect((await contacts(alice.accessToken).searchUsers({ query: "q".repeat(255) })).items).to.deep.equal([]);
        await expectError(contacts(alice.accessToken).blockUser({ targetUserId: 0 }), Errors.invalidArgument);
        await expectError(contacts(alice.accessToken).unblockUser({ targetUserId: 0 }), Errors.invalidArgument);
        await expectError(contacts(alice.accessToken).unblockUser({ targetUserId: 99_999_999 }), Errors.notBlocked);
      });
    });

    describe("ConversationService", () => {
      it("GetConversation: INVALID_ARGUMENT for 0, NOT_FOUND for ids that name no conversation", async () => {
        const alice = await fresh();
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: 0n }), Errors.invalidArgument);
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: -1n }), Errors.invalidArgument);
        // Both halves equal, smaller half above the larger one, and a PRIVATE pair that never met.
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: (7n << 32n) | 7n }), Errors.conversationNotFound);
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: (7n << 32n) | 9n }), Errors.conversationNotFound);
        const stranger = await fresh();
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: privateConversationId(alice.userId, stranger.userId) }), Errors.conversationNotFound);
        await expectError(conversations(alice.accessToken).getConversation({ conversationId: 2_000_000_000n }), Errors.conversationNotFound);
      });

      it("GetConversation of a GROUP: type GROUP with the group id as peer; PERMISSION_DENIED for non-members, FAILED_PRECONDITION once dissolved", async () => {
        const [owner, outsider] = [await fresh(), await fresh()];
        const { groupId, conversationId, members } = await group(owner);
        const { conversation } = await conversations(members[0].accessToken).getConversation({ conversationId });
        expect(conversation).to.deep.include({ conversationId, type: ConversationType.GROUP, peerId: groupId, lastMessageId: 1n, lastReadMessageId: 0n });
        await expectError(conversations(outsider.accessToken).getConversation({ conversationId }), Errors.notMember);
        await groups(owner.accessToken).dissolveGroup({ groupId });
        await expectError(conversations(members[0].accessToken).getConversation({ conversationId }), Errors.groupDissolved);
      });

      it("ListConversations: limit 0..100 (0 selects 20), anything else INVALID_ARGUMENT", async function () {
        this.timeout(60_000);
        const owner = await fresh();
        // Each agent brings a PRIVATE conversation with its creator, listed by creation time.
        for (let i = 0; i < 21; i++) {
          await createAgent(server, owner, mode);
          server.clock.advance(1);
        }
        const byDefault = await conversations(owner.accessToken).listConversations({});
        expect(byDefault.conversations).to.have.length(20);
        expect(byDefault.hasMore).to.equal(true);
        const all = await conversations(owner.accessToken).listConversations({ limit: 100 });
        expect(all.conversations).to.have.length(21);
        expect(all.hasMore).to.equal(false);
        expect(all.messages, "conversations without messages have no latest message").to.deep.equal([]);
        await expectError(conversations(owner.accessToken).listConversations({ limit: 101 }), Errors.invalidArgument);
        await expectError(conversations(owner.accessToken).listConversations({ limit: -1 }), Errors.invalidArgument);
      });

      it("UpdateConversationAction: NOT_FOUND, PERMISSION_DENIED, contact required for PRIVATE, membership for GROUP, action must be MUTE, UNMUTE or DELETE", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        const act = (u: SignedIn, id: bigint, action: ConversationActionType) => conversations(u.accessToken).updateConversationAction({ conversationId: id, action });
        await withoutEvents([alice, bob, outsider], async () => {
          await expectError(act(alice, 0n, ConversationActionType.MUTE), Errors.invalidArgument);
          await expectError(act(alice, 2_000_000_000n, ConversationActionType.MUTE), Errors.conversationNotFound);
          await expectError(act(outsider, conversationId, ConversationActionType.MUTE), Errors.notMember);
          await expectError(act(alice, conversationId, ConversationActionType.UNSPECIFIED), Errors.invalidArgument);
          await expectError(act(alice, conversationId, 9 as ConversationActionType), Code.InvalidArgument);
        });
        await contacts(alice.accessToken).deleteContact({ contactUserId: bob.userId });
        await withoutEvents([alice], async () => {
          await expectError(act(alice, conversationId, ConversationActionType.DELETE), Errors.contactNotFound);
        });
        // Bob still has Alice as a contact: his side of the relationship still allows it.
        await act(bob, conversationId, ConversationActionType.MUTE);
        expect((await conversations(alice.accessToken).getConversation({ conversationId })).conversation?.isMuted).to.equal(false);
        expect((await conversations(bob.accessToken).getConversation({ conversationId })).conversation?.isMuted).to.equal(true);

        const owner = await fresh();
        const team = await group(owner);
        await expectError(act(outsider, team.conversationId, ConversationActionType.MUTE), Errors.notMember);
        await groups(owner.accessToken).removeMember({ groupId: team.groupId, targetId: team.members[0].userId });
        await expectError(act(team.members[0], team.conversationId, ConversationActionType.MUTE), Errors.notMember);
        await act(team.members[1], team.conversationId, ConversationActionType.MUTE);
        expect((await conversations(team.members[1].accessToken).getConversation({ conversationId: team.conversationId })).conversation?.isMuted).to.equal(true);
      });

      it("MarkAsRead: NOT_FOUND, PERMISSION_DENIED, positions must be within the conversation and never move back", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        for (let i = 0; i < 3; i++) await send(bob, conversationId, textBody(`m${i}`));
        await conversations(alice.accessToken).markAsRead({ conversationId, upToMessageId: 2n });
        const read = (u: SignedIn, id: bigint, upTo: bigint) => conversations(u.accessToken).markAsRead({ conversationId: id, upToMessageId: upTo });
        await withoutEvents([alice, bob, outsider], async () => {
          await expectError(read(alice, conversationId, 0n), Errors.invalidArgument);
          await expectError(read(alice, 0n, 1n), Errors.invalidArgument);
          await expectError(read(alice, 2_000_000_000n, 1n), Errors.conversationNotFound);
          await expectError(read(outsider, conversationId, 1n), Errors.notMember);
          const backwards = await expectError(read(alice, conversationId, 1n), Errors.readPositionBackwards);
          expect(backwards.metadata.lastReadMessageId).to.equal("2");
          const beyond = await expectError(read(alice, conversationId, 4n), Errors.invalidArgument);
          expect(beyond.metadata.lastMessageId).to.equal("3");
        });
        expect((await conversations(alice.accessToken).getConversation({ conversationId })).conversation?.lastReadMessageId).to.equal(2n);
      });
    });

    describe("MessageService.SendMessage", () => {
      it("validates ids and requires a body whose type names its content", async () => {
        const { alice, bob, conversationId } = await pair();
        const m = messages(alice.accessToken);
        await withoutEvents([alice, bob], async () => {
          await expectError(m.sendMessage({ conversationId, clientMessageId: 0n, body: textBody("x") }), Errors.invalidArgument);
          await expectError(m.sendMessage({ conversationId: 0n, clientMessageId: nextClientMessageId(), body: textBody("x") }), Errors.invalidArgument);
          await expectError(m.sendMessage({ conversationId, clientMessageId: nextClientMessageId() }), Errors.invalidArgument);
          const refused: BodyInit[] = [
            { type: MessageType.TEXT },
            { type: MessageType.UNSPECIFIED, content: { case: "text", value: { text: "no type" } } },
            { type: MessageType.MARKDOWN, content: { case: "text", value: { text: "wrong type" } } },
            { type: MessageType.GROUP, content: { case: "customPayload", value: new Uint8Array([1]) } },
            { type: MessageType.RECALLED, content: { case: "customPayload", value: new Uint8Array([1]) } },
            { type: MessageType.STREAM, content: { case: "customPayload", value: new Uint8Array([1]) } },
            { type: MessageType.GROUP, content: { case: "group", value: { groupId: 1 } } },
            { type: MessageType.RECALLED, content: { case: "recalled", value: {} } },
          ];
          for (const body of refused) await expectError(send(alice, conversationId, body), Errors.invalidBody);
          await expectError(send(alice, conversationId, { type: 42 as MessageType, content: { case: "text", value: { text: "x" } } }), Code.InvalidArgument);
        });
        const custom = await send(alice, conversationId, { type: MessageType.UNSPECIFIED, content: { case: "customPayload", value: new Uint8Array([1, 2, 3]) } });
        const { message } = await messages(bob.accessToken).getMessage({ conversationId, messageId: custom.messageId });
        expect(message?.body?.content.case === "customPayload" && [...message.body.content.value]).to.deep.equal([1, 2, 3]);
        expect(custom.messageId, "refused bodies took no message id").to.equal(1n);
        // As upstream clients send one: with a content type of their choosing.
        const typed = await send(alice, conversationId, { type: MessageType.CARD, content: { case: "customPayload", value: new Uint8Array([9]) } });
        const typedMessage = (await messages(bob.accessToken).getMessage({ conversationId, messageId: typed.messageId })).message;
        expect([typedMessage?.body?.type, typedMessage?.body?.content.case]).to.deep.equal([MessageType.CARD, "customPayload"]);
      });

      it("counts text 1..10000 and markdown 1..20000 in characters, not UTF-16 units", async () => {
        const { alice, bob, conversationId } = await pair();
        await send(alice, conversationId, textBody("😀".repeat(10000)));
        await send(alice, conversationId, markdownBody("😀".repeat(20000)));
        await send(alice, conversationId, textBody("x"));
        await send(alice, conversationId, markdownBody("x"));
        await withoutEvents([alice, bob], async () => {
          await expectError(send(alice, conversationId, textBody("😀".repeat(10001))), Errors.invalidArgument);
          await expectError(send(alice, conversationId, textBody("")), Errors.invalidArgument);
          await expectError(send(alice, conversationId, markdownBody("😀".repeat(20001))), Errors.invalidArgument);
          await expectError(send(alice, conversationId, markdownBody("")), Errors.invalidArgument);
        });
        const history = await messages(bob.accessToken).getMessageHistory({ conversationId });
        expect(history.messages.map((m) => m.messageId)).to.deep.equal([4n, 3n, 2n, 1n]);
        expect([...textOf(history.messages[3])!].length).to.equal(10000);
      });

      it("checks card JSON syntax and the 2..51200 and 0..1000 bounds", async () => {
        const { alice, bob, conversationId } = await pair();
        const longest = `{"a":"${"x".repeat(51200 - 8)}"}`;
        expect(longest.length).to.equal(51200);
        for (const json of ["{}", "[]", "42", longest]) await send(alice, conversationId, cardBody(json));
        await send(alice, conversationId, cardBody("{}", "f".repeat(1000)));
        await withoutEvents([alice, bob], async () => {
          await expectError(send(alice, conversationId, cardBody("1")), Errors.invalidArgument);
          await expectError(send(alice, conversationId, cardBody(`{"a":"${"x".repeat(51200 - 7)}"}`)), Errors.invalidArgument);
          await expectError(send(alice, conversationId, cardBody("{}", "f".repeat(1001))), Errors.invalidArgument);
          for (const broken of ["{{", "{'a': 1}", '{"a":1,}', "{} {}", "nul", '"open']) {
            const detail = await expectError(send(alice, conversationId, cardBody(broken)), Errors.invalidBody);
            expect(detail.metadata.field).to.equal("card_json");
          }
        });
        const { message } = await messages(bob.accessToken).getMessage({ conversationId, messageId: 4n });
        expect(message?.body?.content.case === "card" && message.body.content.value.cardJson).to.equal(longest);
      });

      it("enforces the media content bounds", async () => {
        const { alice, bob, conversationId } = await pair();
        await withoutEvents([alice, bob], async () => {
          await expectError(send(alice, conversationId, { type: MessageType.IMAGE, content: { case: "image", value: { fileId: "" } } }), Errors.invalidArgument);
          await expectError(send(alice, conversationId, { type: MessageType.AUDIO, content: { case: "audio", value: { fileId: "f", durationMs: -1 } } }), Errors.invalidArgument);
          await expectError(send(alice, conversationId, { type: MessageType.VIDEO, content: { case: "video", value: { fileId: "" } } }), Errors.invalidArgument);
          await expectError(send(alice, conversationId, { type: MessageType.FILE, content: { case: "file", value: { fileId: "f", filename: "" } } }), Errors.invalidArgument);
          await expectError(send(alice, conversationId, { type: MessageType.FILE, content: { case: "file", value: { fileId: "f", filename: "n".repeat(256) } } }), Errors.invalidArgument);
        });
        await send(alice, conversationId, { type: MessageType.FILE, content: { case: "file", value: { fileId: "f", filename: "n".repeat(255), checksumSha256: "ab" } } });
        await send(alice, conversationId, { type: MessageType.AUDIO, content: { case: "audio", value: { fileId: "f", durationMs: 0, transcript: "said" } } });
        const history = await messages(bob.accessToken).getMessageHistory({ conversationId });
        expect(history.messages.map((m) => m.body?.content.case)).to.deep.equal(["audio", "file"]);
        const audio = history.messages[0].body?.content;
        expect(audio?.case === "audio" && audio.value.transcript).to.equal("said");
      });

      it("checks entities: a kind, details of that kind, inside the text counted in characters", async () => {
        const { alice, bob, conversationId } = await pair();
        const entity = (type: MessageEntityType, offset: number, length: number, detail?: "mention" | "url") => ({
          type,
          offset,
          length,
          data: detail === "mention" ? { case: "mention" as const, value: { userId: bob.userId } } : detail === "url" ? { case: "url" as const, value: { url: "https://x.io" } } : undefined,
        });
        // Two emoji and a space are three characters: offset 2 length 1 is the last one.
        await send(alice, conversationId, textBody("😀😀 ", [entity(MessageEntityType.HASHTAG, 2, 1)]));
        await send(alice, conversationId, textBody("hi @bob", [entity(MessageEntityType.MENTION, 3, 4, "mention"), entity(MessageEntityType.URL, 0, 2)]));
        // The kinds upstream adds carry no detail and take the same offset and length checks.
        const styled = [MessageEntityType.EMAIL, MessageEntityType.BOLD, MessageEntityType.ITALIC, MessageEntityType.CODE].map((type, index) => entity(type, index, 2));
        await send(alice, conversationId, textBody("a@b.c!", styled));
        await withoutEvents([alice, bob], async () => {
          for (const bad of [
            entity(MessageEntityType.HASHTAG, 2, 2),
            entity(MessageEntityType.HASHTAG, -1, 1),
            entity(MessageEntityType.HASHTAG, 0, 0),
            entity(MessageEntityType.HASHTAG, 0, -1),
            entity(MessageEntityType.HASHTAG, 4, 1),
            entity(MessageEntityType.UNSPECIFIED, 0, 1),
            entity(MessageEntityType.URL, 0, 1, "mention"),
            entity(MessageEntityType.BOLD, 0, 1, "url"),
            entity(MessageEntityType.CODE, 2, 2),
            entity(MessageEntityType.EMAIL, -1, 1),
          ]) {
            const detail = await expectError(send(alice, conversationId, textBody("😀😀 ", [bad])), Errors.invalidBody);
            expect(detail.metadata.entity).to.equal("0");
          }
          await expectError(send(alice, conversationId, textBody("😀😀 ", [entity(9 as MessageEntityType, 0, 1)])), Code.InvalidArgument);
          const markdown: BodyInit = { type: MessageType.MARKDOWN, content: { case: "markdown", value: { rawMarkdown: "**b**", entities: [entity(MessageEntityType.URL, 3, 3)] } } };
          await expectError(send(alice, conversationId, markdown), Errors.invalidBody);
        });
        const styledMessage = await messages(bob.accessToken).getMessage({ conversationId, messageId: 3n });
        const styledContent = styledMessage.message?.body?.content;
        expect(styledContent?.case === "text" && styledContent.value.entities.map((e) => [e.type, e.offset, e.length])).to.deep.equal([
          [MessageEntityType.EMAIL, 0, 2],
          [MessageEntityType.BOLD, 1, 2],
          [MessageEntityType.ITALIC, 2, 2],
          [MessageEntityType.CODE, 3, 2],
        ]);
        const { message } = await messages(bob.accessToken).getMessage({ conversationId, messageId: 2n });
        const content = message?.body?.content;
        expect(content?.case === "text" && content.value.entities.map((e) => [e.type, e.offset, e.length, e.data.case])).to.deep.equal([
          [MessageEntityType.MENTION, 3, 4, "mention"],
          [MessageEntityType.URL, 0, 2, undefined],
        ]);
      });

      it("replyToMessageId must name a message the sender can see in this conversation", async () => {
        const { alice, bob, conversationId } = await pair();
        const carol = await fresh();
        const elsewhere = await befriend(server, alice, carol, mode);
        for (let i = 1; i <= 5; i++) await send(alice, elsewhere, textBody(`elsewhere ${i}`));
        const first = await send(alice, conversationId, textBody("first"));
        const second = await send(bob, conversationId, textBody("second"));
        await messages(alice.accessToken).deleteMessages({ conversationId, messageIds: [second.messageId] });
        await withoutEvents([alice, bob], async () => {
          await expectError(send(alice, conversationId, textBody("to nothing"), 99n), Errors.replyTargetNotFound);
          await expectError(send(alice, conversationId, textBody("to another conversation's id"), 5n), Errors.replyTargetNotFound);
          await expectError(send(alice, conversationId, textBody("to a message I deleted"), second.messageId), Errors.replyTargetNotFound);
        });
        // Bob still sees his message; Alice's deletion does not affect his replies.
        const reply = await send(bob, conversationId, textBody("re"), second.messageId);
        expect((await messages(alice.accessToken).getMessage({ conversationId, messageId: reply.messageId })).message?.replyTo).to.deep.include({
          messageId: second.messageId,
          senderId: bob.userId,
          contentPreview: "second",
        });
        await messages(bob.accessToken).deleteHistory({ conversationId, upToMessageId: first.messageId });
        await expectError(send(bob, conversationId, textBody("to a cleared message"), first.messageId), Errors.replyTargetNotFound);
      });

      it("answers NOT_FOUND, PERMISSION_DENIED and FAILED_PRECONDITION in GROUP conversations", async () => {
        const [owner, outsider] = [await fresh(), await fresh()];
        const { groupId, conversationId, members } = await group(owner);
        await expectError(send(outsider, conversationId), Errors.notMember);
        await expectError(send(outsider, 2_000_000_000n), Errors.conversationNotFound);
        await groups(owner.accessToken).removeMember({ groupId, targetId: members[0].userId });
        await expectError(send(members[0], conversationId), Errors.notMember);
        await send(members[1], conversationId);
        await groups(owner.accessToken).dissolveGroup({ groupId });
        await expectError(send(members[1], conversationId), Errors.groupDissolved);
        await expectError(send(owner, conversationId), Errors.groupDissolved);
      });
    });

    describe("MessageService.EditMessage and RecallMessage", () => {
      it("EditMessage: every refusal leaves the message untouched", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        const card = await send(alice, conversationId, cardBody('{"v":1}', "v1"));
        const text = await send(alice, conversationId, textBody("draft"));
        const edit = (u: SignedIn, id: bigint, messageId: bigint, newBody?: BodyInit) => messages(u.accessToken).editMessage({ conversationId: id, messageId, newBody });
        await withoutEvents([alice, bob], async () => {
          await expectError(edit(alice, 0n, text.messageId, textBody("x")), Errors.invalidArgument);
          await expectError(edit(alice, conversationId, 0n, textBody("x")), Errors.invalidArgument);
          await expectError(edit(alice, conversationId, text.messageId), Errors.invalidArgument);
          await expectError(edit(alice, 2_000_000_000n, text.messageId, textBody("x")), Errors.conversationNotFound);
          await expectError(edit(outsider, conversationId, text.messageId, textBody("x")), Errors.notMember);
          await expectError(edit(alice, conversationId, text.messageId, textBody("x".repeat(10001))), Errors.invalidArgument);
          await expectError(edit(alice, conversationId, text.messageId, textBody("ab", [{ type: MessageEntityType.URL, offset: 1, length: 2 }])), Errors.invalidBody);
          await expectError(edit(alice, conversationId, card.messageId, cardBody("{broken")), Errors.invalidBody);
          await expectError(edit(alice, conversationId, card.messageId, textBody("x")), Errors.bodyTypeChanged);
          await expectError(edit(bob, conversationId, card.messageId, cardBody("{}")), Errors.notSender);
        });
        for (const [messageId, kind] of [[card.messageId, "card"], [text.messageId, "text"]] as const) {
          const { message } = await messages(bob.accessToken).getMessage({ conversationId, messageId });
          expect(message?.edited).to.equal(false);
          expect(message?.updatedAt).to.equal(undefined);
          expect(message?.body?.content.case).to.equal(kind);
        }
        const { message } = await messages(bob.accessToken).getMessage({ conversationId, messageId: card.messageId });
        expect(message?.body?.content.case === "card" && message.body.content.value.cardJson).to.equal('{"v":1}');
        // An agent may edit its own card (the answer to a card action, per the webhook rules).
        await edit(alice, conversationId, card.messageId, cardBody('{"v":2}'));
      });

      it("EditMessage refuses group system messages and streams", async () => {
        const owner = await fresh();
        const { conversationId } = await group(owner);
        await expectError(messages(owner.accessToken).editMessage({ conversationId, messageId: 1n, newBody: textBody("x") }), Errors.notSender);
        await expectError(messages(owner.accessToken).recallMessage({ conversationId, messageId: 1n }), Errors.notSender);
        const agent = await createAgent(server, owner, mode);
        const stream = await send(agent, agent.conversationId, streamStartBody());
        await expectError(
          messages(agent.token).editMessage({ conversationId: agent.conversationId, messageId: stream.messageId, newBody: { type: MessageType.STREAM, content: { case: "stream", value: {} } } }),
          Errors.invalidBody,
        );
      });

      it("RecallMessage: INVALID_ARGUMENT, NOT_FOUND and PERMISSION_DENIED leave the message as it was", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        const sent = await send(alice, conversationId, textBody("keep"));
        const recall = (u: SignedIn, id: bigint, messageId: bigint) => messages(u.accessToken).recallMessage({ conversationId: id, messageId });
        await withoutEvents([alice, bob], async () => {
          await expectError(recall(alice, 0n, sent.messageId), Errors.invalidArgument);
          await expectError(recall(alice, conversationId, 0n), Errors.invalidArgument);
          await expectError(recall(alice, 2_000_000_000n, sent.messageId), Errors.conversationNotFound);
          await expectError(recall(outsider, conversationId, sent.messageId), Errors.notMember);
          await expectError(recall(alice, conversationId, 99n), Errors.messageNotFound);
          await expectError(recall(bob, conversationId, sent.messageId), Errors.notSender);
        });
        expect(textOf((await messages(bob.accessToken).getMessage({ conversationId, messageId: sent.messageId })).message)).to.equal("keep");
      });
    });

    describe("MessageService.DeleteMessages and DeleteHistory", () => {
      it("DeleteMessages: up to 200 ids; NOT_FOUND and PERMISSION_DENIED; nothing deleted, no event", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        for (let i = 0; i < 3; i++) await send(bob, conversationId, textBody(`m${i}`));
        const del = (u: SignedIn, id: bigint, messageIds: bigint[]) => messages(u.accessToken).deleteMessages({ conversationId: id, messageIds });
        await withoutEvents([alice, bob, outsider], async () => {
          await expectError(del(alice, 0n, [1n]), Errors.invalidArgument);
          await expectError(del(alice, 2_000_000_000n, [1n]), Errors.conversationNotFound);
          await expectError(del(outsider, conversationId, [1n]), Errors.notMember);
          await expectError(del(alice, conversationId, Array.from({ length: 201 }, (_, i) => BigInt(i + 1))), Errors.invalidArgument);
          expect((await del(alice, conversationId, [])).deletedCount).to.equal(0);
          expect((await del(alice, conversationId, [0n, -1n, 50n])).deletedCount).to.equal(0);
        });
        expect((await messages(alice.accessToken).getMessageHistory({ conversationId })).messages).to.have.length(3);
        const exactly200 = Array.from({ length: 200 }, (_, i) => BigInt(i + 1));
        expect((await del(alice, conversationId, exactly200)).deletedCount).to.equal(3);
        expect((await messages(alice.accessToken).getMessageHistory({ conversationId })).messages).to.deep.equal([]);
        expect((await messages(bob.accessToken).getMessageHistory({ conversationId })).messages).to.have.length(3);
      });

      it("DeleteHistory: NOT_FOUND and PERMISSION_DENIED; a position beyond the last message never hides later ones", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        for (let i = 0; i < 3; i++) await send(bob, conversationId, textBody(`m${i}`));
        await withoutEvents([alice, bob, outsider], async () => {
          await expectError(messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 0n }), Errors.invalidArgument);
          await expectError(messages(alice.accessToken).deleteHistory({ conversationId: 2_000_000_000n, upToMessageId: 1n }), Errors.conversationNotFound);
          await expectError(messages(outsider.accessToken).deleteHistory({ conversationId, upToMessageId: 1n }), Errors.notMember);
        });
        await messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 1000n });
        expect((await messages(alice.accessToken).getMessageHistory({ conversationId })).messages).to.deep.equal([]);
        const later = await send(bob, conversationId, textBody("later"));
        expect(later.messageId).to.equal(4n);
        const visible = await messages(alice.accessToken).getMessageHistory({ conversationId });
        expect(visible.messages.map(textOf)).to.deep.equal(["later"]);
        expect(textOf((await messages(alice.accessToken).getMessage({ conversationId, messageId: 4n })).message)).to.equal("later");
        // Deleted messages are not unread: unread = lastMessageId - lastReadMessageId is 1.
        const info = (await conversations(alice.accessToken).getConversation({ conversationId })).conversation!;
        expect(info.lastMessageId - info.lastReadMessageId).to.equal(1n);
      });
    });

    describe("MessageService.GetMessage and GetMessageHistory", () => {
      it("GetMessage: INVALID_ARGUMENT, NOT_FOUND (conversation, message, deleted or cleared for the caller), PERMISSION_DENIED", async () => {
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        for (let i = 0; i < 3; i++) await send(bob, conversationId, textBody(`m${i}`));
        const get = (u: SignedIn, id: bigint, messageId: bigint) => messages(u.accessToken).getMessage({ conversationId: id, messageId });
        await expectError(get(alice, 0n, 1n), Errors.invalidArgument);
        await expectError(get(alice, conversationId, 0n), Errors.invalidArgument);
        await expectError(get(alice, 2_000_000_000n, 1n), Errors.conversationNotFound);
        await expectError(get(outsider, conversationId, 1n), Errors.notMember);
        await expectError(get(alice, conversationId, 4n), Errors.messageNotFound);
        await messages(alice.accessToken).deleteMessages({ conversationId, messageIds: [3n] });
        await messages(alice.accessToken).deleteHistory({ conversationId, upToMessageId: 1n });
        await expectError(get(alice, conversationId, 1n), Errors.messageNotFound);
        await expectError(get(alice, conversationId, 3n), Errors.messageNotFound);
        expect(textOf((await get(alice, conversationId, 2n)).message)).to.equal("m1");
        for (const id of [1n, 2n, 3n]) expect((await get(bob, conversationId, id)).message?.messageId).to.equal(id);
      });

      it("GetMessageHistory: NOT_FOUND, PERMISSION_DENIED, limit 0..200 with 0 selecting 50", async function () {
        this.timeout(60_000);
        const { alice, bob, conversationId } = await pair();
        const outsider = await fresh();
        for (let i = 0; i < 51; i++) await send(i % 2 ? alice : bob, conversationId, textBody(`m${i}`));
        await expectError(messages(alice.accessToken).getMessageHistory({ conversationId: 0n }), Errors.invalidArgument);
        await expectError(messages(alice.accessToken).getMessageHistory({ conversationId: 2_000_000_000n }), Errors.conversationNotFound);
        await expectError(messages(outsider.accessToken).getMessageHistory({ conversationId }), Errors.notMember);
        await expectError(messages(alice.accessToken).getMessageHistory({ conversationId, limit: -1 }), Errors.invalidArgument);
        await expectError(messages(alice.accessToken).getMessageHistory({ conversationId, limit: 201 }), Errors.invalidArgument);
        const byDefault = await messages(alice.accessToken).getMessageHistory({ conversationId });
        expect(byDefault.messages.map((m) => m.messageId)).to.deep.equal(Array.from({ length: 50 }, (_, i) => BigInt(51 - i)));
        expect(byDefault.hasMore).to.equal(true);
        const all = await messages(alice.accessToken).getMessageHistory({ conversationId, limit: 200 });
        expect(all.messages).to.have.length(51);
        expect(all.hasMore).to.equal(false);
        const forward = await messages(alice.accessToken).getMessageHistory({ conversationId, afterMessageId: 0n, limit: 200 });
        expect(forward.messages.map((m) => m.messageId)).to.deep.equal(Array.from({ length: 51 }, (_, i) => BigInt(i + 1)));
      });
    });

    describe("MessageService card actions", () => {
      let owner: SignedIn;
      let agent: TestAgent;
      let cardId: bigint;
      before(async () => {
        owner = await fresh();
        agent = await createAgent(server, owner, mode);
        cardId = (await send(agent, agent.conversationId, cardBody('{"type":"AdaptiveCard"}', "card"))).messageId;
      });
      const submit = (u: SignedIn, request: { conversationId?: bigint; messageId?: bigint; actionData?: string; verb?: string } = {}) =>
        messages(u.accessToken).submitCardAction({ conversationId: agent.conversationId, messageId: cardId, actionData: "{}", ...request });

      it("SubmitCardAction: bounds on actionData (1..4096, JSON) and verb (0..128)", async () => {
        await submit(owner, { actionData: JSON.stringify({ v: "x".repeat(4096 - 8) }), verb: "v".repeat(128) });
        await expectError(submit(owner, { actionData: "" }), Errors.invalidArgument);
        await expectError(submit(owner, { actionData: JSON.stringify({ v: "x".repeat(4096 - 7) }) }), Errors.invalidArgument);
        await expectError(submit(owner, { verb: "v".repeat(129) }), Errors.invalidArgument);
        const detail = await expectError(submit(owner, { actionData: "{not json" }), Errors.invalidArgument);
        expect(detail.metadata.field).to.equal("action_data");
        await expectError(submit(owner, { conversationId: 0n }), Errors.invalidArgument);
        await expectError(submit(owner, { messageId: 0n }), Errors.invalidArgument);
      });

      it("SubmitCardAction: NOT_FOUND for the conversation or message, PERMISSION_DENIED for non-members, FAILED_PRECONDITION for other messages", async () => {
        const outsider = await fresh();
        await expectError(submit(outsider), Errors.notMember);
        await expectError(submit(owner, { conversationId: 2_000_000_000n }), Errors.conversationNotFound);
        await expectError(submit(owner, { messageId: 99_999n }), Errors.messageNotFound);
        const plain = await send(agent, agent.conversationId, textBody("plain"));
        await expectError(submit(owner, { messageId: plain.messageId }), Errors.notACard);
        const recalled = await send(agent, agent.conversationId, cardBody("{}"));
        await messages(agent.token).recallMessage({ conversationId: agent.conversationId, messageId: recalled.messageId });
        await expectError(submit(owner, { messageId: recalled.messageId }), Errors.notACard);
        const hidden = await send(agent, agent.conversationId, cardBody("{}"));
        await messages(owner.accessToken).deleteMessages({ conversationId: agent.conversationId, messageIds: [hidden.messageId] });
        await expectError(submit(owner, { messageId: hidden.messageId }), Errors.messageNotFound);
      });

      it("AnswerCardAction: NOT_FOUND unless the action is live, this agent's, and on this message; bounds on text", async () => {
        const { actionId } = await submit(owner);
        const answer = (token: string, request: { conversationId?: bigint; messageId?: bigint; actionId?: string; text?: string } = {}) =>
          messages(token).answerCardAction({ conversationId: agent.conversationId, messageId: cardId, actionId, showAlert: false, ...request });
        const otherAgent = await createAgent(server, owner, mode);
        await expectError(answer(otherAgent.token), Errors.cardActionNotFound);
        await expectError(answer(agent.token, { actionId: "not-an-action" }), Errors.cardActionNotFound);
        await expectError(answer(agent.token, { messageId: cardId + 1n }), Errors.cardActionNotFound);
        await expectError(answer(agent.token, { conversationId: otherAgent.conversationId }), Errors.cardActionNotFound);
        await expectError(answer(agent.token, { actionId: "" }), Errors.invalidArgument);
        await expectError(answer(agent.token, { text: "t".repeat(201) }), Errors.invalidArgument);
        await expectError(answer(owner.accessToken), Errors.agentOnly);
        await answer(agent.token, { text: "t".repeat(200) });
      });
    });

    describe("MessageService streams", () => {
      it("PushStreamDelta, EndStream and ErrorStream: bounds, NOT_FOUND for what is not the caller's stream", async () => {
        const owner = await fresh();
        const agent = await createAgent(server, owner, mode);
        const otherAgent = await createAgent(server, owner, mode);
        const conversationId = agent.conversationId;
        const { messageId } = await send(agent, conversationId, streamStartBody());
        const m = messages(agent.token);
        await expectError(m.pushStreamDelta({ conversationId, messageId, seq: 0, delta: "x" }), Errors.invalidArgument);
        await expectError(m.pushStreamDelta({ conversationId, messageId, seq: -1, delta: "x" }), Errors.invalidArgument);
        await expectError(m.pushStreamDelta({ conversationId, messageId, seq: 1, delta: "" }), Errors.invalidArgument);
        await expectError(m.errorStream({ conversationId, messageId, errorMessage: "" }), Errors.invalidArgument);
        await expectError(m.errorStream({ conversationId, messageId, errorMessage: "e".repeat(1001) }), Errors.invalidArgument);
        await expectError(m.pushStreamDelta({ conversationId: 2_000_000_000n, messageId, seq: 1, delta: "x" }), Errors.conversationNotFound);
        // Another agent outside the conversation; then, in a group with both, a stream that is not its own.
        await expectError(messages(otherAgent.token).pushStreamDelta({ conversationId, messageId, seq: 1, delta: "x" }), Errors.notMember);
        const both = (await groups(owner.accessToken).createGroup({ name: "agents", memberIds: [agent.userId, otherAgent.userId] })).group!;
        const theirs = await send(otherAgent, BigInt(both.groupId), streamStartBody());
        await expectError(m.pushStreamDelta({ conversationId: BigInt(both.groupId), messageId: theirs.messageId, seq: 1, delta: "x" }), Errors.streamNotFound);
        await expectError(m.endStream({ conversationId: BigInt(both.groupId), messageId: theirs.messageId }), Errors.streamNotFound);
        await expectError(m.errorStream({ conversationId: BigInt(both.groupId), messageId: 1n, errorMessage: "x" }), Errors.streamNotFound);
        await expectError(messages(owner.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() }), Errors.invalidBody);
        await expectError(
          m.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: { type: MessageType.STREAM, content: { case: "stream", value: { phase: 3 } } } }),
          Errors.invalidBody,
        );
        // An EndStream with entities outside the text is refused and the stream stays open.
        await m.pushStreamDelta({ conversationId, messageId, seq: 1, delta: "abc" });
        await expectError(m.endStream({ conversationId, messageId, accumulatedText: "abc", entities: [{ type: MessageEntityType.URL, offset: 2, length: 5 }] }), Errors.invalidBody);
        await m.pushStreamDelta({ conversationId, messageId, seq: 2, delta: "def" });
        await m.errorStream({ conversationId, messageId, errorMessage: "e".repeat(1000) });
        const { message } = await messages(owner.accessToken).getMessage({ conversationId, messageId });
        const stream = message?.body?.content.case === "stream" ? message.body.content.value : undefined;
        expect(stream).to.deep.include({ accumulatedText: "abcdef", errorMessage: "e".repeat(1000) });
      });
    });
  });
}
