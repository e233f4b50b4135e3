import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { ContactService, SearchAccountType } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { ConversationType } from "../shared/gen/shared/v1/conversation_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import type { SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { AgentStatus, AgentVisibility } from "../ports/store/store.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { befriend, createAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

for (const mode of wireModes) {
  describe(`ContactService (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const contacts = (u: SignedIn) => client(server, ContactService, mode, u.accessToken);
    const sync = (u: SignedIn) => client(server, SyncService, mode, u.accessToken);
    const latestSn = async (u: SignedIn) => (await sync(u).getCurrentState({})).state!.latestSn;
    /** The events on a user's stream after `base`, in order. */
    const eventsSince = async (u: SignedIn, base: number): Promise<SnUpdate["update"][]> => (await sync(u).getDifference({ sn: base })).updates.map((x) => x.update);
    const fresh = () => signInWithCode(server, mode);

    describe("ContactService.SendFriendRequest", () => {
      it("creates a pending request: FriendRequestReceivedEvent to the target, FriendRequestSentEvent to the sender", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        const ws = await GatewayClient.connect(server.url, mode);
        try {
          await ws.authenticate(bob.accessToken);
          const { requestId } = await contacts(alice).sendFriendRequest({ targetUserId: bob.userId, message: "let's talk" });
          expect(requestId > 0n).to.equal(true);
          const [received] = await eventsSince(bob, bobBase);
          expect(received.case).to.equal("friendRequestReceived");
          if (received.case === "friendRequestReceived") {
            expect(received.value.request).to.deep.include({ requestId, fromUserId: alice.userId, toUserId: bob.userId, message: "let's talk" });
          }
          const [sent] = await eventsSince(alice, aliceBase);
          expect(sent.case === "friendRequestSent" && sent.value).to.deep.include({ requestId, targetUserId: bob.userId });
          const live = await ws.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.update.case === "friendRequestReceived");
          expect(live.payload.case === "update" && live.payload.value.users.map((u) => u.userId)).to.deep.equal([alice.userId]);
        } finally {
          ws.close();
        }
      });

      it("answers ALREADY_EXISTS when a request is pending either way", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: bob.userId }), Errors.friendRequestPending);
        await expectError(contacts(bob).sendFriendRequest({ targetUserId: alice.userId }), Errors.friendRequestPending);
      });

      it("answers NOT_FOUND, FAILED_PRECONDITION for contacts, PERMISSION_DENIED after a block, INVALID_ARGUMENT for oneself or a long greeting", async () => {
        const [alice, bob, carol] = [await fresh(), await fresh(), await fresh()];
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: 99_999_999 }), Errors.userNotFound);
        await befriend(server, alice, bob, mode);
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: bob.userId }), Errors.alreadyContacts);
        await contacts(carol).blockUser({ targetUserId: alice.userId });
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: carol.userId }), Errors.blocked);
        await expectError(contacts(carol).sendFriendRequest({ targetUserId: alice.userId }), Errors.blocked);
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: alice.userId }), Errors.cannotTargetSelf);
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: carol.userId, message: "m".repeat(201) }), Errors.invalidArgument);
        await expectError(contacts(alice).sendFriendRequest({ targetUserId: 0 }), Errors.invalidArgument);
      });
    });

    describe("ContactService.AcceptFriendRequest and RejectFriendRequest", () => {
      it("accept makes mutual contacts, creates the PRIVATE conversation, and tells both", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const { requestId } = await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        await contacts(bob).acceptFriendRequest({ requestId });
        for (const [user, base] of [[alice, aliceBase], [bob, bobBase]] as const) {
          const [event] = await eventsSince(user, base);
          expect(event.case === "friendRequestAccepted" && event.value.request?.requestId).to.equal(requestId);
        }
        expect((await contacts(alice).listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([bob.userId]);
        expect((await contacts(bob).listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([alice.userId]);
        const conversationId = privateConversationId(alice.userId, bob.userId);
        for (const [user, peer] of [[alice, bob], [bob, alice]] as const) {
          const { conversation } = await client(server, ConversationService, mode, user.accessToken).getConversation({ conversationId });
          expect(conversation).to.deep.include({ type: ConversationType.PRIVATE, peerId: peer.userId });
        }
        expect((await contacts(bob).listPendingRequests({})).items).to.deep.equal([]);
        expect((await client(server, UserService, mode, alice.accessToken).resolveUsername({ username: `u_${bob.userId}` })).isContact).to.equal(true);
      });

      it("reject tells both parties, and an answered request answers FAILED_PRECONDITION", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const { requestId } = await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        await contacts(bob).rejectFriendRequest({ requestId });
        for (const [user, base] of [[alice, aliceBase], [bob, bobBase]] as const) {
          const [event] = await eventsSince(user, base);
          expect(event.case === "friendRequestRejected" && event.value).to.deep.include({ requestId, rejectorId: bob.userId });
        }
        await expectError(contacts(bob).rejectFriendRequest({ requestId }), Errors.friendRequestHandled);
        await expectError(contacts(bob).acceptFriendRequest({ requestId }), Errors.friendRequestHandled);
        expect((await contacts(alice).listContacts({})).contacts).to.deep.equal([]);
        // After a rejection a new request may be sent.
        await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
      });

      it("answers NOT_FOUND for an unknown request or one addressed to someone else", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const { requestId } = await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
        await expectError(contacts(alice).acceptFriendRequest({ requestId }), Errors.friendRequestNotFound);
        await expectError(contacts(bob).acceptFriendRequest({ requestId: 987654321n }), Errors.friendRequestNotFound);
        await expectError(contacts(bob).rejectFriendRequest({ requestId: 0n }), Errors.invalidArgument);
      });

      it("a block cancels the pending request: it disappears and answers NOT_FOUND", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        const { requestId } = await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
        await contacts(bob).blockUser({ targetUserId: alice.userId });
        expect((await contacts(bob).listPendingRequests({})).items).to.deep.equal([]);
        await expectError(contacts(bob).acceptFriendRequest({ requestId }), Errors.friendRequestNotFound);
      });
    });

    describe("ContactService.ListPendingRequests", () => {
      it("lists received pending requests newest first with the senders, paged by beforeTime", async () => {
        const target = await fresh();
        const senders: SignedIn[] = [];
        for (let i = 0; i < 3; i++) {
          const sender = await fresh();
          senders.push(sender);
          await contacts(sender).sendFriendRequest({ targetUserId: target.userId, message: `m${i}` });
          server.clock.advance(5);
        }
        const first = await contacts(target).listPendingRequests({ limit: 2 });
        expect(first.items.map((i) => i.message)).to.deep.equal(["m2", "m1"]);
        expect(first.hasMore).to.equal(true);
        expect(first.users.map((u) => u.userId).sort()).to.deep.equal([senders[2].userId, senders[1].userId].sort());
        const second = await contacts(target).listPendingRequests({ beforeTime: first.items[1].createdAt, limit: 2 });
        expect(second.items.map((i) => i.message)).to.deep.equal(["m0"]);
        expect(second.hasMore).to.equal(false);
        expect((await contacts(senders[0]).listPendingRequests({})).items).to.deep.equal([]);
        await expectError(contacts(target).listPendingRequests({ limit: 101 }), Errors.invalidArgument);
      });
    });

    describe("ContactService.ListContacts, DeleteContact, UpdateContactAlias", () => {
      it("lists contacts by ascending id with afterId paging and the total", async () => {
        const owner = await fresh();
        const friends = [await fresh(), await fresh(), await fresh()];
        for (const friend of friends) await befriend(server, owner, friend, mode);
        const page = await contacts(owner).listContacts({ limit: 2 });
        const ids = friends.map((f) => f.userId).sort((a, b) => a - b);
        expect(page.contacts.map((c) => c.user?.userId)).to.deep.equal(ids.slice(0, 2));
        expect(page).to.deep.include({ totalContacts: 3, hasMore: true });
        const next = await contacts(owner).listContacts({ afterId: ids[1], limit: 2 });
        expect(next.contacts.map((c) => c.user?.userId)).to.deep.equal([ids[2]]);
        expect(next.hasMore).to.equal(false);
        await expectError(contacts(owner).listContacts({ limit: 201 }), Errors.invalidArgument);
      });

      it("DeleteContact is one-sided, tells only the caller, and re-friending restores it", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        await befriend(server, alice, bob, mode);
        const bobBase = await latestSn(bob);
        const aliceBase = await latestSn(alice);
        await contacts(alice).deleteContact({ contactUserId: bob.userId });
        expect((await contacts(alice).listContacts({})).contacts).to.deep.equal([]);
        expect((await contacts(bob).listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([alice.userId]);
        const [event] = await eventsSince(alice, aliceBase);
        expect(event.case === "contactDeleted" && event.value.peerUserId).to.equal(bob.userId);
        expect(await latestSn(bob)).to.equal(bobBase);
        await expectError(contacts(alice).deleteContact({ contactUserId: bob.userId }), Errors.contactNotFound);
        await befriend(server, bob, alice, mode);
        expect((await contacts(alice).listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([bob.userId]);
      });

      it("UpdateContactAlias sets and clears the alias with ContactAliasUpdatedEvent to the caller", async () => {
        const [alice, bob, stranger] = [await fresh(), await fresh(), await fresh()];
        await befriend(server, alice, bob, mode);
        const base = await latestSn(alice);
        await contacts(alice).updateContactAlias({ contactUserId: bob.userId, alias: "Bobby" });
        expect((await contacts(alice).listContacts({})).contacts[0].alias).to.equal("Bobby");
        expect((await contacts(bob).listContacts({})).contacts[0].alias).to.equal(undefined);
        await contacts(alice).updateContactAlias({ contactUserId: bob.userId });
        expect((await contacts(alice).listContacts({})).contacts[0].alias).to.equal(undefined);
        const events = await eventsSince(alice, base);
        expect(events.map((e) => e.case === "contactAliasUpdated" && e.value.newAlias)).to.deep.equal(["Bobby", ""]);
        await expectError(contacts(alice).updateContactAlias({ contactUserId: stranger.userId, alias: "x" }), Errors.contactNotFound);
        await expectError(contacts(alice).updateContactAlias({ contactUserId: bob.userId, alias: "a".repeat(65) }), Errors.invalidArgument);
      });
    });

    describe("ContactService.BlockUser, UnblockUser, ListBlocked", () => {
      it("block removes the contact on the blocker's side with both events, only to the blocker", async () => {
        const [alice, bob] = [await fresh(), await fresh()];
        await befriend(server, alice, bob, mode);
        const [aliceBase, bobBase] = [await latestSn(alice), await latestSn(bob)];
        await contacts(alice).blockUser({ targetUserId: bob.userId });
        const events = await eventsSince(alice, aliceBase);
        expect(events.map((e) => e.case)).to.deep.equal(["contactDeleted", "userBlockToggled"]);
        expect(events[1].case === "userBlockToggled" && events[1].value).to.deep.include({ targetUserId: bob.userId, isBlocked: true });
        expect(await latestSn(bob)).to.equal(bobBase);
        expect((await contacts(alice).listContacts({})).contacts).to.deep.equal([]);
        await expectError(contacts(alice).blockUser({ targetUserId: bob.userId }), Errors.alreadyBlocked);
        await expectError(contacts(alice).blockUser({ targetUserId: 99_999_999 }), Errors.userNotFound);
        await expectError(contacts(alice).blockUser({ targetUserId: alice.userId }), Errors.cannotBlockSelf);
      });

      it("unblock does not restore the contact; ListBlocked is newest first", async () => {
        const [alice, bob, carol] = [await fresh(), await fresh(), await fresh()];
        await befriend(server, alice, bob, mode);
        await contacts(alice).blockUser({ targetUserId: bob.userId });
        server.clock.advance(5);
        await contacts(alice).blockUser({ targetUserId: carol.userId });
        const listed = await contacts(alice).listBlocked({});
        expect(listed.blocked.map((b) => b.user?.userId)).to.deep.equal([carol.userId, bob.userId]);
        const base = await latestSn(alice);
        await contacts(alice).unblockUser({ targetUserId: bob.userId });
        const [event] = await eventsSince(alice, base);
        expect(event.case === "userBlockToggled" && event.value).to.deep.include({ targetUserId: bob.userId, isBlocked: false });
        expect((await contacts(alice).listContacts({})).contacts).to.deep.equal([]);
        await expectError(contacts(alice).unblockUser({ targetUserId: bob.userId }), Errors.notBlocked);
        await contacts(alice).sendFriendRequest({ targetUserId: bob.userId });
      });
    });

    describe("ContactService.SearchUsers", () => {
      it("finds one human by exact email, phone or username, excluding the caller and blocked users", async () => {
        const [alice, bob, carol] = [await fresh(), await fresh(), await fresh()];
        const byEmail = await contacts(alice).searchUsers({ query: bob.email.toUpperCase() });
        expect(byEmail.items.map((u) => u.userId)).to.deep.equal([bob.userId]);
        expect((await contacts(alice).searchUsers({ query: `@u_${bob.userId}` })).items.map((u) => u.userId)).to.deep.equal([bob.userId]);
        expect((await contacts(alice).searchUsers({ query: bob.email.slice(0, 8) })).items).to.deep.equal([]);
        expect((await contacts(alice).searchUsers({ query: alice.email })).items).to.deep.equal([]);
        await contacts(carol).blockUser({ targetUserId: alice.userId });
        expect((await contacts(alice).searchUsers({ query: carol.email })).items).to.deep.equal([]);
        expect((await contacts(alice).searchUsers({ query: bob.email, accountType: SearchAccountType.AGENT })).items).to.deep.equal([]);
        await expectError(contacts(alice).searchUsers({ query: "" }), Errors.invalidArgument);
      });
    });

    describe("ContactService.SearchUsers (agents)", () => {
      it("matches public active agents fuzzily on name, username and description, at most 10", async () => {
        const [owner, searcher] = [await fresh(), await fresh()];
        const agents = [];
        for (let i = 0; i < 12; i++) agents.push(await createAgent(server, owner, mode));
        const store = await openServerStore(server);
        try {
          for (const agent of agents.slice(0, 11)) await store.agents.updateAgent(agent.userId, { visibility: AgentVisibility.public });
          await store.agents.updateAgent(agents[10].userId, { status: AgentStatus.deleted });
        } finally {
          await store.close();
        }
        const byName = await contacts(searcher).searchUsers({ query: "BOT ", accountType: SearchAccountType.AGENT });
        expect(byName.items.length).to.equal(10);
        expect(byName.items.every((u) => u.accountType === 2)).to.equal(true);
        const ids = new Set(byName.items.map((u) => u.userId));
        expect(ids.has(agents[11].userId), "private agents are not listed").to.equal(false);
        expect(ids.has(agents[10].userId), "deleted agents are not listed").to.equal(false);
        const byDescription = await contacts(searcher).searchUsers({ query: "HELPS" });
        expect(byDescription.items.length).to.equal(10);
        const byUsername = await contacts(searcher).searchUsers({ query: `bot_${process.pid}_` });
        expect(byUsername.items.length).to.be.greaterThan(0);
        expect((await contacts(searcher).searchUsers({ query: "helps", accountType: SearchAccountType.USER })).items).to.deep.equal([]);
      });
    });

    describe("ContactService.AddContact", () => {
      it("adds the creator's private agent, refuses regular users, others' private agents, and inactive agents (7003)", async () => {
        const [owner, other] = [await fresh(), await fresh()];
        const agent = await createAgent(server, owner, mode);
        // CreateAgent already made them contacts.
        await expectError(contacts(owner).addContact({ targetUserId: agent.userId }), Errors.contactAlreadyExists);
        await contacts(owner).deleteContact({ contactUserId: agent.userId });
        const base = await latestSn(owner);
        await contacts(owner).addContact({ targetUserId: agent.userId });
        const [event] = await eventsSince(owner, base);
        expect(event.case === "contactAdded" && event.value.peerUserId).to.equal(agent.userId);
        await expectError(contacts(other).addContact({ targetUserId: agent.userId }), Errors.privateAgent);
        const publicAgent = await createAgent(server, owner, mode);
        const publishing = await openServerStore(server);
        await publishing.agents.updateAgent(publicAgent.userId, { visibility: AgentVisibility.public }).finally(() => publishing.close());
        await contacts(other).addContact({ targetUserId: publicAgent.userId });
        expect((await contacts(other).listContacts({})).contacts.map((c) => c.user?.userId)).to.include(publicAgent.userId);
        await expectError(contacts(other).addContact({ targetUserId: owner.userId }), Errors.targetIsRegularUser);
        await expectError(contacts(other).addContact({ targetUserId: 99_999_999 }), Errors.userNotFound);
        const store = await openServerStore(server);
        try {
          await store.agents.updateAgent(agent.userId, { status: AgentStatus.deleted });
        } finally {
          await store.close();
        }
        await contacts(owner).deleteContact({ contactUserId: agent.userId });
        const detail = await expectError(contacts(owner).addContact({ targetUserId: agent.userId }), Errors.agentNotActive);
        expect(detail.errorCode).to.equal(7003);
        await expectError(client(server, AgentService, mode, agent.token).getAgentInfo({ agentUserId: agent.userId }), Errors.agentNotActive);
      });
    });

    it("every RPC answers UNAUTHENTICATED without a token", async () => {
      const anonymous = client(server, ContactService, mode);
      await expectError(anonymous.listContacts({}), Errors.unauthenticated);
      await expectError(anonymous.sendFriendRequest({ targetUserId: 1 }), Errors.unauthenticated);
      await expectError(anonymous.listBlocked({}), Errors.unauthenticated);
    });
  });
}
