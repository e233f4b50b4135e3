// Agents (DATA-MODEL.md §5.7): the `agents` row is the truth; the token lookup, the by-creator list,
// the directory of listed agents and the markers of deleted agents are index rows written with it
// and validated against it on read.
import cassandra from "cassandra-driver";
import { AccountType, AgentStatus, GroupStatus, type AgentRecord, type AgentStore, type UserRecord } from "../store.js";
import { directoryBuckets, directoryStatement, isListed, randomSlice } from "./agent-directory.js";
import type { CassandraContext } from "./context.js";
import { numberOf, type Row, type Statement } from "./cql.js";
import { commitWithEvents } from "./outbox-rows.js";
import { UniqueClaims } from "./unique-claims.js";
import { readUser, userInsert } from "./users.js";

const { Tuple } = cassandra.types;

const toAgent = (row: Row): AgentRecord => ({
  agentUserId: row.agent_user_id as number,
  creatorId: row.creator_id as number,
  status: row.status as number,
  visibility: row.visibility as number,
  isSystem: row.is_system === true,
  tokenHash: row.token_hash as string,
  tokenPrefix: row.token_prefix as string,
  secretKey: row.secret_key as string,
  deliveryMode: row.delivery_mode as number,
  webhookUrl: (row.webhook_url as string | null) ?? "",
  ipWhitelist: (row.ip_whitelist as string[] | null) ?? [],
  commands: ((row.commands as InstanceType<typeof Tuple>[] | null) ?? []).map((tuple) => ({ command: tuple.get(0) as string, description: tuple.get(1) as string })),
  miniApp: {
    enabled: row.mini_app_enabled === true,
    url: (row.mini_app_url as string | null) ?? "",
    allowedOrigins: (row.mini_app_origins as string[] | null) ?? [],
    permissions: (row.mini_app_permissions as number | null) ?? 0,
  },
  createdAt: numberOf(row.created_at),
  updatedAt: numberOf(row.updated_at),
});

type AgentChange = Parameters<AgentStore["updateAgent"]>[1];

/** Each changeable field as the columns it writes. */
const columnsOf: { [Field in keyof Required<AgentChange>]: (value: Required<AgentChange>[Field]) => [string, unknown][] } = {
  status: (v) => [["status", v]],
  visibility: (v) => [["visibility", v]],
  isSystem: (v) => [["is_system", v]],
  tokenHash: (v) => [["token_hash", v]],
  tokenPrefix: (v) => [["token_prefix", v]],
  secretKey: (v) => [["secret_key", v]],
  deliveryMode: (v) => [["delivery_mode", v]],
  webhookUrl: (v) => [["webhook_url", v]],
  ipWhitelist: (v) => [["ip_whitelist", v]],
  commands: (v) => [["commands", v.map((c) => new Tuple(c.command, c.description))]],
  miniApp: (v) => [
    ["mini_app_enabled", v.enabled],
    ["mini_app_url", v.url],
    ["mini_app_origins", v.allowedOrigins],
    ["mini_app_permissions", v.permissions],
  ],
  updatedAt: (v) => [["updated_at", BigInt(v)]],
};

function agentInsert(agent: AgentRecord): Statement {
  const columns: [string, unknown][] = [
    ["agent_user_id", agent.agentUserId],
    ["creator_id", agent.creatorId],
    ["status", agent.status],
    ["visibility", agent.visibility],
    ["is_system", agent.isSystem],
    ["token_hash", agent.tokenHash],
    ["token_prefix", agent.tokenPrefix],
    ["secret_key", agent.secretKey],
    ["delivery_mode", agent.deliveryMode],
    ["webhook_url", agent.webhookUrl],
    ...columnsOf.ipWhitelist(agent.ipWhitelist),
    ...columnsOf.commands(agent.commands),
    ...columnsOf.miniApp(agent.miniApp),
    ["created_at", BigInt(agent.createdAt)],
    ["updated_at", BigInt(agent.updatedAt)],
  ];
  return {
    query: `INSERT INTO agents (${columns.map(([column]) => column).join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`,
    params: columns.map(([, value]) => value),
  };
}

const tokenLookup = (tokenHash: string, agentUserId: number): Statement => ({
  query: "INSERT INTO agents_by_token (token_hash, agent_user_id) VALUES (?, ?)",
  params: [tokenHash, agentUserId],
});

/** Deleted agents are found again (listDeletedInGroups) through these markers, spread like the directory. */
const deletedMarker = (agentUserId: number): Statement => ({
  query: "INSERT INTO deleted_agents_in_groups (bucket, agent_user_id) VALUES (?, ?)",
  params: [agentUserId % directoryBuckets, agentUserId],
});

export interface AgentStoreOptions {
  /** The wall clock of username claims (tests age them without waiting). */
  now?: () => number;
  random?: () => number;
}

export function agentStore(ctx: CassandraContext, options: AgentStoreOptions = {}): AgentStore {
  const { cql } = ctx;
  const claims = new UniqueClaims(cql, options.now);
  const random = options.random ?? Math.random;

  const readAgent = async (agentUserId: number) => {
    const row = await cql.row("SELECT * FROM agents WHERE agent_user_id = ?", [agentUserId]);
    return row && row.creator_id !== null ? toAgent(row) : undefined;
  };

  /** Whether the agent is a member of a NORMAL group: its groups by the reverse index, each confirmed by its member row. */
  async function inNormalGroup(agentUserId: number): Promise<boolean> {
    const groups = await cql.rows("SELECT group_id FROM groups_of_user WHERE user_id = ?", [agentUserId]);
    const normal = await Promise.all(
      groups.map(async (row) => {
        const [group, member] = await Promise.all([
          cql.row("SELECT status FROM groups WHERE group_id = ?", [row.group_id]),
          cql.row("SELECT user_id FROM group_members WHERE group_id = ? AND user_id = ?", [row.group_id, agentUserId]),
        ]);
        return group?.status === GroupStatus.normal && member !== undefined;
      }),
    );
    return normal.includes(true);
  }

  return {
    async createAgent(account, agentFields) {
      const reserved = account.userId !== undefined;
      const userId = account.userId ?? (await ctx.ids.user.take());
      const giveBackId = () => {
        if (!reserved) ctx.ids.user.giveBack(userId);
      };
      // A claim that fails with an unknown outcome keeps its id taken; the claim ages out as an orphan.
      const claimed = await claims.claim("username", account.username, userId);
      if (claimed === "refused") {
        giveBackId();
        throw new Error(`the username ${account.username} is taken`);
      }
      if (claimed === "own" && !reserved) throw new Error(`the account ${userId} exists already`);
      const user: UserRecord = {
        userId,
        accountType: AccountType.agent,
        username: account.username,
        usernameCustom: true,
        phone: null,
        email: null,
        nickname: account.nickname,
        avatarUrl: "",
        signature: account.signature,
        passwordHash: null,
        createdAt: account.createdAt,
      };
      const agent: AgentRecord = { ...agentFields, agentUserId: userId };
      const rows: Statement[] = [
        agentInsert(agent),
        tokenLookup(agent.tokenHash, userId),
        { query: "INSERT INTO agents_by_creator (creator_id, created_at, agent_user_id) VALUES (?, ?, ?)", params: [agent.creatorId, BigInt(agent.createdAt), userId] },
      ];
      if (isListed(agent)) rows.push(directoryStatement(userId, true, user));
      if (reserved) {
        // A reserved id is claimed by its account row itself; the id blocks never hand it out.
        const inserted = await cql.lwt(userInsert(user, true).query, userInsert(user, true).params);
        if (!inserted.applied) {
          // "own": the existing account names this username; its claim stays.
          if (claimed === "claimed") await claims.release("username", account.username, userId);
          throw new Error(`the account ${userId} exists already`);
        }
        await cql.batch(rows);
      } else {
        await cql.batch([userInsert(user), ...rows]);
      }
      return { user, agent };
    },

    getAgent: readAgent,

    async findByTokenHash(tokenHash) {
      const lookup = await cql.row("SELECT agent_user_id FROM agents_by_token WHERE token_hash = ?", [tokenHash]);
      if (!lookup) return undefined;
      const agent = await readAgent(lookup.agent_user_id as number);
      return agent?.tokenHash === tokenHash ? agent : undefined;
    },

    async listDeletedInGroups(limit) {
      if (limit <= 0) return [];
      const buckets = await Promise.all(
        Array.from({ length: directoryBuckets }, (_, bucket) => cql.rows("SELECT agent_user_id FROM deleted_agents_in_groups WHERE bucket = ?", [bucket])),
      );
      const marked = buckets
        .flat()
        .map((row) => row.agent_user_id as number)
        .sort((a, b) => a - b);
      const found: number[] = [];
      for (const agentUserId of marked) {
        if (found.length >= limit) break;
        const agent = await readAgent(agentUserId);
        if (agent?.status === AgentStatus.deleted && (await inNormalGroup(agentUserId))) {
          found.push(agentUserId);
        } else {
          // Its repair is done (or never needed): the marker goes. A deleted agent joins no group again
          // and is never made active again, so the marker cannot be needed later.
          await cql.write("DELETE FROM deleted_agents_in_groups WHERE bucket = ? AND agent_user_id = ?", [agentUserId % directoryBuckets, agentUserId]);
        }
      }
      return found;
    },

    async listByCreator(creatorId) {
      const rows = await cql.rows("SELECT agent_user_id FROM agents_by_creator WHERE creator_id = ?", [creatorId]);
      const agents = await Promise.all(rows.map((row) => readAgent(row.agent_user_id as number)));
      return agents.filter((agent): agent is AgentRecord => agent?.creatorId === creatorId);
    },

    async sampleFeatured(limit) {
      if (limit <= 0) return [];
      // Buckets in random order, each read from a random id on and at most a quarter of the sample
      // at first, so one bucket's neighbours do not make up the whole sample; a second pass fills
      // up when few agents are listed. At most four slices per bucket, whatever the directory's size.
      const found = new Map<number, AgentRecord>();
      const share = Math.ceil(limit / 4);
      for (const pass of [share, limit]) {
        for (const bucket of shuffled(Array.from({ length: directoryBuckets }, (_, b) => b), random)) {
          if (found.size >= limit) break;
          const ids = await randomSlice(cql, bucket, Math.min(pass, limit - found.size), random);
          const agents = await Promise.all(ids.filter((id) => !found.has(id)).map(readAgent));
          for (const agent of agents) if (agent && isListed(agent)) found.set(agent.agentUserId, agent);
        }
      }
      return shuffled([...found.values()], random).slice(0, limit);
    },

    async updateAgent(agentUserId, change, events) {
      const [before, user] = await Promise.all([readAgent(agentUserId), readUser(ctx, agentUserId)]);
      if (!before || !user) throw new Error(`agent ${agentUserId} does not exist`);
      const given = (Object.keys(change) as (keyof AgentChange)[]).filter((field) => change[field] !== undefined && field in columnsOf);
      const after: AgentRecord = { ...before };
      const assignments: [string, unknown][] = [];
      for (const field of given) {
        (after as unknown as Record<string, unknown>)[field] = change[field];
        assignments.push(...(columnsOf[field] as (value: unknown) => [string, unknown][])(change[field]));
      }
      const statements: Statement[] = [];
      if (assignments.length > 0) {
        statements.push({
          query: `UPDATE agents SET ${assignments.map(([column]) => `${column} = ?`).join(", ")} WHERE agent_user_id = ?`,
          params: [...assignments.map(([, value]) => value), agentUserId],
        });
      }
      if (after.tokenHash !== before.tokenHash) {
        statements.push(tokenLookup(after.tokenHash, agentUserId), { query: "DELETE FROM agents_by_token WHERE token_hash = ?", params: [before.tokenHash] });
      }
      // Rewritten on every change, so a directory row left wrong by an earlier race is set right.
      statements.push(directoryStatement(agentUserId, isListed(after), user));
      if (after.status === AgentStatus.deleted) statements.push(deletedMarker(agentUserId));
      return commitWithEvents(cql, after, statements, events);
    },
  };
}

function shuffled<T>(items: T[], random: () => number): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy;
}
