// The conversation actor checks every message and delta against state it keeps in memory
// (participants, group status, a pair's contacts and blocks, accounts). Each change that affects
// those checks must be seen by the very next call after the change answered: every case here warms
// the actor's state first, then changes it, then calls again at once.
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedEnvelopes, streamStartBody, textBody, updateOf } from "./support/messaging.js";
import { befriend, createAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

for (const mode of wireModes) {
  describe(`conversation actor state: changes seen by the very next call (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const messages = (token: string) => client(server, MessageService, mode, token);
    const contacts = (u: SignedIn) => client(server, ContactService, mode, u.accessToken);
    const groups = (u: SignedIn) => client(server, GroupService, mode, u.accessToken);
    const send = (token: string, conversationId: bigint, text = "hi", clientMessageId = nextClientMessageId()) =>
      messages(token).sendMessage({ conversationId, clientMessageId, body: textBody(text) });

    async function pair() {
      const alice = await signInWithCode(server, mode);
      const bob = await signInWithCode(server, mode);
      const conversationId = await befriend(server, alice, bob, mode);
      // Warm: both senders and the pair's checks are in the actor's memory from here on.
      await send(alice.accessToken, conversationId);
      await send(bob.accessToken, conversationId);
      return { alice, bob, conversationId };
    }

    async function group(owner: SignedIn, members: SignedIn[]) {
      const created = await groups(owner).createGroup({ name: "g", memberIds: members.map((m) => m.userId) });
      const conversationId = BigInt(created.group!.groupId);
      for (const member of [owner, ...members]) await send(member.accessToken, conversationId);
      return { groupId: created.group!.groupId, conversationId };
    }

    it("block, unblock, re-friending: each seen by the next SendMessage of either side", async () => {
      const { alice, bob, conversationId } = await pair();
      await contacts(bob).blockUser({ targetUserId: alice.userId });
      await expectError(send(alice.accessToken, conversationId), Errors.blocked);
      await expectError(send(bob.accessToken, conversationId), Errors.blocked);
      await contacts(bob).unblockUser({ targetUserId: alice.userId });
      // The block took bob's contact side with it; unblocking does not restore it.
      await expectError(send(alice.accessToken, conversationId), Errors.contactRemoved);
      await befriend(server, alice, bob, mode);
      expect((await send(alice.accessToken, conversationId)).messageId).to.equal(3n);
    });

    it("DeleteContact and adding back: seen by the next SendMessage; a retry of an accepted message still answers its id", async () => {
      const { alice, bob, conversationId } = await pair();
      const accepted = await send(alice.accessToken, conversationId, "before", 777_001n);
      await contacts(alice).deleteContact({ contactUserId: bob.userId });
      await expectError(send(bob.accessToken, conversationId), Errors.contactRemoved);
      // Blocked or not a contact any more, a client's retry learns its message was taken.
      expect(await send(alice.accessToken, conversationId, "before", 777_001n)).to.deep.include({ messageId: accepted.messageId, createdAt: accepted.createdAt });
      await contacts(bob).blockUser({ targetUserId: alice.userId });
      expect((await send(alice.accessToken, conversationId, "before", 777_001n)).messageId).to.equal(accepted.messageId);
      await contacts(bob).unblockUser({ targetUserId: alice.userId });
      await befriend(server, bob, alice, mode);
      expect((await send(bob.accessToken, conversationId)).messageId).to.equal(accepted.messageId + 1n);
    });

    it("group member removed, invited back, leaving, dissolved: seen by the next SendMessage and GetMessage", async () => {
      const [owner, a, b] = [await signInWithCode(server, mode), await signInWithCode(server, mode), await signInWithCode(server, mode)];
      const { groupId, conversationId } = await group(owner, [a, b]);
      const first = await send(owner.accessToken, conversationId, "first");
      await messages(a.accessToken).getMessage({ conversationId, messageId: first.messageId });

      await groups(owner).removeMember({ groupId, targetId: a.userId });
      await expectError(send(a.accessToken, conversationId), Errors.notMember);
      await expectError(messages(a.accessToken).getMessage({ conversationId, messageId: first.messageId }), Errors.notMember);

      await groups(owner).inviteMembers({ groupId, memberIds: [a.userId] });
      await send(a.accessToken, conversationId, "back");
      await messages(a.accessToken).getMessage({ conversationId, messageId: first.messageId });

      await groups(b).leaveGroup({ groupId });
      await expectError(send(b.accessToken, conversationId), Errors.notMember);

      await groups(owner).dissolveGroup({ groupId });
      await expectError(send(owner.accessToken, conversationId), Errors.groupDissolved);
      await expectError(messages(a.accessToken).getMessage({ conversationId, messageId: first.messageId }), Errors.groupDissolved);
    });

    it("an agent removed from a group mid-stream: its next PushStreamDelta is refused", async () => {
      const [owner, a, b] = [await signInWithCode(server, mode), await signInWithCode(server, mode), await signInWithCode(server, mode)];
      const agent = await createAgent(server, owner, mode);
      const { groupId, conversationId } = await group(owner, [a, b]);
      await groups(owner).inviteMembers({ groupId, memberIds: [agent.userId] });
      const { messageId } = await messages(agent.token).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
      await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 1, delta: "one" });
      await groups(owner).removeMember({ groupId, targetId: agent.userId });
      await expectError(messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 2, delta: "two" }), Errors.notMember);
      await expectError(messages(agent.token).getMessage({ conversationId, messageId }), Errors.notMember);
    });

    it("an agent deleted: the next SendMessage to it answers that the conversation is read-only", async () => {
      const owner = await signInWithCode(server, mode);
      const agent = await createAgent(server, owner, mode);
      await send(owner.accessToken, agent.conversationId);
      await send(agent.token, agent.conversationId);
      await client(server, AgentService, mode, owner.accessToken).deleteMyAgent({ agentUserId: agent.userId });
      await expectError(send(owner.accessToken, agent.conversationId), Errors.conversationReadOnly);
    });

    it("a new nickname travels with the sender's very next message", async () => {
      const { alice, bob, conversationId } = await pair();
      const socket = await GatewayClient.connect(server.url, mode);
      try {
        await socket.authenticate(bob.accessToken);
        const senderNickname = (messageId: bigint) => {
          const frame = socket.frames.find((f) => {
            const update = updateOf(f);
            return update?.update.case === "snUpdate" && update.update.value.update.case === "messageEnvelope" && update.update.value.update.value.messageId === messageId;
          });
          return frame && updateOf(frame)?.users.find((u) => u.userId === alice.userId)?.nickname;
        };
        const before = await send(alice.accessToken, conversationId);
        await eventually(() => senderNickname(before.messageId) !== undefined, "the first message's push");
        await client(server, UserService, mode, alice.accessToken).updateProfile({ nickname: "Alice Renamed" });
        const after = await send(alice.accessToken, conversationId);
        await eventually(() => senderNickname(after.messageId) !== undefined, "the second message's push");
        expect(senderNickname(before.messageId)).to.not.equal("Alice Renamed");
        expect(senderNickname(after.messageId)).to.equal("Alice Renamed");
        expect(pushedEnvelopes(socket, "snUpdate").map((e) => e.messageId)).to.include.members([before.messageId, after.messageId]);
      } finally {
        socket.close();
      }
    });
  });
}
