import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { AgentDeliveryMode, AgentStatus, AgentVisibility } from "../shared/gen/shared/v1/agent_pb.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AccountType } from "../shared/gen/shared/v1/common_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { ConversationType } from "../shared/gen/shared/v1/conversation_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { befriend } from "./support/social.js";

let counter = 0;
const uniqueName = () => `maker_${process.pid}_${++counter}`.slice(0, 32);

for (const mode of wireModes) {
  describe(`AgentService.CreateAgent, ListMyAgents, GetMyAgent (${mode})`, () => {
    let server: TestServer;
    let owner: SignedIn;
    let other: SignedIn;
    before(async () => {
      server = await startTestServer();
      owner = await signInWithCode(server, mode);
      other = await signInWithCode(server, mode);
    });
    after(async () => server.dispose());
    const agents = (token: string) => client(server, AgentService, mode, token);

    it("creates an ACTIVE, PRIVATE, WEBSOCKET-mode agent: token and key once, prefixes only afterwards, contact and conversation with the creator", async () => {
      const username = uniqueName();
      const created = await agents(owner.accessToken).createAgent({ username, name: "Helper", signature: "answers questions" });
      expect(created.token).to.match(/^nxa_/);
      expect(created.secretKey.length).to.be.greaterThan(20);
      const profile = created.profile!;
      expect(profile.user).to.deep.include({ username, nickname: "Helper", signature: "answers questions", accountType: AccountType.AGENT });
      expect(profile).to.deep.include({ status: AgentStatus.ACTIVE, visibility: AgentVisibility.PRIVATE, deliveryMode: AgentDeliveryMode.WEBSOCKET, isSystemAgent: false });
      expect(created.token.startsWith(profile.tokenPrefix)).to.equal(true);
      expect(created.secretKey.startsWith(profile.secretKeyPrefix)).to.equal(true);
      expect(profile.tokenPrefix.length).to.be.lessThan(created.token.length);

      const agentId = profile.user!.userId;
      const { profile: again } = await agents(owner.accessToken).getMyAgent({ agentUserId: agentId });
      expect(JSON.stringify(again, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))).to.not.include(created.token).and.not.include(created.secretKey);

      // The token works at once, as the agent's own identity.
      const self = await client(server, UserService, mode, created.token).getProfile({});
      expect(self.profile?.userId).to.equal(agentId);

      // Mutual contacts, their PRIVATE conversation, and ContactAddedEvent on the creator's stream.
      const contacts = await client(server, ContactService, mode, owner.accessToken).listContacts({ limit: 200 });
      expect(contacts.contacts.map((c) => c.user?.userId)).to.include(agentId);
      const agentContacts = await client(server, ContactService, mode, created.token).listContacts({ limit: 200 });
      expect(agentContacts.contacts.map((c) => c.user?.userId)).to.deep.equal([owner.userId]);
      const { conversation } = await client(server, ConversationService, mode, owner.accessToken).getConversation({ conversationId: privateConversationId(owner.userId, agentId) });
      expect(conversation).to.deep.include({ type: ConversationType.PRIVATE, peerId: agentId });
      const difference = await client(server, SyncService, mode, owner.accessToken).getDifference({ sn: 0 });
      const added = difference.updates.filter((u) => u.update.case === "contactAdded").map((u) => (u.update.case === "contactAdded" ? u.update.value.peerUserId : 0));
      expect(added).to.include(agentId);
    });

    it("answers ALREADY_EXISTS for a taken username, whether a user's or an agent's", async () => {
      const username = uniqueName();
      await agents(owner.accessToken).createAgent({ username, name: "First" });
      await expectError(agents(other.accessToken).createAgent({ username, name: "Second" }), Errors.agentUsernameTaken);
      const person = await signInWithCode(server, mode);
      const personName = uniqueName();
      await client(server, UserService, mode, person.accessToken).setUsername({ username: personName });
      await expectError(agents(owner.accessToken).createAgent({ username: personName, name: "Clash" }), Errors.agentUsernameTaken);
    });

    it("answers INVALID_ARGUMENT for an invalid username or name and creates nothing", async () => {
      const before = (await agents(owner.accessToken).listMyAgents({})).agents.length;
      for (const username of ["abcd", "x".repeat(33), "Upper_Case", "has space", "dash-ed", `u_123456`]) {
        await expectError(agents(owner.accessToken).createAgent({ username, name: "Bot" }), Code.InvalidArgument);
      }
      await expectError(agents(owner.accessToken).createAgent({ username: uniqueName(), name: "" }), Code.InvalidArgument);
      await expectError(agents(owner.accessToken).createAgent({ username: uniqueName(), name: "   " }), Code.InvalidArgument);
      await expectError(agents(owner.accessToken).createAgent({ username: uniqueName(), name: "n".repeat(65) }), Code.InvalidArgument);
      await expectError(agents(owner.accessToken).createAgent({ username: uniqueName(), name: "Bot", signature: "s".repeat(257) }), Code.InvalidArgument);
      expect((await agents(owner.accessToken).listMyAgents({})).agents.length).to.equal(before);
    });

    it("is user-only: an agent token answers PERMISSION_DENIED, no token UNAUTHENTICATED", async () => {
      const created = await agents(owner.accessToken).createAgent({ username: uniqueName(), name: "Bot" });
      await expectError(agents(created.token).createAgent({ username: uniqueName(), name: "Child" }), Errors.userOnly);
      await expectError(agents(created.token).listMyAgents({}), Errors.userOnly);
      await expectError(agents(created.token).getMyAgent({ agentUserId: created.profile!.user!.userId }), Errors.userOnly);
      await expectError(client(server, AgentService, mode).createAgent({ username: uniqueName(), name: "Bot" }), Errors.unauthenticated);
    });

    it("ListMyAgents answers exactly the caller's active agents, oldest first", async () => {
      const lister = await signInWithCode(server, mode);
      expect((await agents(lister.accessToken).listMyAgents({})).agents).to.deep.equal([]);
      const first = await agents(lister.accessToken).createAgent({ username: uniqueName(), name: "One" });
      const second = await agents(lister.accessToken).createAgent({ username: uniqueName(), name: "Two" });
      await agents(other.accessToken).createAgent({ username: uniqueName(), name: "Not theirs" });
      const ids = (await agents(lister.accessToken).listMyAgents({})).agents.map((a) => a.user?.userId);
      expect(ids).to.deep.equal([first.profile!.user!.userId, second.profile!.user!.userId]);
      await agents(lister.accessToken).deleteMyAgent({ agentUserId: first.profile!.user!.userId });
      expect((await agents(lister.accessToken).listMyAgents({})).agents.map((a) => a.user?.userId)).to.deep.equal([second.profile!.user!.userId]);
    });

    it("GetMyAgent answers NOT_FOUND for unknown ids, users and deleted agents, PERMISSION_DENIED for another creator's agent", async () => {
      const created = await agents(owner.accessToken).createAgent({ username: uniqueName(), name: "Mine" });
      const agentId = created.profile!.user!.userId;
      await expectError(agents(other.accessToken).getMyAgent({ agentUserId: agentId }), Errors.notAgentCreator);
      await expectError(agents(owner.accessToken).getMyAgent({ agentUserId: 99_999_999 }), Errors.agentNotFound);
      await expectError(agents(owner.accessToken).getMyAgent({ agentUserId: other.userId }), Errors.agentNotFound);
      await expectError(agents(owner.accessToken).getMyAgent({ agentUserId: 0 }), Code.InvalidArgument);
      await agents(owner.accessToken).deleteMyAgent({ agentUserId: agentId });
      await expectError(agents(owner.accessToken).getMyAgent({ agentUserId: agentId }), Errors.agentNotFound);
    });
  });
}

describe("AgentService.DeleteMyAgent called twice at once", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
  });
  after(async () => server.dispose());

  it("deletes once: one call succeeds, the other answers NOT_FOUND, contacts hear of it once", async () => {
    const owner = await signInWithCode(server, "json");
    const created = await client(server, AgentService, "json", owner.accessToken).createAgent({ username: uniqueName(), name: "Twice" });
    const agentId = created.profile!.user!.userId;
    const outcomes = await Promise.allSettled([1, 2, 3].map(() => client(server, AgentService, "json", owner.accessToken).deleteMyAgent({ agentUserId: agentId })));
    expect(outcomes.filter((o) => o.status === "fulfilled")).to.have.length(1);
    for (const failed of outcomes.filter((o) => o.status === "rejected")) {
      await expectError(Promise.reject((failed as PromiseRejectedResult).reason), Errors.agentNotFound);
    }
    const { updates } = await client(server, SyncService, "json", owner.accessToken).getDifference({ sn: 0 });
    const told = updates.filter((u) => u.update.case === "agentStatusChanged" && u.update.value.agentUserId === agentId);
    expect(told).to.have.length(1);
  });
});

describe("AgentService.DeleteMyAgent cut short by a crash", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("finishes leaving the agent's groups at the next start", async () => {
    server = await startTestServer();
    const owner = await signInWithCode(server, "json");
    const [a, b] = [await signInWithCode(server, "json"), await signInWithCode(server, "json")];
    await befriend(server, owner, a);
    await befriend(server, owner, b);
    const created = await client(server, AgentService, "json", owner.accessToken).createAgent({ username: uniqueName(), name: "Crashy" });
    const agentId = created.profile!.user!.userId;
    const groups = client(server, GroupService, "json", owner.accessToken);
    const { group } = await groups.createGroup({ name: "G", memberIds: [a.userId, b.userId, agentId] });
    const dataDir = server.dataDir;
    await server.stop();
    // What a crash right after the status write leaves behind.
    const store = await openServerStore(server);
    await store.agents.updateAgent(agentId, { status: 2, updatedAt: Date.now() });
    expect(await store.agents.listDeletedInGroups(10)).to.deep.equal([agentId]);
    await store.close();

    server = await startTestServer({ dataDir });
    const relogged = owner; // sessions survive the restart
    const deadline = Date.now() + 10_000;
    let members: number[] = [];
    const leftMessage = async () =>
      (await client(server, MessageService, "json", relogged.accessToken).getMessageHistory({ conversationId: BigInt(group!.groupId), limit: 10 })).messages.find(
        (m) => m.body?.content.case === "group" && m.body.content.value.event.case === "memberLeft",
      );
    // The repair runs in the background after start-up; its MemberLeft message is posted after the member row goes.
    while (Date.now() < deadline) {
      members = (await client(server, GroupService, "json", relogged.accessToken).getGroupInfo({ groupId: group!.groupId })).members.map((m) => m.userId);
      if (!members.includes(agentId) && (await leftMessage())) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(members.sort()).to.deep.equal([owner.userId, a.userId, b.userId].sort());
    const left = await leftMessage();
    expect(left?.body?.content.case === "group" && left.body.content.value.event.case === "memberLeft" && left.body.content.value.event.value.member?.userId).to.equal(agentId);
  });
});
