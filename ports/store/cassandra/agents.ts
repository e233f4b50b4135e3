// Agents (DATA-MODEL.md §5.7): the `agents` row is the truth; the token lookup, the by-creator list,
// the directory of listed agents and the markers of deleted agents are index rows written with it
// and validated against it on read.
//
// Every change of an agents row is a lightweight transaction conditioned on the `updated_at` it was
// computed from (every write moves it forward, so it versions the row): of two writers of one
// agent, on any nodes, one applies and the other re-reads, so no change overwrites another it did
// not see and a caller's condition (AgentCondition) holds at the moment of the write. The index
// rows live in other partitions: the ones a reader needs from the write on (the new token's lookup,
// the marker of a deletion) are written before the LWT, the others after it; all are validated
// against the row on read, so one left behind by a failed or refused write is harmless. Events
// wait tentatively for the LWT (DATA-MODEL.md §1.6 P4), guarded by the version and status written.
import cassandra from "cassandra-driver";
import {
  AccountType,
  AgentChangeRefused,
  AgentStatus,
  GroupStatus,
  meetsAgentCondition,
  nextAgentVersion,
  type AgentChange,
  type AgentRecord,
  type AgentStore,
  type EventsOf,
  type FanOutRecord,
  type UserRecord,
} from "../store.js";
import { directoryBuckets, directoryStatement, isListed, randomSlice } from "./agent-directory.js";
import type { CassandraContext } from "./context.js";
import { isUnknownLwtOutcome, numberOf, type Cql, type Row, type Statement } from "./cql.js";
import { confirmStatement, discardStatement, tentativeEvents } from "./tentative-outbox.js";
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

/**
 * How many times a change without a condition re-reads and tries again when other writers of the
 * agent keep getting in first; far more than any real contention (a few changes of one agent at once).
 */
const maxUnconditionedAttempts = 20;

/**
 * The guard of a change's tentative events: the agent, the version the change wrote and its status.
 * Versions are not unique to one writer (two writers of one version compute the same next one, and
 * one of them is refused), so a settle finding that version or a later one with that status
 * confirms; the only change that records events is a deletion, which is final, so a writer refused
 * that died before discarding its events can at worst repeat a deletion's events, never report a
 * change that did not happen.
 */
const changeGuard = (agent: Pick<AgentRecord, "agentUserId" | "updatedAt" | "status">) => `agent:${agent.agentUserId}:${agent.updatedAt}:${agent.status}`;
const changeGuardPattern = /^agent:(\d+):(\d+):(\d+)$/;

/** Whether a tentative fan-out's guard is an agent change's (settleAgentChange settles it). */
export const isAgentChangeGuard = (guard: string) => changeGuardPattern.test(guard);

/**
 * Settles a tentative fan-out of an agent change (the outbox reader calls it for rows older than
 * tentativeSettleAfterMs, tentative-outbox.ts): confirms it when the row, read at LOCAL_SERIAL (an
 * LWT still in flight is settled first), has the guard's version or a later one and its status,
 * otherwise deletes it. The index rows a writer that died after its LWT left unwritten are set right
 * by the agent's next change (they are validated on read meanwhile). Answers whether it confirmed.
 */
export async function settleAgentChange(cql: Cql, fanOut: Pick<FanOutRecord, "scope" | "fanOutId">, guard: string): Promise<boolean> {
  const parts = changeGuardPattern.exec(guard);
  if (!parts) throw new Error(`not the guard of an agent change: ${guard}`);
  const row = await cql.row("SELECT status, updated_at FROM agents WHERE agent_user_id = ?", [Number(parts[1])], { serial: true });
  const happened = row !== undefined && numberOf(row.updated_at) >= Number(parts[2]) && row.status === Number(parts[3]);
  const settled = happened ? confirmStatement(fanOut) : discardStatement(fanOut);
  await cql.write(settled.query, settled.params);
  return happened;
}

export interface AgentStoreOptions {
  /** The wall clock of username claims (tests age them without waiting). */
  now?: () => number;
  random?: () => number;
}

export function agentStore(ctx: CassandraContext, options: AgentStoreOptions = {}): AgentStore {
  const { cql } = ctx;
  const claims = new UniqueClaims(cql, options.now);
  const random = options.random ?? Math.random;

  /** The agent row; `serial` also sees (and settles) an LWT still in flight. */
  const readAgent = async (agentUserId: number, serial = false) => {
    const row = await cql.row("SELECT * FROM agents WHERE agent_user_id = ?", [agentUserId], { serial });
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
          // The claim stays while the existing account names this username: "own", or a concurrent
          // creation of the same reserved account (two engines starting at once) whose claim this
          // one restamped while its account row was not written yet.
          if (claimed === "claimed" && inserted.row?.username !== account.username) await claims.release("username", account.username, userId);
          throw new Error(`the account ${userId} exists already`);
        }
        await cql.batch(rows);
      } else {
        await cql.batch([userInsert(user), ...rows]);
      }
      return { user, agent };
    },

    getAgent: (agentUserId) => readAgent(agentUserId),

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
          const agents = await Promise.all(ids.filter((id) => !found.has(id)).map((id) => readAgent(id)));
          for (const agent of agents) if (agent && isListed(agent)) found.set(agent.agentUserId, agent);
        }
      }
      return shuffled([...found.values()], random).slice(0, limit);
    },

    async updateAgent(agentUserId, change, events, condition) {
      // A refusal re-reads at LOCAL_SERIAL: the LWT that got in first may not be visible at LOCAL_QUORUM yet.
      for (let attempt = 1; ; attempt++) {
        const [before, user] = await Promise.all([readAgent(agentUserId, attempt > 1), readUser(ctx, agentUserId)]);
        if (!before || !user) throw new Error(`agent ${agentUserId} does not exist`);
        if (condition && !meetsAgentCondition(before, condition)) throw new AgentChangeRefused(agentUserId, before);
        const written = await writeOver(before, user, change, events);
        if (written) return written;
        // Another writer changed the row since it was read; the caller's condition decides on the next read.
        if (!condition && attempt >= maxUnconditionedAttempts) throw new Error(`agent ${agentUserId}: gave up after ${attempt} writers got in first`);
      }
    },
  };

  /**
   * Writes the change over the row `before` in one LWT conditioned on its version, with the index
   * rows and the events. Answers the record written, or undefined when another write got in first
   * (nothing written, the events discarded).
   */
  async function writeOver(before: AgentRecord, user: UserRecord, change: AgentChange, events: EventsOf<AgentRecord> | undefined): Promise<AgentRecord | undefined> {
    const agentUserId = before.agentUserId;
    const given = (Object.keys(change) as (keyof AgentChange)[]).filter((field) => change[field] !== undefined && field in columnsOf && field !== "updatedAt");
    const after: AgentRecord = { ...before, updatedAt: nextAgentVersion(before.updatedAt, change.updatedAt) };
    const assignments: [string, unknown][] = [];
    for (const field of given) {
      (after as unknown as Record<string, unknown>)[field] = change[field];
      assignments.push(...(columnsOf[field] as (value: unknown) => [string, unknown][])(change[field]));
    }
    assignments.push(...columnsOf.updatedAt(after.updatedAt));

    // Asked once, for the change as it will be written: a refusal is thrown, not answered, so it records no events.
    let asked = false;
    const once: EventsOf<AgentRecord> | undefined = events && ((result) => (asked ? [] : ((asked = true), events(result))));
    const decided = await tentativeEvents(cql, after, once, changeGuard(after));
    const ahead: Statement[] = [...decided.tentative];
    if (after.tokenHash !== before.tokenHash) ahead.push(tokenLookup(after.tokenHash, agentUserId));
    if (after.status === AgentStatus.deleted) ahead.push(deletedMarker(agentUserId));
    await cql.batch(ahead);

    const applied = await cql
      .lwt(`UPDATE agents SET ${assignments.map(([column]) => `${column} = ?`).join(", ")} WHERE agent_user_id = ? IF updated_at = ?`, [
        ...assignments.map(([, value]) => value),
        agentUserId,
        BigInt(before.updatedAt),
      ])
      .then(
        (outcome) => outcome.applied,
        // An LWT whose outcome is unknown (a CAS timeout) is learnt at LOCAL_SERIAL, which settles it if still in flight.
        async (err: unknown) => {
          if (!isUnknownLwtOutcome(err)) throw err;
          const now = await readAgent(agentUserId, true);
          return now !== undefined && now.updatedAt === after.updatedAt && given.every((field) => JSON.stringify(now[field]) === JSON.stringify(after[field]));
        },
      );
    if (!applied) {
      const undo = await decided.refuse(after);
      if (after.tokenHash !== before.tokenHash) undo.push({ query: "DELETE FROM agents_by_token WHERE token_hash = ?", params: [after.tokenHash] });
      await cql.batch(undo);
      return undefined;
    }
    const behind: Statement[] = [...decided.confirm()];
    if (after.tokenHash !== before.tokenHash) behind.push({ query: "DELETE FROM agents_by_token WHERE token_hash = ?", params: [before.tokenHash] });
    // Rewritten on every change, so a directory row left wrong by an earlier race is set right.
    behind.push(directoryStatement(agentUserId, isListed(after), user));
    await cql.batch(behind);
    return after;
  }
}

function shuffled<T>(items: T[], random: () => number): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy;
}
