import type Database from "better-sqlite3";
import { AccountType, AgentChangeRefused, meetsAgentCondition, nextAgentVersion, noMiniApp, type AgentRecord, type AgentStore, type UserRecord } from "../store.js";
import type { Recorder } from "./outbox.js";

interface AgentRow {
  agent_user_id: number;
  creator_id: number;
  status: number;
  visibility: number;
  is_system: number;
  token_hash: string;
  token_prefix: string;
  secret_key: string;
  delivery_mode: number;
  webhook_url: string;
  ip_whitelist: string;
  commands: string;
  mini_app: string;
  created_at: number;
  updated_at: number;
}

const toAgent = (row: AgentRow): AgentRecord => ({
  agentUserId: row.agent_user_id,
  creatorId: row.creator_id,
  status: row.status,
  visibility: row.visibility,
  isSystem: row.is_system === 1,
  tokenHash: row.token_hash,
  tokenPrefix: row.token_prefix,
  secretKey: row.secret_key,
  deliveryMode: row.delivery_mode,
  webhookUrl: row.webhook_url,
  ipWhitelist: JSON.parse(row.ip_whitelist) as string[],
  commands: JSON.parse(row.commands) as AgentRecord["commands"],
  miniApp: { ...noMiniApp, ...(JSON.parse(row.mini_app) as Partial<AgentRecord["miniApp"]>) },
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const columns: Record<string, [string, (value: never) => unknown]> = {
  status: ["status", (v: number) => v],
  visibility: ["visibility", (v: number) => v],
  isSystem: ["is_system", (v: boolean) => (v ? 1 : 0)],
  tokenHash: ["token_hash", (v: string) => v],
  tokenPrefix: ["token_prefix", (v: string) => v],
  secretKey: ["secret_key", (v: string) => v],
  deliveryMode: ["delivery_mode", (v: number) => v],
  webhookUrl: ["webhook_url", (v: string) => v],
  ipWhitelist: ["ip_whitelist", (v: string[]) => JSON.stringify(v)],
  commands: ["commands", (v: AgentRecord["commands"]) => JSON.stringify(v)],
  miniApp: ["mini_app", (v: AgentRecord["miniApp"]) => JSON.stringify(v)],
  updatedAt: ["updated_at", (v: number) => v],
};

export function agentStore(db: Database.Database, getUser: (userId: number) => UserRecord, record: Recorder): AgentStore {
  // An explicit user_id below the AUTOINCREMENT sequence leaves the sequence where it is.
  const insertUser = db.prepare(
    "INSERT INTO users (user_id, account_type, username, username_custom, nickname, signature, created_at) VALUES (?, ?, ?, 1, ?, ?, ?)",
  );
  const insertAgent = db.prepare(`INSERT INTO agents (agent_user_id, creator_id, status, visibility, is_system, token_hash, token_prefix, secret_key,
    delivery_mode, webhook_url, ip_whitelist, commands, mini_app, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const byId = db.prepare<[number], AgentRow>("SELECT * FROM agents WHERE agent_user_id = ?");
  const byToken = db.prepare<[string], AgentRow>("SELECT * FROM agents WHERE token_hash = ?");
  const featured = db.prepare<[number], AgentRow>("SELECT * FROM agents WHERE status = 1 AND visibility = 1 ORDER BY random() LIMIT ?");
  const deletedInGroups = db.prepare<[number], { agent_user_id: number }>(
    `SELECT DISTINCT a.agent_user_id FROM agents a
     JOIN group_members m ON m.user_id = a.agent_user_id JOIN groups g ON g.group_id = m.group_id AND g.status = 1
     WHERE a.status = 2 ORDER BY a.agent_user_id LIMIT ?`,
  );
  const byCreator = db.prepare<[number], AgentRow>("SELECT * FROM agents WHERE creator_id = ? ORDER BY created_at, agent_user_id");
  const create = db.transaction((user: Parameters<AgentStore["createAgent"]>[0], agent: Parameters<AgentStore["createAgent"]>[1]) => {
    const { lastInsertRowid } = insertUser.run(user.userId ?? null, AccountType.agent, user.username, user.nickname, user.signature, user.createdAt);
    const agentUserId = Number(lastInsertRowid);
    insertAgent.run(
      agentUserId,
      agent.creatorId,
      agent.status,
      agent.visibility,
      agent.isSystem ? 1 : 0,
      agent.tokenHash,
      agent.tokenPrefix,
      agent.secretKey,
      agent.deliveryMode,
      agent.webhookUrl,
      JSON.stringify(agent.ipWhitelist),
      JSON.stringify(agent.commands),
      JSON.stringify(agent.miniApp),
      agent.createdAt,
      agent.updatedAt,
    );
    return { user: getUser(agentUserId), agent: toAgent(byId.get(agentUserId)!) };
  });
  return {
    async createAgent(user, agent) {
      return create(user, agent);
    },
    async getAgent(agentUserId) {
      const row = byId.get(agentUserId);
      return row && toAgent(row);
    },
    async findByTokenHash(tokenHash) {
      const row = byToken.get(tokenHash);
      return row && toAgent(row);
    },
    async sampleFeatured(limit) {
      return featured.all(limit).map(toAgent);
    },
    async listDeletedInGroups(limit) {
      return deletedInGroups.all(limit).map((row) => row.agent_user_id);
    },
    async listByCreator(creatorId) {
      return byCreator.all(creatorId).map(toAgent);
    },
    async updateAgent(agentUserId, change, events, condition) {
      // One transaction reads, checks and writes: SQLite serialises writers across connections, so
      // the condition holds for every process on the database file.
      return record(() => {
        const before = byId.get(agentUserId);
        if (!before) throw new Error(`agent ${agentUserId} does not exist`);
        if (condition && !meetsAgentCondition(toAgent(before), condition)) throw new AgentChangeRefused(agentUserId, toAgent(before));
        const entries = Object.entries({ ...change, updatedAt: nextAgentVersion(before.updated_at, change.updatedAt) }).filter(
          ([key, value]) => value !== undefined && key in columns,
        );
        const assignments = entries.map(([key]) => `${columns[key][0]} = ?`).join(", ");
        const values = entries.map(([key, value]) => columns[key][1](value as never));
        db.prepare(`UPDATE agents SET ${assignments} WHERE agent_user_id = ?`).run(...values, agentUserId);
        return toAgent(byId.get(agentUserId)!);
      }, events);
    },
  };
}
