// GroupService, every endpoint and every error condition, with the events each change produces:
// GROUP system messages in the conversation, removedFromGroup and groupDissolved on the streams.
import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AgentVisibility } from "../shared/gen/shared/v1/agent_pb.js";
import { AccountType } from "../shared/gen/shared/v1/common_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { GroupStatus, MemberRole, type GroupInfo } from "../shared/gen/shared/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import type { SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import { Errors } from "../shared/errors.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedSnUpdates, StreamWatch, textBody } from "./support/messaging.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

type Account = SignedIn | TestAgent;
const tokenOf = (u: Account) => ("accessToken" in u ? u.accessToken : u.token);
const groupEvent = (m: MessageEnvelope | undefined) => (m?.body?.content.case === "group" ? m.body.content.value.event : undefined);
const envelopeIn = (entry: SnUpdate, groupId: number) =>
  entry.update.case === "messageEnvelope" && entry.update.value.conversationId === BigInt(groupId) ? entry.update.value : undefined;

for (const mode of wireModes) {
  describe(`GroupService errors and events (${mode})`, () => {
    let server: TestServer;
    let people: SignedIn[];
    const sockets: GatewayClient[] = [];
    before(async function () {
      this.timeout(60_000);
      server = await startTestServer();
      people = [];
      for (let i = 0; i < 8; i++) people.push(await signInWithCode(server, mode));
    });
    afterEach(() => {
      for (const socket of sockets.splice(0)) socket.close();
    });
    after(async () => server.dispose());

    const groups = (u: Account) => client(server, GroupService, mode, tokenOf(u));
    const messages = (u: Account) => client(server, MessageService, mode, tokenOf(u));
    const contacts = (u: Account) => client(server, ContactService, mode, tokenOf(u));
    const agents = (u: SignedIn) => client(server, AgentService, mode, u.accessToken);
    const fresh = () => signInWithCode(server, mode);
    const watch = (users: SignedIn[]) => StreamWatch.of(server, mode, users);
    const makeGroup = async (owner: SignedIn, members: Account[], name = "team"): Promise<GroupInfo> =>
      (await groups(owner).createGroup({ name, memberIds: members.map((m) => m.userId) })).group!;
    const memberIds = async (viewer: Account, groupId: number) => (await groups(viewer).getGroupInfo({ groupId })).members.map((m) => m.userId).sort((a, b) => a - b);
    const sorted = (accounts: Account[]) => accounts.map((a) => a.userId).sort((a, b) => a - b);
    const history = async (u: Account, groupId: number) => (await messages(u).getMessageHistory({ conversationId: BigInt(groupId), limit: 200 })).messages.reverse();
    const say = (u: Account, groupId: number, text = "hello") =>
      messages(u).sendMessage({ conversationId: BigInt(groupId), clientMessageId: nextClientMessageId(), body: textBody(text) });
    const groupMessages = async (w: StreamWatch, u: SignedIn, groupId: number) => (await w.entries(u)).flatMap((e) => envelopeIn(e, groupId) ?? []);

    async function socketOf(u: Account): Promise<GatewayClient> {
      const socket = await GatewayClient.connect(server.url, mode);
      sockets.push(socket);
      const answer = await socket.authenticate(tokenOf(u));
      expect(answer.payload.case === "authResponse" && answer.payload.value.success).to.equal(true);
      return socket;
    }

    /** Makes the agent visible to everyone, so users other than its creator may invite it. */
    const makePublic = (creator: SignedIn, agent: TestAgent) =>
      agents(creator).setAgentConfig({ agentUserId: agent.userId, visibility: AgentVisibility.PUBLIC, ipWhitelist: [] });

    describe("GroupService.CreateGroup", () => {
      it("answers INVALID_ARGUMENT for an empty or blank name, fewer than 2 ids and out-of-bound fields; accepts every bound exactly", async () => {
        const [owner, a, b] = people;
        const ok = { name: "n", memberIds: [a.userId, b.userId] };
        await expectError(groups(owner).createGroup({ ...ok, name: "" }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, name: " \t " }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, name: "n".repeat(65) }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, memberIds: [] }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, memberIds: [a.userId] }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, avatarUrl: "a".repeat(2049) }), Errors.invalidArgument);
        await expectError(groups(owner).createGroup({ ...ok, description: "d".repeat(501) }), Errors.invalidArgument);
        expect(await groups(owner).listGroups({ limit: 200 }).then((r) => r.groups.length)).to.equal(0);

        // Bounds count characters, not bytes.
        const name = "é".repeat(64);
        const avatarUrl = "https://cdn.example.com/" + "a".repeat(2048 - 24);
        const description = "ü".repeat(500);
        const startedAt = BigInt(server.clock.now());
        const group = (await groups(owner).createGroup({ name, avatarUrl, description, memberIds: [a.userId, b.userId] })).group!;
        expect(group).to.deep.include({ name, avatarUrl, description, ownerId: owner.userId, status: GroupStatus.NORMAL });
        expect(Number(group.createdAt)).to.be.within(Number(startedAt), server.clock.now());
        // An empty avatar is kept empty: the default picture is the client's to draw.
        const plain = await makeGroup(owner, [a, b], "plain");
        expect(plain.avatarUrl).to.equal("");
        expect(plain.groupId).to.be.above(group.groupId);
      });

      it("drops nonexistent ids, blocks either way, deleted agents and another user's private agent; FAILED_PRECONDITION when fewer than 3 remain", async () => {
        const [owner, a, blockedByOwner, blockingOwner, stranger] = people;
        const ownAgent = await createAgent(server, owner, mode);
        const theirPrivate = await createAgent(server, stranger, mode);
        const theirPublic = await createAgent(server, stranger, mode);
        await makePublic(stranger, theirPublic);
        const deleted = await createAgent(server, owner, mode);
        await agents(owner).deleteMyAgent({ agentUserId: deleted.userId });
        await contacts(owner).blockUser({ targetUserId: blockedByOwner.userId });
        await contacts(blockingOwner).blockUser({ targetUserId: owner.userId });
        try {
          const dropped = [99_999_991, blockedByOwner.userId, blockingOwner.userId, deleted.userId, theirPrivate.userId];
          const group = await makeGroup(owner, [a, ownAgent, theirPublic, ...dropped.map((userId) => ({ userId, token: "" }) as TestAgent)]);
          expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, ownAgent, theirPublic]));
          const joined = groupEvent((await history(owner, group.groupId))[0]);
          expect(joined?.case === "memberJoined" && joined.value.members.map((m) => m.userId).sort((x, y) => x - y)).to.deep.equal(sorted([owner, a, ownAgent, theirPublic]));

          // Two ids given (the schema's minimum), but after dropping only the creator and one remain.
          for (const bad of dropped) {
            const detail = await expectError(groups(owner).createGroup({ name: "small", memberIds: [a.userId, bad] }), Errors.groupTooSmall);
            expect(detail.metadata).to.deep.include({ members: "2" });
          }
          await expectError(groups(owner).createGroup({ name: "small", memberIds: [a.userId, a.userId] }), Errors.groupTooSmall);
          await expectError(groups(owner).createGroup({ name: "small", memberIds: [owner.userId, a.userId] }), Errors.groupTooSmall);
          await expectError(groups(owner).createGroup({ name: "small", memberIds: [99_999_992, 99_999_993] }), Errors.groupTooSmall);
        } finally {
          await contacts(owner).unblockUser({ targetUserId: blockedByOwner.userId });
          await contacts(blockingOwner).unblockUser({ targetUserId: owner.userId });
        }
      });

      it("answers RESOURCE_EXHAUSTED for more than 199 ids, even when most would be dropped, and for more than 20 agents", async function () {
        this.timeout(30_000);
        const [owner, a, b] = people;
        const ghosts = Array.from({ length: 198 }, (_, i) => 90_000_000 + i);
        await expectError(groups(owner).createGroup({ name: "big", memberIds: [a.userId, b.userId, ...ghosts] }), Errors.groupTooLarge);
        // 199 ids is within the bound: the ghosts are dropped and a group of 3 remains.
        const fits = (await groups(owner).createGroup({ name: "fits", memberIds: [a.userId, b.userId, ...ghosts.slice(1)] })).group!;
        expect(await memberIds(owner, fits.groupId)).to.deep.equal(sorted([owner, a, b]));

        const bots: TestAgent[] = [];
        for (let i = 0; i < 21; i++) bots.push(await createAgent(server, owner, mode));
        await expectError(makeGroup(owner, [a, ...bots]), Errors.tooManyAgents);
        const twenty = await makeGroup(owner, bots.slice(0, 20));
        expect(await memberIds(owner, twenty.groupId)).to.deep.equal(sorted([owner, ...bots.slice(0, 20)]));
      });

      it("is user-only: an agent token gets PERMISSION_DENIED, no token UNAUTHENTICATED", async () => {
        const [owner, a, b] = people;
        const bot = await createAgent(server, owner, mode);
        await expectError(groups(bot).createGroup({ name: "bots", memberIds: [a.userId, b.userId] }), Errors.userOnly);
        await expectError(client(server, GroupService, mode).createGroup({ name: "anon", memberIds: [a.userId, b.userId] }), Code.Unauthenticated);
      });
    });

    describe("owner-only changes", () => {
      it("answers PERMISSION_DENIED to members and non-members, NOT_FOUND for an unknown group, INVALID_ARGUMENT for group id 0; nothing changes", async () => {
        const [owner, member, other, outsider] = people;
        const group = await makeGroup(owner, [member, other]);
        const before = await history(owner, group.groupId);
        for (const caller of [member, outsider]) {
          const g = groups(caller);
          await expectError(g.updateGroupName({ groupId: group.groupId, name: "mine" }), Errors.notGroupOwner);
          await expectError(g.updateGroupAvatar({ groupId: group.groupId, avatarUrl: "https://x.example/a.png" }), Errors.notGroupOwner);
          await expectError(g.updateGroupDescription({ groupId: group.groupId, description: "mine" }), Errors.notGroupOwner);
          await expectError(g.inviteMembers({ groupId: group.groupId, memberIds: [people[4].userId] }), Errors.notGroupOwner);
          await expectError(g.removeMember({ groupId: group.groupId, targetId: other.userId }), Errors.notGroupOwner);
          await expectError(g.dissolveGroup({ groupId: group.groupId }), Errors.notGroupOwner);
        }
        const g = groups(owner);
        for (const groupId of [999_999, 0]) {
          const expected = groupId === 0 ? Errors.invalidArgument : Errors.groupNotFound;
          await expectError(g.updateGroupName({ groupId, name: "x" }), expected);
          await expectError(g.updateGroupAvatar({ groupId, avatarUrl: "" }), expected);
          await expectError(g.updateGroupDescription({ groupId, description: "" }), expected);
          await expectError(g.inviteMembers({ groupId, memberIds: [people[4].userId] }), expected);
          await expectError(g.removeMember({ groupId, targetId: other.userId }), expected);
          await expectError(g.dissolveGroup({ groupId }), expected);
          await expectError(g.leaveGroup({ groupId }), expected);
          await expectError(g.getGroupInfo({ groupId }), expected);
        }
        const info = await groups(member).getGroupInfo({ groupId: group.groupId });
        expect(info.group).to.deep.include({ name: "team", avatarUrl: "", description: "", status: GroupStatus.NORMAL });
        expect(info.members.map((m) => m.userId).sort((a, b) => a - b)).to.deep.equal(sorted([owner, member, other]));
        expect(await history(owner, group.groupId)).to.have.length(before.length);
      });

      it("UpdateGroupName, UpdateGroupAvatar and UpdateGroupDescription hold their bounds exactly; empty avatar and description clear", async () => {
        const [owner, a, b] = people;
        const group = await makeGroup(owner, [a, b]);
        const g = groups(owner);
        const groupId = group.groupId;
        await expectError(g.updateGroupName({ groupId, name: "" }), Errors.invalidArgument);
        await expectError(g.updateGroupName({ groupId, name: "   " }), Errors.invalidArgument);
        await expectError(g.updateGroupName({ groupId, name: "x".repeat(65) }), Errors.invalidArgument);
        await expectError(g.updateGroupAvatar({ groupId, avatarUrl: "a".repeat(2049) }), Errors.invalidArgument);
        await expectError(g.updateGroupDescription({ groupId, description: "d".repeat(501) }), Errors.invalidArgument);
        expect(await history(owner, groupId)).to.have.length(1);

        await g.updateGroupName({ groupId, name: "名".repeat(64) });
        await g.updateGroupAvatar({ groupId, avatarUrl: "a".repeat(2048) });
        await g.updateGroupDescription({ groupId, description: "d".repeat(500) });
        expect((await groups(a).getGroupInfo({ groupId })).group).to.deep.include({ name: "名".repeat(64), avatarUrl: "a".repeat(2048), description: "d".repeat(500) });
        await g.updateGroupAvatar({ groupId, avatarUrl: "" });
        await g.updateGroupDescription({ groupId, description: "" });
        expect((await groups(a).getGroupInfo({ groupId })).group).to.deep.include({ name: "名".repeat(64), avatarUrl: "", description: "" });
        const fields = (await history(a, groupId)).slice(1).map((m) => {
          const e = groupEvent(m);
          return e?.case === "groupInfoChanged" ? [e.value.field, e.value.operator?.userId] : e?.case;
        });
        expect(fields).to.deep.equal([
          ["name", owner.userId],
          ["avatar", owner.userId],
          ["description", owner.userId],
          ["avatar", owner.userId],
          ["description", owner.userId],
        ]);
      });
    });

    describe("GroupService.InviteMembers", () => {
      it("skips nonexistent ids, blocks either way, current members, deleted agents and another user's private agent without error or message", async () => {
        const [owner, a, b, blockedByOwner, blockingOwner, stranger, newcomer] = people;
        const group = await makeGroup(owner, [a, b]);
        const theirPrivate = await createAgent(server, stranger, mode);
        const theirPublic = await createAgent(server, stranger, mode);
        await makePublic(stranger, theirPublic);
        const ownAgent = await createAgent(server, owner, mode);
        const deleted = await createAgent(server, owner, mode);
        await agents(owner).deleteMyAgent({ agentUserId: deleted.userId });
        await contacts(owner).blockUser({ targetUserId: blockedByOwner.userId });
        await contacts(blockingOwner).blockUser({ targetUserId: owner.userId });
        try {
          const skipped = [99_999_981, a.userId, owner.userId, blockedByOwner.userId, blockingOwner.userId, deleted.userId, theirPrivate.userId];
          const w = await watch([owner, a, b, blockedByOwner, blockingOwner]);
          await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: skipped });
          await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [] });
          expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b]));
          expect(await history(owner, group.groupId)).to.have.length(1);
          for (const u of [owner, a, b, blockedByOwner, blockingOwner]) expect(await w.entries(u), "no entry for anyone").to.deep.equal([]);

          await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [...skipped, newcomer.userId, ownAgent.userId, theirPublic.userId, newcomer.userId] });
          expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b, newcomer, ownAgent, theirPublic]));
          const joined = await history(newcomer, group.groupId);
          expect(joined.map((m) => m.messageId)).to.deep.equal([1n, 2n]);
          const event = groupEvent(joined[1]);
          expect(event?.case === "memberJoined" && event.value.members.map((m) => m.userId).sort((x, y) => x - y)).to.deep.equal(sorted([newcomer, ownAgent, theirPublic]));
          expect(event?.case === "memberJoined" && event.value.inviter?.userId).to.equal(owner.userId);
        } finally {
          await contacts(owner).unblockUser({ targetUserId: blockedByOwner.userId });
          await contacts(blockingOwner).unblockUser({ targetUserId: owner.userId });
        }
      });

      it("answers RESOURCE_EXHAUSTED past 200 members, adding none of the batch; skipped ids do not count", async function () {
        this.timeout(60_000);
        const [owner, a, b, blocked] = people;
        const crowd: SignedIn[] = [];
        for (let i = 0; i < 199; i++) crowd.push(await fresh());
        const group = await makeGroup(owner, [a, b]);
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: crowd.slice(0, 99).map((u) => u.userId) });
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: crowd.slice(99, 196).map((u) => u.userId) });
        expect(await memberIds(owner, group.groupId)).to.have.length(199);
        const detail = await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [crowd[196].userId, crowd[197].userId] }), Errors.groupTooLarge);
        expect(detail.metadata).to.deep.include({ members: "201" });
        expect(await memberIds(owner, group.groupId)).to.have.length(199);
        await contacts(blocked).blockUser({ targetUserId: owner.userId });
        try {
          await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [crowd[196].userId, a.userId, blocked.userId, 99_999_971] });
        } finally {
          await contacts(blocked).unblockUser({ targetUserId: owner.userId });
        }
        expect(await memberIds(owner, group.groupId)).to.have.length(200);
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [a.userId, 99_999_972] });
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [crowd[197].userId] }), Errors.groupTooLarge);
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: Array.from({ length: 100 }, (_, i) => crowd[i].userId) }), Errors.invalidArgument);
      });

      it("answers RESOURCE_EXHAUSTED past 20 agents, adding none of the batch; a deleted agent frees its place", async function () {
        this.timeout(30_000);
        const [owner, a, b, c] = people;
        const bots: TestAgent[] = [];
        for (let i = 0; i < 22; i++) bots.push(await createAgent(server, owner, mode));
        const group = await makeGroup(owner, [a, b]);
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [c.userId, ...bots.slice(0, 21).map((x) => x.userId)] }), Errors.tooManyAgents);
        expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b]));
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [c.userId, ...bots.slice(0, 20).map((x) => x.userId)] });
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [bots[20].userId] }), Errors.tooManyAgents);

        const w = await watch([a]);
        await agents(owner).deleteMyAgent({ agentUserId: bots[0].userId });
        const left = (await groupMessages(w, a, group.groupId)).map(groupEvent);
        expect(left.map((e) => e?.case === "memberLeft" && e.value.member?.userId)).to.deep.equal([bots[0].userId]);
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [bots[0].userId, bots[20].userId] });
        expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b, c, ...bots.slice(1, 21)]));
        await expectError(groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [bots[21].userId] }), Errors.tooManyAgents);
      });

      it("concurrent invites cannot together pass the agent limit", async function () {
        this.timeout(30_000);
        const [owner, a, b] = people;
        const bots: TestAgent[] = [];
        for (let i = 0; i < 22; i++) bots.push(await createAgent(server, owner, mode));
        const group = await makeGroup(owner, [a, b]);
        const outcomes = await Promise.allSettled([
          groups(owner).inviteMembers({ groupId: group.groupId, memberIds: bots.slice(0, 11).map((x) => x.userId) }),
          groups(owner).inviteMembers({ groupId: group.groupId, memberIds: bots.slice(11).map((x) => x.userId) }),
        ]);
        expect(outcomes.map((o) => o.status).sort()).to.deep.equal(["fulfilled", "rejected"]);
        const failed = outcomes.find((o) => o.status === "rejected")!;
        await expectError(Promise.reject((failed as PromiseRejectedResult).reason), Errors.tooManyAgents);
        expect(await memberIds(owner, group.groupId)).to.have.length(3 + 11);
      });
    });

    describe("GroupService.RemoveMember", () => {
      it("answers NOT_FOUND for an unknown group or a non-member target, INVALID_ARGUMENT for the owner or id 0, FAILED_PRECONDITION once dissolved", async () => {
        const [owner, a, b, outsider] = people;
        const group = await makeGroup(owner, [a, b]);
        const g = groups(owner);
        await expectError(g.removeMember({ groupId: 999_998, targetId: a.userId }), Errors.groupNotFound);
        await expectError(g.removeMember({ groupId: group.groupId, targetId: outsider.userId }), Errors.memberNotFound);
        await expectError(g.removeMember({ groupId: group.groupId, targetId: 99_999_961 }), Errors.memberNotFound);
        await expectError(g.removeMember({ groupId: group.groupId, targetId: owner.userId }), Errors.cannotRemoveOwner);
        await expectError(g.removeMember({ groupId: group.groupId, targetId: 0 }), Errors.invalidArgument);
        expect(await history(owner, group.groupId)).to.have.length(1);
        expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b]));
        await g.dissolveGroup({ groupId: group.groupId });
        await expectError(g.removeMember({ groupId: group.groupId, targetId: a.userId }), Errors.groupDissolved);
      });

      it("posts MemberRemoved with the operator to the remaining members, RemovedFromGroupEvent to the removed user only, who is then shut out", async () => {
        const [owner, a, b, c, outsider] = people;
        const group = await makeGroup(owner, [a, b, c]);
        const w = await watch([owner, a, b, c, outsider]);
        const bSocket = await socketOf(b);
        await groups(owner).removeMember({ groupId: group.groupId, targetId: b.userId });

        await eventually(() => pushedSnUpdates(bSocket).some((u) => u.update.case === "removedFromGroup"), "RemovedFromGroupEvent pushed");
        const bEntries = await w.entries(b);
        expect(bEntries.map((e) => e.update.case)).to.deep.equal(["removedFromGroup"]);
        expect(bEntries[0].update.value).to.deep.include({ groupId: group.groupId, operatorId: owner.userId });
        const pushed = bSocket.frames.find((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.update.case === "removedFromGroup");
        const related = pushed?.payload.case === "update" ? pushed.payload.value.groups : [];
        expect(related.map((g) => [g.groupId, g.status])).to.deep.equal([[group.groupId, GroupStatus.NORMAL]]);

        for (const u of [owner, a, c]) {
          const entries = await w.entries(u);
          expect(entries.map((e) => e.update.case), "members get the message only").to.deep.equal(["messageEnvelope"]);
          const envelope = envelopeIn(entries[0], group.groupId)!;
          expect(envelope).to.deep.include({ messageId: 2n, senderId: 0, clientMessageId: 0n });
          const event = groupEvent(envelope);
          expect(event?.case === "memberRemoved" && [event.value.member?.userId, event.value.operator?.userId]).to.deep.equal([b.userId, owner.userId]);
        }
        expect(await w.entries(outsider)).to.deep.equal([]);

        await expectError(say(b, group.groupId), Errors.notMember);
        await expectError(messages(b).getMessageHistory({ conversationId: BigInt(group.groupId), limit: 10 }), Errors.notMember);
        await expectError(groups(b).getGroupInfo({ groupId: group.groupId }), Errors.notGroupMember);
        await expectError(groups(b).leaveGroup({ groupId: group.groupId }), Errors.memberNotFound);
        expect((await groups(b).listGroups({})).groups.map((g) => g.groupId)).to.not.include(group.groupId);
        // Later messages no longer reach the removed user.
        await say(a, group.groupId, "after");
        expect((await w.entries(b)).map((e) => e.update.case)).to.deep.equal(["removedFromGroup"]);
      });

      it("a removed agent gets RemovedFromGroupEvent on its own socket", async () => {
        const [owner, a, b] = people;
        const bot = await createAgent(server, owner, mode);
        const group = await makeGroup(owner, [a, b, bot]);
        const botSocket = await socketOf(bot);
        await groups(owner).removeMember({ groupId: group.groupId, targetId: bot.userId });
        await eventually(() => pushedSnUpdates(botSocket).some((u) => u.update.case === "removedFromGroup"), "RemovedFromGroupEvent pushed to the agent");
        const entry = pushedSnUpdates(botSocket).find((u) => u.update.case === "removedFromGroup")!;
        expect(entry.update.value).to.deep.include({ groupId: group.groupId, operatorId: owner.userId });
        await expectError(say(bot, group.groupId), Errors.notMember);
      });
    });

    describe("GroupService.LeaveGroup", () => {
      it("answers NOT_FOUND for an unknown group or a non-member, PERMISSION_DENIED for the owner, FAILED_PRECONDITION once dissolved", async () => {
        const [owner, a, b, outsider] = people;
        const group = await makeGroup(owner, [a, b]);
        await expectError(groups(a).leaveGroup({ groupId: 999_997 }), Errors.groupNotFound);
        await expectError(groups(outsider).leaveGroup({ groupId: group.groupId }), Errors.memberNotFound);
        await expectError(groups(owner).leaveGroup({ groupId: group.groupId }), Errors.ownerCannotLeave);
        expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, a, b]));
        expect(await history(owner, group.groupId)).to.have.length(1);
        await groups(owner).dissolveGroup({ groupId: group.groupId });
        await expectError(groups(a).leaveGroup({ groupId: group.groupId }), Errors.groupDissolved);
        await expectError(groups(outsider).leaveGroup({ groupId: group.groupId }), Errors.groupDissolved);
      });

      it("posts MemberLeft to the remaining members and to the leaver, who is then shut out; an agent may leave with its own token", async () => {
        const [owner, a, b, outsider] = people;
        const bot = await createAgent(server, owner, mode);
        const group = await makeGroup(owner, [a, b, bot]);
        const w = await watch([owner, a, b, outsider]);
        await groups(a).leaveGroup({ groupId: group.groupId });
        for (const u of [owner, a, b]) {
          const found = await groupMessages(w, u, group.groupId);
          expect(found.map((m) => [m.messageId, m.senderId, m.clientMessageId])).to.deep.equal([[2n, 0, 0n]]);
          const event = groupEvent(found[0]);
          expect(event?.case === "memberLeft" && event.value.member?.userId).to.equal(a.userId);
        }
        expect(await w.entries(outsider)).to.deep.equal([]);
        await expectError(say(a, group.groupId), Errors.notMember);
        await expectError(messages(a).getMessageHistory({ conversationId: BigInt(group.groupId), limit: 10 }), Errors.notMember);
        await expectError(groups(a).leaveGroup({ groupId: group.groupId }), Errors.memberNotFound);
        expect((await groups(a).listGroups({})).groups.map((g) => g.groupId)).to.not.include(group.groupId);

        await groups(bot).leaveGroup({ groupId: group.groupId });
        const left = groupEvent((await history(owner, group.groupId)).at(-1));
        expect(left?.case === "memberLeft" && [left.value.member?.userId, left.value.member?.role]).to.deep.equal([bot.userId, MemberRole.MEMBER]);
        expect(await memberIds(owner, group.groupId)).to.deep.equal(sorted([owner, b]));
        // Later messages reach only the remaining members.
        await say(b, group.groupId, "after");
        expect((await groupMessages(w, a, group.groupId)).map((m) => m.messageId)).to.deep.equal([2n]);
      });
    });

    describe("GroupService.DissolveGroup", () => {
      it("sends GroupDissolvedEvent to every member (agents included) and to no one else, then refuses everything with FAILED_PRECONDITION", async () => {
        const [owner, a, b, leaver, outsider] = people;
        const bot = await createAgent(server, owner, mode);
        const group = await makeGroup(owner, [a, b, leaver, bot]);
        await groups(leaver).leaveGroup({ groupId: group.groupId });
        const w = await watch([owner, a, b, leaver, outsider]);
        const aSocket = await socketOf(a);
        const botSocket = await socketOf(bot);
        await groups(owner).dissolveGroup({ groupId: group.groupId });

        for (const u of [owner, a, b]) {
          const entries = await w.entries(u);
          expect(entries.map((e) => e.update.case), "only the dissolution, no system message").to.deep.equal(["groupDissolved"]);
          expect(entries[0].update.value).to.deep.include({ groupId: group.groupId, operatorId: owner.userId });
        }
        for (const u of [leaver, outsider]) expect(await w.entries(u)).to.deep.equal([]);
        for (const socket of [aSocket, botSocket]) await eventually(() => pushedSnUpdates(socket).some((e) => e.update.case === "groupDissolved"), "GroupDissolvedEvent pushed");
        const frame = aSocket.frames.find((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.update.case === "groupDissolved");
        const related = frame?.payload.case === "update" ? frame.payload.value.groups : [];
        expect(related.map((g) => [g.groupId, g.status])).to.deep.equal([[group.groupId, GroupStatus.DISSOLVED]]);

        const groupId = group.groupId;
        for (const caller of [owner, a, outsider]) {
          const g = groups(caller);
          await expectError(g.dissolveGroup({ groupId }), Errors.groupDissolved);
          await expectError(g.updateGroupName({ groupId, name: "x" }), Errors.groupDissolved);
          await expectError(g.updateGroupAvatar({ groupId, avatarUrl: "" }), Errors.groupDissolved);
          await expectError(g.updateGroupDescription({ groupId, description: "" }), Errors.groupDissolved);
          await expectError(g.inviteMembers({ groupId, memberIds: [outsider.userId] }), Errors.groupDissolved);
          await expectError(g.removeMember({ groupId, targetId: a.userId }), Errors.groupDissolved);
          await expectError(g.leaveGroup({ groupId }), Errors.groupDissolved);
          await expectError(g.getGroupInfo({ groupId }), Errors.groupDissolved);
        }
        await expectError(groups(bot).getGroupInfo({ groupId }), Errors.groupDissolved);
        for (const sender of [owner, a, bot]) await expectError(say(sender, groupId), Errors.groupDissolved);
        for (const u of [owner, a, b]) expect((await groups(u).listGroups({})).groups.map((g) => g.groupId)).to.not.include(groupId);
        // Nothing more reaches the former members.
        for (const u of [owner, a, b]) expect(await w.entries(u)).to.have.length(1);
      });
    });

    describe("GroupService.GetGroupInfo", () => {
      it("answers the group with its members joined to their profiles; PERMISSION_DENIED for a non-member; agents may read it", async () => {
        const [owner, a, b, late, outsider] = people;
        const bot = await createAgent(server, owner, mode);
        const group = await makeGroup(owner, [a, b, bot]);
        server.clock.advance(5_000);
        await groups(owner).inviteMembers({ groupId: group.groupId, memberIds: [late.userId] });
        await groups(owner).updateGroupName({ groupId: group.groupId, name: "renamed" });

        const info = await groups(bot).getGroupInfo({ groupId: group.groupId });
        expect(info.group).to.deep.include({ groupId: group.groupId, name: "renamed", ownerId: owner.userId, status: GroupStatus.NORMAL, createdAt: group.createdAt });
        const roles = Object.fromEntries(info.members.map((m) => [m.userId, [m.role, m.joinedAt === group.createdAt]]));
        expect(roles, "initial members joined at creation").to.deep.equal({
          [owner.userId]: [MemberRole.OWNER, true],
          [a.userId]: [MemberRole.MEMBER, true],
          [b.userId]: [MemberRole.MEMBER, true],
          [bot.userId]: [MemberRole.MEMBER, true],
          [late.userId]: [MemberRole.MEMBER, false],
        });
        expect(info.members.find((m) => m.userId === late.userId)!.joinedAt >= group.createdAt + 5_000n).to.equal(true);
        expect(info.users.map((u) => u.userId).sort((x, y) => x - y)).to.deep.equal(info.members.map((m) => m.userId).sort((x, y) => x - y));
        const kinds = Object.fromEntries(info.users.map((u) => [u.userId, u.accountType]));
        expect(kinds[bot.userId]).to.equal(AccountType.AGENT);
        expect(kinds[late.userId]).to.equal(AccountType.USER);
        await expectError(groups(outsider).getGroupInfo({ groupId: group.groupId }), Errors.notGroupMember);
        await expectError(groups(outsider).getGroupInfo({ groupId: 999_996 }), Errors.groupNotFound);
      });
    });

    describe("GroupService.ListGroups", () => {
      it("pages by afterId with limit 0 or omitted meaning 50, at most 200; dissolved, left and removed groups are not listed", async function () {
        this.timeout(30_000);
        const lister = await fresh();
        const [a, b] = people;
        const created: GroupInfo[] = [];
        for (let i = 0; i < 53; i++) created.push(await makeGroup(lister, [a, b], `g${i}`));
        // Listed in id order, which is creation order only on one engine: each engine of a cluster
        // hands out ids from its own block.
        const ids = created.map((g) => g.groupId).sort((x, y) => x - y);
        await expectError(groups(lister).listGroups({ limit: -1 }), Errors.invalidArgument);
        await expectError(groups(lister).listGroups({ limit: 201 }), Errors.invalidArgument);
        for (const request of [{}, { limit: 0 }]) {
          const page = await groups(lister).listGroups(request);
          expect(page.groups.map((g) => g.groupId)).to.deep.equal(ids.slice(0, 50));
          expect(page.hasMore).to.equal(true);
        }
        const all = await groups(lister).listGroups({ limit: 200 });
        expect(all.groups.map((g) => g.groupId)).to.deep.equal(ids);
        expect(all.hasMore).to.equal(false);
        expect(all.groups.find((g) => g.groupId === created[0].groupId)).to.deep.include({ name: "g0", ownerId: lister.userId, status: GroupStatus.NORMAL });

        // Walk with a small page: every group once, in ascending order.
        const walked: number[] = [];
        let afterId: number | undefined;
        for (;;) {
          const page = await groups(lister).listGroups({ afterId, limit: 7 });
          walked.push(...page.groups.map((g) => g.groupId));
          if (!page.hasMore) break;
          afterId = page.groups.at(-1)!.groupId;
        }
        expect(walked).to.deep.equal(ids);
        const exact = await groups(lister).listGroups({ afterId: ids[45], limit: 7 });
        expect(exact.groups.map((g) => g.groupId)).to.deep.equal(ids.slice(46));
        expect(exact.hasMore).to.equal(false);
        expect((await groups(lister).listGroups({ afterId: ids.at(-1) })).groups).to.deep.equal([]);

        // a is in all 53: dissolving one, leaving one and being removed from one takes them off a's list.
        await groups(lister).dissolveGroup({ groupId: ids[0] });
        await groups(a).leaveGroup({ groupId: ids[1] });
        await groups(lister).removeMember({ groupId: ids[2], targetId: a.userId });
        const mine = await groups(a).listGroups({ limit: 200 });
        expect(mine.groups.map((g) => g.groupId).filter((id) => ids.includes(id))).to.deep.equal(ids.slice(3));
        expect((await groups(lister).listGroups({ limit: 200 })).groups.map((g) => g.groupId)).to.deep.equal(ids.slice(1));
        expect((await groups(b).listGroups({ limit: 200 })).groups.map((g) => g.groupId).filter((id) => ids.includes(id))).to.deep.equal(ids.slice(1));
      });

      it("lists an agent's groups with its own token", async () => {
        const [owner, a] = people;
        const bot = await createAgent(server, owner, mode);
        const group = await makeGroup(owner, [a, bot]);
        expect((await groups(bot).listGroups({})).groups.map((g) => g.groupId)).to.deep.equal([group.groupId]);
      });
    });

    describe("GROUP system messages", () => {
      it("have senderId 0, clientMessageId 0 and dense ids among user messages, and reach exactly the members of the moment", async () => {
        const [owner, a, b, c, d] = people;
        const w = await watch([owner, a, b, c, d]);
        const group = await makeGroup(owner, [a, b]);
        const groupId = group.groupId;
        const ownerSocket = await socketOf(owner);
        await say(a, groupId, "one");
        await groups(owner).updateGroupName({ groupId, name: "n2" });
        await groups(owner).inviteMembers({ groupId, memberIds: [c.userId, d.userId] });
        await groups(owner).updateGroupAvatar({ groupId, avatarUrl: "https://cdn.example.com/a.png" });
        await groups(owner).removeMember({ groupId, targetId: b.userId });
        await say(c, groupId, "two");
        await groups(d).leaveGroup({ groupId });
        await groups(owner).updateGroupDescription({ groupId, description: "about" });

        const all = await history(owner, groupId);
        expect(all.map((m) => m.messageId)).to.deep.equal([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
        const system = all.filter((m) => m.body?.type === MessageType.GROUP);
        expect(system.map((m) => m.messageId)).to.deep.equal([1n, 3n, 4n, 5n, 6n, 8n, 9n]);
        for (const m of system) {
          expect(m).to.deep.include({ senderId: 0, clientMessageId: 0n, conversationId: BigInt(groupId), edited: false });
          expect(m.body?.content.case === "group" && m.body.content.value.groupId).to.equal(groupId);
        }
        expect(system.map((m) => groupEvent(m)?.case)).to.deep.equal(["memberJoined", "groupInfoChanged", "memberJoined", "groupInfoChanged", "memberRemoved", "memberLeft", "groupInfoChanged"]);
        expect(all.filter((m) => m.body?.type !== MessageType.GROUP).map((m) => m.senderId)).to.deep.equal([a.userId, c.userId]);

        const received = async (u: SignedIn) => (await groupMessages(w, u, groupId)).map((m) => m.messageId);
        expect(await received(owner)).to.deep.equal([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
        expect(await received(a)).to.deep.equal([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
        expect(await received(b), "removed: not told by message").to.deep.equal([1n, 2n, 3n, 4n, 5n]);
        expect(await received(c)).to.deep.equal([4n, 5n, 6n, 7n, 8n, 9n]);
        expect(await received(d), "the leaver gets MemberLeft, nothing after").to.deep.equal([4n, 5n, 6n, 7n, 8n]);
        // The same envelopes go out live on the socket.
        await eventually(() => pushedSnUpdates(ownerSocket).filter((u) => envelopeIn(u, groupId)).length === 8, "pushes since the socket opened");
        const live = pushedSnUpdates(ownerSocket).flatMap((u) => envelopeIn(u, groupId) ?? []);
        expect(live.filter((m) => m.senderId === 0).map((m) => [m.messageId, m.clientMessageId])).to.deep.equal([3n, 4n, 5n, 6n, 8n, 9n].map((id) => [id, 0n]));
      });
    });
  });
}
