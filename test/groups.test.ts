import { expect } from "chai";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { ConversationType } from "../shared/gen/shared/v1/conversation_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { GroupStatus, MemberRole } from "../shared/gen/shared/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { createAgent } from "./support/social.js";

let clientIds = 1n;

for (const mode of wireModes) {
  describe(`GroupService (${mode})`, () => {
    let server: TestServer;
    let people: SignedIn[];
    before(async function () {
      this.timeout(60_000);
      server = await startTestServer();
      people = [];
      for (let i = 0; i < 6; i++) people.push(await signInWithCode(server, mode));
    });
    after(async () => server.dispose());

    const groups = (u: SignedIn) => client(server, GroupService, mode, u.accessToken);
    const messages = (u: SignedIn) => client(server, MessageService, mode, u.accessToken);
    const sync = (u: SignedIn) => client(server, SyncService, mode, u.accessToken);
    const history = async (u: SignedIn, groupId: number) => (await messages(u).getMessageHistory({ conversationId: BigInt(groupId), limit: 200 })).messages.reverse();
    const groupEvent = (m: MessageEnvelope) => (m.body?.content.case === "group" ? m.body.content.value.event : undefined);
    const makeGroup = async (owner: SignedIn, members: (SignedIn | number)[], name = "team") =>
      (await groups(owner).createGroup({ name, memberIds: members.map((m) => (typeof m === "number" ? m : m.userId)) })).group!;

    describe("GroupService.CreateGroup", () => {
      it("creates a NORMAL group owned by the creator with one MemberJoined system message (no inviter)", async () => {
        const [owner, a, b] = people;
        const group = await makeGroup(owner, [a, b]);
        expect(group).to.deep.include({ ownerId: owner.userId, status: GroupStatus.NORMAL, name: "team" });
        const [first] = await history(a, group.groupId);
        expect(first).to.deep.include({ messageId: 1n, senderId: 0, clientMessageId: 0n, conversationId: BigInt(group.groupId) });
        expect(first.body?.type).to.equal(MessageType.GROUP);
        const event = groupEvent(first);
        expect(event?.case).to.equal("memberJoined");
        if (event?.case === "memberJoined") {
          expect(event.value.members.map((m) => m.userId).sort()).to.deep.equal([owner.userId, a.userId, b.userId].sort());
          expect(event.value.inviter).to.equal(undefined);
        }
        const info = await groups(b).getGroupInfo({ groupId: group.groupId });
        expect(info.members.find((m) => m.userId === owner.userId)?.role).to.equal(MemberRole.OWNER);
        expect(info.users.map((u) => u.userId).sort()).to.deep.equal([owner.userId, a.userId, b.userId].sort());
        const listed = await client(server, ConversationService, mode, a.accessToken).listConversations({});
        const conversation = listed.conversations.find((c) => c.conversationId === BigInt(group.groupId));
        expect(conversation).to.deep.include({ type: ConversationType.GROUP, peerId: group.groupId, lastMessageId: 1n });
        expect(listed.relatedGroups.map((g) => g.groupId)).to.include(group.groupId);
      });

      it("drops unknown, duplicate and blocked ids, then applies the size rules", async () => {
        const [owner, a, b, c] = people;
        await client(server, ContactService, mode, c.accessToken).blockUser({ targetUserId: owner.userId });
        try {
          const group = await makeGroup(owner, [a, b, c, a, 99_999_999, owner]);
          const info = await groups(owner).getGroupInfo({ groupId: group.groupId });
          expect(info.members.map((m) => m.userId).sort()).to.deep.equal([owner.userId, a.userId, b.userId].sort());
          await expectError(groups(owner).createGroup({ name: "small", memberIds: [a.userId, c.userId] }), Errors.groupTooSmall);
          await expectError(groups(owner).createGroup({ name: "small", memberIds: [a.userId, 99_999_998] }), Errors.groupTooSmall);
          await expectError(groups(owner).createGroup({ name: "x", memberIds: [a.userId] }), Errors.invalidArgument);
          await expectError(groups(owner).createGroup({ name: "", memberIds: [a.userId, b.userId] }), Errors.invalidArgument);
          await expectError(groups(owner).createGroup({ name: "   ", memberIds: [a.userId, b.userId] }), Errors.invalidArgument);
        } finally {
          await client(server, ContactService, mode, c.accessToken).unblockUser({ targetUserId: owner.userId });
        }
      });

      it("answers RESOURCE_EXHAUSTED above 200 members including the creator", async function () {
        this.timeout(60_000);
        const owner = people[0];
        const crowd: SignedIn[] = [];
        for (let i = 0; i < 200; i++) crowd.push(await signInWithCode(server, mode));
        await expectError(makeGroup(owner, crowd), Errors.groupTooLarge);
        const full = await makeGroup(owner, crowd.slice(0, 199), "full house");
        expect((await groups(owner).getGroupInfo({ groupId: full.groupId })).members).to.have.length(200);
        // A message reaches all 200 members' streams.
        const sent = await messages(crowd[5]).sendMessage({ conversationId: BigInt(full.groupId), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "hi all" } } } });
        const last = crowd[198];
        const diff = await sync(last).getDifference({ sn: 0 });
        expect(diff.updates.some((u) => u.update.case === "messageEnvelope" && u.update.value.messageId === sent.messageId)).to.equal(true);
        await expectError(groups(owner).inviteMembers({ groupId: full.groupId, memberIds: [crowd[199].userId] }), Errors.groupTooLarge);
      });
    });

    describe("GroupService owner-only changes", () => {
      it("renames, changes avatar and description with GroupInfoChanged messages; others get PERMISSION_DENIED", async () => {
        const [owner, a, b] = people;
        const group = await makeGroup(owner, [a, b]);
        await groups(owner).updateGroupName({ groupId: group.groupId, name: "renamed" });
        await groups(owner).updateGroupAvatar({ groupId: group.groupId, avatarUrl: "https://cdn.example.com/g.png" });
        await groups(owner).updateGroupDescription({ groupId: group.groupId, description: "about us" });
        const events = (await history(a, group.groupId)).slice(1).map(groupEvent);
        expect(events.map((e) => e?.case === "groupInfoChanged" && [e.value.field, e.value.operator?.userId])).to.deep.equal([
          ["name", owner.userId],
          ["avatar", owner.userId],
          ["description", owner.userId],
        ]);
        expect((await groups(a).getGroupInfo({ groupId: group.groupId })).group).to.deep.include({ name: "renamed", description: "about us" });
        await expectError(groups(a).updateGroupName({ groupId: group.groupId, name: "mine" }), Errors.notGroupOwner);
        await expectError(groups(a).inviteMembers({ groupId: group.groupId, memberIds: [people[3].userId] }), Errors.notGroupOwner);
        await expectError(groups(a).removeMember({ groupId: group.groupId, targetId: b.userId }), Errors.notGroupOwner);
        await expectError(groups(a).dissolveGroup({ groupId: group.groupId }), Errors.notGroupOwner);
        await expectError(groups(owner).updateGroupName({ groupId: 999_999, name: "x" }), Errors.groupNotFound);
        await expectError(groups(owner).updateGroupName({ groupId: group.groupId, name: "n".repeat(65) }), Errors.invalidArgument);
        await expectError(groups(owner).updateGroupDescription({ groupId: group.groupId, description: "d".repeat(501) }), Errors.invalidArgument);
      });

      it("InviteMembers adds new members in one MemberJoined with the inviter, skipping members, unknown and blocked ids", async () => {
        const [owner, a, b, c, d, e] = people;
        const group = await makeGroup(owner, [a, b]);
        await client(server, ContactService, mode, e.accessToken).blockUser({ targetUserId: owner.userId });
        try {
          await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [a.userId, c.userId, d.userId, e.userId, 99_999_999] });
        } finally {
          await client(server, ContactService, mode, e.accessToken).unblockUser({ targetUserId: owner.userId });
        }
        const info = await groups(owner).getGroupInfo({ groupId: group.groupId });
        expect(info.members.map((m) => m.userId).sort()).to.deep.equal([owner.userId, a.userId, b.userId, c.userId, d.userId].sort());
        const joined = groupEvent((await history(c, group.groupId)).at(-1)!);
        expect(joined?.case === "memberJoined" && joined.value.members.map((m) => m.userId).sort()).to.deep.equal([c.userId, d.userId].sort());
        expect(joined?.case === "memberJoined" && joined.value.inviter?.userId).to.equal(owner.userId);
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: Array.from({ length: 100 }, (_, i) => i + 1) }), Errors.invalidArgument);
      });

      it("limits agents per group to 20", async function () {
        this.timeout(30_000);
        const [owner, a, b] = people;
        const group = await makeGroup(owner, [a, b]);
        const agents = [];
        for (let i = 0; i < 21; i++) agents.push(await createAgent(server, owner, mode));
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: agents.slice(0, 20).map((x) => x.userId) });
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [agents[20].userId] }), Errors.tooManyAgents);
        // An agent member may post in the group.
        const asAgent = client(server, MessageService, mode, agents[0].token);
        await asAgent.sendMessage({ conversationId: BigInt(group.groupId), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "beep" } } } });
      });
    });

    describe("GroupService.RemoveMember and LeaveGroup", () => {
      it("RemoveMember posts MemberRemoved, tells the removed member, and shuts them out", async () => {
        const [owner, a, b, c] = people;
        const group = await makeGroup(owner, [a, b, c]);
        const base = (await sync(b).getCurrentState({})).state!.latestSn;
        await groups(owner).removeMember({ groupId: group.groupId, targetId: b.userId });
        const removed = groupEvent((await history(a, group.groupId)).at(-1)!);
        expect(removed?.case === "memberRemoved" && [removed.value.member?.userId, removed.value.operator?.userId]).to.deep.equal([b.userId, owner.userId]);
        const events = (await sync(b).getDifference({ sn: base })).updates.map((u) => u.update);
        const notice = events.find((e) => e.case === "removedFromGroup");
        expect(notice?.case === "removedFromGroup" && notice.value).to.deep.include({ groupId: group.groupId, operatorId: owner.userId });
        await expectError(messages(b).sendMessage({ conversationId: BigInt(group.groupId), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "x" } } } }), Errors.notMember);
        await expectError(groups(b).getGroupInfo({ groupId: group.groupId }), Errors.notGroupMember);
        await expectError(groups(owner).removeMember({ groupId: group.groupId, targetId: b.userId }), Errors.memberNotFound);
        await expectError(groups(owner).removeMember({ groupId: group.groupId, targetId: owner.userId }), Errors.cannotRemoveOwner);
      });

      it("LeaveGroup posts MemberLeft; the owner must dissolve instead; a non-member gets NOT_FOUND", async () => {
        const [owner, a, b, c] = people;
        const group = await makeGroup(owner, [a, b]);
        await groups(a).leaveGroup({ groupId: group.groupId });
        const left = groupEvent((await history(b, group.groupId)).at(-1)!);
        expect(left?.case === "memberLeft" && left.value.member?.userId).to.equal(a.userId);
        await expectError(groups(owner).leaveGroup({ groupId: group.groupId }), Errors.ownerCannotLeave);
        await expectError(groups(c).leaveGroup({ groupId: group.groupId }), Errors.memberNotFound);
        await expectError(groups(c).leaveGroup({ groupId: 999_999 }), Errors.groupNotFound);
      });
    });

    describe("GroupService.DissolveGroup", () => {
      it("tells every member, then answers FAILED_PRECONDITION to every change, GetGroupInfo and SendMessage", async () => {
        const [owner, a, b] = people;
        const group = await makeGroup(owner, [a, b]);
        const bases = await Promise.all([owner, a, b].map(async (u) => (await sync(u).getCurrentState({})).state!.latestSn));
        await groups(owner).dissolveGroup({ groupId: group.groupId });
        for (const [i, user] of [owner, a, b].entries()) {
          const events = (await sync(user).getDifference({ sn: bases[i] })).updates.map((u) => u.update);
          const dissolved = events.find((e) => e.case === "groupDissolved");
          expect(dissolved?.case === "groupDissolved" && dissolved.value).to.deep.include({ groupId: group.groupId, operatorId: owner.userId });
        }
        await expectError(groups(owner).dissolveGroup({ groupId: group.groupId }), Errors.groupDissolved);
        await expectError(groups(owner).updateGroupName({ groupId: group.groupId, name: "x" }), Errors.groupDissolved);
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [a.userId] }), Errors.groupDissolved);
        await expectError(groups(a).getGroupInfo({ groupId: group.groupId }), Errors.groupDissolved);
        await expectError(groups(a).leaveGroup({ groupId: group.groupId }), Errors.groupDissolved);
        await expectError(messages(a).sendMessage({ conversationId: BigInt(group.groupId), clientMessageId: clientIds++, body: { type: MessageType.TEXT, content: { case: "text", value: { text: "x" } } } }), Errors.groupDissolved);
        expect((await groups(a).listGroups({})).groups.map((g) => g.groupId)).to.not.include(group.groupId);
      });
    });

    describe("GroupService.ListGroups", () => {
      it("lists the caller's groups by ascending id with afterId paging", async () => {
        const [owner, a, b, , , f] = people;
        // Ascending id is creation order only on one engine: each engine of a cluster hands out ids from its own block.
        const created = [await makeGroup(f, [a, b], "g1"), await makeGroup(f, [a, b], "g2"), await makeGroup(f, [a, owner], "g3")].map((g) => g.groupId).sort((x, y) => x - y);
        const page = await groups(f).listGroups({ limit: 2 });
        expect(page.groups.map((g) => g.groupId)).to.deep.equal(created.slice(0, 2));
        expect(page.hasMore).to.equal(true);
        const rest = await groups(f).listGroups({ afterId: created[1], limit: 2 });
        expect(rest.groups.map((g) => g.groupId)).to.deep.equal([created[2]]);
        expect(rest.hasMore).to.equal(false);
        await expectError(groups(f).listGroups({ limit: 201 }), Errors.invalidArgument);
      });
    });
  });
}
