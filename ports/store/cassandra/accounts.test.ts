// What the conformance suite cannot see of the Cassandra accounts part: claims and rename locks
// left by a process that died, index rows (the agent directory, deleted-agent markers) that
// readers must confirm against the rows they point at, and push tokens read in slices.
import { expect } from "chai";
import { AccountType, AgentStatus, AgentVisibility, DeliveryMode, GroupStatus, type AgentStore } from "../store.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";
import { agentStore } from "./agents.js";
import type { CassandraStore } from "./cassandra-store.js";
import { cassandraContext } from "./context.js";
import { userStore } from "./users.js";

const keyspace = adapterTestKeyspace;
const minute = 60_000;

before(cassandraStarts);

describe("cassandra store: accounts", () => {
  let store: CassandraStore;
  let context: ReturnType<typeof cassandraContext>;
  beforeEach(async () => {
    store = await openTestCassandraStore(keyspace, { fresh: true });
    context = cassandraContext(store.cql);
  });
  afterEach(async () => {
    await context.close();
    await store.close();
  });

  it("reads the push tokens of more users than one IN query takes: each token once, by user, then device", async () => {
    const users = Array.from({ length: 250 }, (_, i) => 20_000 + i);
    await Promise.all(
      users.flatMap((userId) =>
        (userId % 3 === 0 ? ["b", "a"] : userId % 3 === 1 ? ["a"] : []).map((deviceId) =>
          store.pushTokens.upsertPushToken({ userId, deviceId, token: `t-${userId}-${deviceId}`, platform: 1, isSandbox: false, updatedAt: 1 }),
        ),
      ),
    );
    const asked = [...users].reverse().concat(users.slice(0, 10));
    const expected = users.flatMap((userId) => (userId % 3 === 0 ? [`${userId}a`, `${userId}b`] : userId % 3 === 1 ? [`${userId}a`] : []));
    expect((await store.pushTokens.listPushTokensOf(asked)).map((token) => `${token.userId}${token.deviceId}`)).to.deep.equal(expected);
  });

  const newUser = (email: string) => store.users.createUser({ accountType: AccountType.user, email, phone: null, nickname: "n", createdAt: 1000 });
  const newAgent = (agents: AgentStore, username: string, overrides: { status?: number; visibility?: number } = {}) =>
    agents.createAgent(
      { accountType: AccountType.agent, username, nickname: "Bot", signature: "helps", createdAt: 1000 },
      {
        creatorId: 7,
        status: overrides.status ?? AgentStatus.active,
        visibility: overrides.visibility ?? AgentVisibility.public,
        isSystem: false,
        tokenHash: `token-${username}`,
        tokenPrefix: "nxa_",
        secretKey: "nxk_",
        deliveryMode: DeliveryMode.websocket,
        webhookUrl: "",
        ipWhitelist: [],
        commands: [],
        miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
        createdAt: 1000,
        updatedAt: 1000,
      },
    );

  describe("claims", () => {
    it("takes over an email claim whose claimant died only once it is a minute old", async () => {
      const claimedAt = 5 * minute;
      await store.cql.write("INSERT INTO user_emails (email, user_id, claimed_at) VALUES (?, ?, ?)", ["o@x.io", 99_999, BigInt(claimedAt)]);
      let clock = claimedAt + minute / 2;
      const users = userStore(context, { now: () => clock });
      expect(await users.findByEmail("o@x.io")).to.equal(undefined);
      const early = await users.createUser({ accountType: AccountType.user, email: "o@x.io", phone: null, nickname: "n", createdAt: 1 }).catch(() => "refused");
      expect(early).to.equal("refused");
      clock = claimedAt + minute + 1;
      const taken = await users.createUser({ accountType: AccountType.user, email: "o@x.io", phone: null, nickname: "n", createdAt: 1 });
      expect((await users.findByEmail("o@x.io"))?.userId).to.equal(taken.userId);
    });

    it("never takes over a claim whose account names it, however old", async () => {
      const owner = await newUser("kept@x.io");
      const users = userStore(context, { now: () => Date.now() + 24 * 60 * minute });
      const second = await users.createUser({ accountType: AccountType.user, email: "kept@x.io", phone: null, nickname: "n", createdAt: 1 }).catch(() => "refused");
      expect(second).to.equal("refused");
      expect((await users.findByEmail("kept@x.io"))?.userId).to.equal(owner.userId);
      expect(await users.setCustomUsername((await newUser("other@x.io")).userId, `u_${owner.userId}`)).to.equal("taken");
    });

    it("keeps the username claim of an existing account when its creation is repeated", async () => {
      await store.agents.createAgent(
        { accountType: AccountType.agent, username: "system_bot", nickname: "Bot", signature: "", createdAt: 1, userId: 10_000 },
        (await newAgent(store.agents, "template_bot")).agent,
      );
      const again = await store.agents
        .createAgent({ accountType: AccountType.agent, username: "system_bot", nickname: "Bot", signature: "", createdAt: 1, userId: 10_000 }, (await store.agents.getAgent(10_000))!)
        .catch(() => "refused");
      expect(again).to.equal("refused");
      expect((await store.users.findByUsername("system_bot"))?.userId).to.equal(10_000);
    });

    it("keeps the username claim when two nodes create the same reserved account at once", async () => {
      const template = (await newAgent(store.agents, "race_template")).agent;
      const systemAccount = { accountType: AccountType.agent, username: "race_system", nickname: "Bot", signature: "", createdAt: 1, userId: 10_000 };
      // The slower node has its username claim and is held just before its account row's insert.
      let reachedInsert!: () => void;
      const atInsert = new Promise<void>((resolve) => (reachedInsert = resolve));
      let letInsert!: () => void;
      const insertLetThrough = new Promise<void>((resolve) => (letInsert = resolve));
      const heldCql = Object.create(store.cql) as typeof store.cql;
      heldCql.lwt = async (query, params) => {
        if (/^INSERT INTO users /.test(query)) {
          reachedInsert();
          await insertLetThrough;
        }
        return store.cql.lwt(query, params);
      };
      const slower = agentStore({ ...context, cql: heldCql }).createAgent(systemAccount, template).catch(() => "refused");
      await atInsert;
      // The faster node restamps that claim (its account is not written yet) and creates the account.
      await store.agents.createAgent(systemAccount, template);
      letInsert();
      expect(await slower).to.equal("refused");
      expect((await store.users.findByUsername("race_system"))?.userId).to.equal(10_000);
    });

    it("releases the claims of a refused account and takes its id again", async () => {
      const first = await store.users.createUser({ accountType: AccountType.user, email: "p@x.io", phone: "+1555", nickname: "n", createdAt: 1 });
      const refused = await store.users.createUser({ accountType: AccountType.user, email: "q@x.io", phone: "+1555", nickname: "n", createdAt: 1 }).catch(() => "refused");
      expect(refused).to.equal("refused");
      expect(await store.cql.row("SELECT user_id FROM user_emails WHERE email = ?", ["q@x.io"])).to.equal(undefined);
      expect((await store.users.createUser({ accountType: AccountType.user, email: "q@x.io", phone: null, nickname: "n", createdAt: 1 })).userId).to.equal(first.userId + 1);
    });

    it("takes over a rename lock whose holder died once it is a minute old, and waits for a live one", async () => {
      const user = await newUser("r@x.io");
      const lockedAt = Date.now();
      await store.cql.write("UPDATE users SET username_pending = ?, username_pending_at = ? WHERE user_id = ?", ["dead", BigInt(lockedAt), user.userId]);
      const later = userStore(context, { now: () => lockedAt + minute + 1 });
      expect(await later.setCustomUsername(user.userId, "after_dead")).to.equal("ok");

      const other = await newUser("s@x.io");
      await store.cql.write("UPDATE users SET username_pending = ?, username_pending_at = ? WHERE user_id = ?", ["live", BigInt(Date.now()), other.userId]);
      const users = userStore(context, { renamePollMs: 5 });
      const renaming = users.setCustomUsername(other.userId, "after_live");
      // The live holder finishes (here: gives up) and lets the waiting rename through.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect((await store.users.getUser(other.userId))?.usernameCustom).to.equal(false);
      await store.cql.write("UPDATE users SET username_pending = null, username_pending_at = null WHERE user_id = ?", [other.userId]);
      expect(await renaming).to.equal("ok");
      expect((await store.users.findByUsername("after_live"))?.userId).to.equal(other.userId);
      expect(await store.users.findByUsername(`u_${other.userId}`)).to.equal(undefined);
    });
  });

  describe("agent indexes", () => {
    it("answers only agents whose rows confirm their directory row", async () => {
      const shown = (await newAgent(store.agents, "shown_bot")).agent.agentUserId;
      const hidden = (await newAgent(store.agents, "hidden_bot", { visibility: AgentVisibility.private })).agent.agentUserId;
      // A row the directory should not have (as a race between two writers could leave).
      await store.cql.write("INSERT INTO agent_directory (bucket, agent_user_id, nickname_lc, username, signature_lc) VALUES (?, ?, ?, ?, ?)", [
        hidden % 16,
        hidden,
        "bot",
        "hidden_bot",
        "helps",
      ]);
      expect((await store.users.searchAgents("bot", 10)).map((u) => u.userId)).to.deep.equal([shown]);
      expect((await store.agents.sampleFeatured(10)).map((a) => a.agentUserId)).to.deep.equal([shown]);
    });

    it("samples at random from many listed agents", async () => {
      const listed = new Set<number>();
      for (let i = 0; i < 40; i++) listed.add((await newAgent(store.agents, `many_${i}`)).agent.agentUserId);
      const seeded = (seed: number) => () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
      const [one, two] = await Promise.all([agentStore(context, { random: seeded(1) }).sampleFeatured(5), agentStore(context, { random: seeded(2) }).sampleFeatured(5)]);
      for (const sample of [one, two]) {
        expect(sample).to.have.length(5);
        expect(new Set(sample.map((a) => a.agentUserId)).size).to.equal(5);
        for (const agent of sample) expect(listed.has(agent.agentUserId)).to.equal(true);
      }
      expect(one.map((a) => a.agentUserId)).to.not.deep.equal(two.map((a) => a.agentUserId));
    });

    it("lists deleted agents still in a normal group, and forgets the markers of those in none", async () => {
      const ids = [];
      for (const name of ["in_normal", "in_dissolved", "index_only", "active_member", "in_normal_too"]) ids.push((await newAgent(store.agents, name)).agent.agentUserId);
      const [inNormal, inDissolved, indexOnly, activeMember, inNormalToo] = ids;
      const join = async (groupId: number, status: number, userId: number, memberRow = true) => {
        await store.cql.write("INSERT INTO groups (group_id, name, status) VALUES (?, ?, ?)", [groupId, `g${groupId}`, status]);
        await store.cql.write("INSERT INTO groups_of_user (user_id, group_id) VALUES (?, ?)", [userId, groupId]);
        if (memberRow) await store.cql.write("INSERT INTO group_members (group_id, user_id, role) VALUES (?, ?, 2)", [groupId, userId]);
      };
      await join(1, GroupStatus.normal, inNormal);
      await join(2, GroupStatus.dissolved, inDissolved);
      await join(1, GroupStatus.normal, indexOnly, false);
      await join(1, GroupStatus.normal, activeMember);
      await join(3, GroupStatus.dissolved, inNormalToo);
      await join(1, GroupStatus.normal, inNormalToo);
      for (const agentUserId of [inNormal, inDissolved, indexOnly, inNormalToo]) await store.agents.updateAgent(agentUserId, { status: AgentStatus.deleted });
      expect(await store.agents.listDeletedInGroups(10)).to.deep.equal([inNormal, inNormalToo]);
      expect(await store.agents.listDeletedInGroups(1)).to.deep.equal([inNormal]);
      const markers = await Promise.all(ids.map((id) => store.cql.row("SELECT agent_user_id FROM deleted_agents_in_groups WHERE bucket = ? AND agent_user_id = ?", [id % 16, id])));
      expect(markers.map((row) => row !== undefined)).to.deep.equal([true, false, false, false, true]);
    });
  });
});

