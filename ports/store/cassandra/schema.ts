// Versioned schema of the Cassandra/ScyllaDB store (DATA-MODEL.md lists each table with its queries).
// Migrations are append-only; every statement is idempotent, so one cut short is simply run again.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { keyspaceNameProblem } from "../../../shared/config.js";
import type { Cql } from "./cql.js";

export interface CassandraMigration {
  version: number;
  statements: readonly string[];
}

/** Queue-like tables whose deleted rows are harmless if resurrected: their tombstones go quickly (§2). */
const queueTable = "gc_grace_seconds = 10800 AND compaction = {'class': 'SizeTieredCompactionStrategy', 'unchecked_tombstone_compaction': 'true'}";

export const cassandraMigrations: readonly CassandraMigration[] = [
  {
    version: 1,
    statements: [
      // Ownership and id allocation (§3, §4).
      `CREATE TABLE IF NOT EXISTS leases (shard int PRIMARY KEY, node text, instance text, epoch int, expires_at bigint)`,
      `CREATE TABLE IF NOT EXISTS id_blocks (sequence text PRIMARY KEY, next_free int)`,
      // Sweeps without scans (§6.4): which queue partitions may hold work, by kind, slot and hour.
      `CREATE TABLE IF NOT EXISTS sweep_index (kind text, slot int, hour int, item text, PRIMARY KEY ((kind, slot, hour), item)) WITH ${queueTable}`,
      `CREATE TABLE IF NOT EXISTS sweep_marks (kind text, slot int, hour int, PRIMARY KEY ((kind), slot))`,

      // Users, sessions, push tokens (§5.1, §5.2).
      `CREATE TABLE IF NOT EXISTS users (user_id int PRIMARY KEY, account_type tinyint, username text, username_custom boolean,
        phone text, email text, nickname text, avatar_url text, signature text, password_hash text, created_at bigint,
        username_pending text, username_pending_at bigint)`,
      `CREATE TABLE IF NOT EXISTS usernames (username text PRIMARY KEY, user_id int, claimed_at bigint)`,
      `CREATE TABLE IF NOT EXISTS user_emails (email text PRIMARY KEY, user_id int, claimed_at bigint)`,
      `CREATE TABLE IF NOT EXISTS user_phones (phone text PRIMARY KEY, user_id int, claimed_at bigint)`,
      `CREATE TABLE IF NOT EXISTS sessions (user_id int, device_id text, device_type int, device_name text, device_model text,
        os_version text, app_version text, login_ip text, login_at bigint, last_active_at bigint,
        access_token_hash text, access_expires_at bigint, refresh_token_hash text, refresh_expires_at bigint,
        PRIMARY KEY ((user_id), device_id))`,
      `CREATE TABLE IF NOT EXISTS sessions_by_access (access_token_hash text PRIMARY KEY, user_id int, device_id text)`,
      `CREATE TABLE IF NOT EXISTS sessions_by_refresh (refresh_token_hash text PRIMARY KEY, user_id int, device_id text)`,
      `CREATE TABLE IF NOT EXISTS push_tokens (user_id int, device_id text, push_token text, platform int, is_sandbox boolean, updated_at bigint,
        PRIMARY KEY ((user_id), device_id))`,

      // Conversations: the head partition, per-user state and list order (§5.3, §6.1).
      `CREATE TABLE IF NOT EXISTS conversations (conversation_id bigint, system_message_id bigint,
        type tinyint STATIC, created_at bigint STATIC, last_message_id bigint STATIC, last_message_time bigint STATIC,
        latest_message_id bigint STATIC, owner_epoch int STATIC, pending_write blob STATIC,
        body blob, extra_recipients list<int>, recorded_at bigint,
        PRIMARY KEY ((conversation_id), system_message_id))`,
      `CREATE TABLE IF NOT EXISTS conversation_outbox (conversation_id bigint, fan_out_id bigint,
        recipients list<int>, entry blob, related text, created_at bigint,
        PRIMARY KEY ((conversation_id), fan_out_id)) WITH ${queueTable}`,
      `CREATE TABLE IF NOT EXISTS open_streams (conversation_id bigint, message_id bigint, sender_id int, started_at bigint,
        PRIMARY KEY ((conversation_id), message_id)) WITH ${queueTable}`,
      `CREATE TABLE IF NOT EXISTS user_conversations (user_id int, conversation_id bigint,
        is_muted boolean, hidden_through bigint, last_read_message_id bigint, cleared_up_to bigint,
        PRIMARY KEY ((user_id), conversation_id))`,
      `CREATE TABLE IF NOT EXISTS conversation_mutes (conversation_id bigint, user_id int, PRIMARY KEY ((conversation_id), user_id))`,
      `CREATE TABLE IF NOT EXISTS conversation_order (user_id int, order_minute int, conversation_id bigint,
        PRIMARY KEY ((user_id), order_minute, conversation_id))
        WITH CLUSTERING ORDER BY (order_minute DESC, conversation_id DESC) AND ${queueTable}`,

      // Update streams (§5.4).
      // holders: the (user, sn) stream entries that reference the event; it goes when none is left.
      `CREATE TABLE IF NOT EXISTS update_events (event_id bigint PRIMARY KEY, entry blob, created_at bigint, holders set<frozen<tuple<int, int>>>)`,
      `CREATE TABLE IF NOT EXISTS stream_entries (user_id int, first_sn int, sn int, event_id bigint,
        latest_sn int STATIC, owner_epoch int STATIC, sealed boolean STATIC, pending_handoffs blob STATIC,
        PRIMARY KEY ((user_id, first_sn), sn))`,
      `CREATE TABLE IF NOT EXISTS stream_buckets (user_id int, first_sn int, PRIMARY KEY ((user_id), first_sn))
        WITH CLUSTERING ORDER BY (first_sn DESC)`,

      // Account-scope outbox (§5.5).
      `CREATE TABLE IF NOT EXISTS account_outbox (scope text, fan_out_id bigint, recipients list<int>, entry blob, related text,
        created_at bigint, tentative boolean, guard text, PRIMARY KEY ((scope), fan_out_id)) WITH ${queueTable}`,

      // Webhook jobs and agent cursors (§5.6).
      `CREATE TABLE IF NOT EXISTS webhook_jobs (agent_user_id int, job_id bigint, body text, attempts int, next_attempt_at bigint,
        created_at bigint, tail_job_id bigint STATIC, PRIMARY KEY ((agent_user_id), job_id)) WITH ${queueTable}`,
      `CREATE TABLE IF NOT EXISTS agent_cursors (agent_user_id int PRIMARY KEY, delivered_sn int, generation int)`,

      // Agents (§5.7, §6.3).
      `CREATE TABLE IF NOT EXISTS agents (agent_user_id int PRIMARY KEY, creator_id int, status tinyint, visibility tinyint,
        is_system boolean, token_hash text, token_prefix text, secret_key text, delivery_mode tinyint, webhook_url text,
        ip_whitelist list<text>, commands list<frozen<tuple<text, text>>>,
        mini_app_enabled boolean, mini_app_url text, mini_app_origins list<text>, mini_app_permissions int,
        created_at bigint, updated_at bigint)`,
      `CREATE TABLE IF NOT EXISTS agents_by_token (token_hash text PRIMARY KEY, agent_user_id int)`,
      `CREATE TABLE IF NOT EXISTS agents_by_creator (creator_id int, created_at bigint, agent_user_id int,
        PRIMARY KEY ((creator_id), created_at, agent_user_id))`,
      `CREATE TABLE IF NOT EXISTS agent_directory (bucket tinyint, agent_user_id int, nickname_lc text, username text, signature_lc text,
        PRIMARY KEY ((bucket), agent_user_id))`,
      `CREATE TABLE IF NOT EXISTS deleted_agents_in_groups (bucket tinyint, agent_user_id int, PRIMARY KEY ((bucket), agent_user_id))`,

      // Social (§5.8).
      `CREATE TABLE IF NOT EXISTS friend_requests (request_id int PRIMARY KEY, from_user_id int, to_user_id int, message text,
        status tinyint, created_at bigint, handled_at bigint, resolution text)`,
      `CREATE TABLE IF NOT EXISTS pending_requests_to (to_user_id int, created_at bigint, request_id int,
        PRIMARY KEY ((to_user_id), created_at, request_id)) WITH CLUSTERING ORDER BY (created_at DESC, request_id DESC)`,
      `CREATE TABLE IF NOT EXISTS pending_requests_between (low_user_id int, high_user_id int, request_id int,
        PRIMARY KEY ((low_user_id, high_user_id), request_id))`,
      `CREATE TABLE IF NOT EXISTS contacts (owner_id int, contact_id int, alias text, created_at bigint, PRIMARY KEY ((owner_id), contact_id))`,
      `CREATE TABLE IF NOT EXISTS contact_owners (contact_id int, owner_id int, PRIMARY KEY ((contact_id), owner_id))`,
      `CREATE TABLE IF NOT EXISTS blocks (blocker_id int, blocked_id int, blocked_at bigint, PRIMARY KEY ((blocker_id), blocked_id))`,
      `CREATE TABLE IF NOT EXISTS blocks_by_time (blocker_id int, blocked_at bigint, blocked_id int,
        PRIMARY KEY ((blocker_id), blocked_at, blocked_id)) WITH CLUSTERING ORDER BY (blocked_at DESC, blocked_id DESC)`,
      `CREATE TABLE IF NOT EXISTS blocked_by (blocked_id int, blocker_id int, PRIMARY KEY ((blocked_id), blocker_id))`,

      // Groups (§5.9).
      `CREATE TABLE IF NOT EXISTS groups (group_id int PRIMARY KEY, name text, avatar_url text, description text,
        owner_id int, status tinyint, created_at bigint)`,
      `CREATE TABLE IF NOT EXISTS group_members (group_id int, user_id int, role tinyint, joined_at bigint, PRIMARY KEY ((group_id), user_id))`,
      `CREATE TABLE IF NOT EXISTS groups_of_user (user_id int, group_id int, PRIMARY KEY ((user_id), group_id))`,

      // Messages (§5.10).
      `CREATE TABLE IF NOT EXISTS messages (conversation_id bigint, bucket int, message_id bigint,
        sender_id int, client_message_id bigint, body blob, reply_to blob, metadata map<text, text>,
        created_at bigint, updated_at bigint, edited boolean,
        PRIMARY KEY ((conversation_id, bucket), message_id)) WITH CLUSTERING ORDER BY (message_id DESC)`,
      `CREATE TABLE IF NOT EXISTS message_client_ids (conversation_id bigint, sender_id int, client_message_id bigint, message_id bigint,
        PRIMARY KEY ((conversation_id, sender_id, client_message_id)))`,
      `CREATE TABLE IF NOT EXISTS message_deletions (user_id int, conversation_id bigint, message_id bigint,
        PRIMARY KEY ((user_id, conversation_id), message_id)) WITH CLUSTERING ORDER BY (message_id DESC)`,

      // Media (§5.11).
      `CREATE TABLE IF NOT EXISTS media_files (file_id text PRIMARY KEY, owner_id int, purpose int, file_name text, content_type text,
        size bigint, checksum text, width int, height int, duration_ms int, thumbnail_file_id text, created_at bigint)`,
      `CREATE TABLE IF NOT EXISTS upload_sessions (session_id text PRIMARY KEY, owner_id int, file_id text, file_name text,
        content_type text, size bigint, uploaded bigint, created_at bigint, expires_at bigint)`,
      `CREATE TABLE IF NOT EXISTS upload_sessions_by_owner (owner_id int, file_name text, content_type text, size bigint,
        created_at bigint, session_id text, PRIMARY KEY ((owner_id), file_name, content_type, size, created_at, session_id))
        WITH CLUSTERING ORDER BY (file_name ASC, content_type ASC, size ASC, created_at DESC, session_id DESC)`,
      `CREATE TABLE IF NOT EXISTS server_secrets (name text PRIMARY KEY, value text, created_at bigint)`,
    ],
  },
  {
    version: 2,
    statements: [
      // The staged part each accepted chunk was written to, in order (§5.11): parts are named per
      // attempt, so the session says which attempt at an offset counts.
      `ALTER TABLE upload_sessions ADD IF NOT EXISTS parts list<text>`,
    ],
  },
  {
    version: 3,
    statements: [
      // Stream appends without a Paxos round per recipient (§5.4): an owner's fence revoked by a
      // takeover of its unexpired lease, read by its appends before they answer. A row matters only
      // while the revoked holder may still trust its lease (under a minute): a day is ample.
      `CREATE TABLE IF NOT EXISTS lease_revocations (instance text, shard int, epoch int, PRIMARY KEY ((instance), shard))
        WITH default_time_to_live = 86400 AND ${queueTable}`,
      // Appends are fenced by write timestamps now, not by conditions on these; a build that still
      // writes them fails on their absence instead of racing the new owners.
      `ALTER TABLE stream_entries DROP IF EXISTS owner_epoch`,
      `ALTER TABLE stream_entries DROP IF EXISTS sealed`,
    ],
  },
];

export const cassandraSchemaVersion = cassandraMigrations[cassandraMigrations.length - 1].version;

/** Why `name` cannot be this store's keyspace, or undefined when it can (an unquoted CQL identifier, kept lowercase). */
export interface KeyspaceOptions {
  /** Replication of a keyspace this call creates (a CQL map literal); a single-node server's is SimpleStrategy RF 1. */
  replication?: string;
  /** Apply what is missing (default); false refuses a keyspace behind this build instead (a separate `migrate` command applies it). */
  migrateIfBehind?: boolean;
}

const singleNodeReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}";
/** The lock row lives this long unless its holder renews it, so a runner that died frees it. */
const lockTtlSeconds = 300;
const lockRenewMs = 60_000;
/** How long a runner waits for another one's migrations before giving up. */
const lockWaitMs = 15 * 60_000;
const lockPollMs = 250;
/** How long DDL may take to reach every node (the driver itself waits 10 s first). */
const schemaAgreementWaitMs = 60_000;

/**
 * The store migrations recorded in the keyspace, read without creating anything: undefined when
 * the keyspace or its version table does not exist.
 */
export async function appliedVersions(cql: Cql): Promise<number[] | undefined> {
  const table = await cql.row("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = 'schema_version'", [cql.keyspace]);
  if (!table) return undefined;
  const rows = await cql.rows(`SELECT version FROM ${cql.keyspace}.schema_version WHERE component = 'store'`, [], { serial: true });
  return rows.map((row) => row.version as number);
}

/** The build's migrations the keyspace lacks; refuses a keyspace a newer build migrated. */
function missingMigrations(keyspace: string, applied: readonly number[]): CassandraMigration[] {
  const newest = Math.max(0, ...applied);
  if (newest > cassandraSchemaVersion) {
    throw new Error(`the Cassandra keyspace ${keyspace} has schema version ${newest}, newer than this build's ${cassandraSchemaVersion}: refusing it (run a build that knows it)`);
  }
  return cassandraMigrations.filter((migration) => !applied.includes(migration.version));
}

/**
 * Creates the keyspace when missing and applies the migrations it has not seen, one runner at a
 * time (an LWT lock row that expires if its holder dies, renewed while it works). Refuses a
 * keyspace from a newer build, and with `migrateIfBehind: false` one that lacks migrations (then
 * nothing is created). Leaves the session using the keyspace. Answers the versions it applied.
 */
export async function migrateKeyspace(cql: Cql, options: KeyspaceOptions = {}): Promise<number[]> {
  const problem = keyspaceNameProblem(cql.keyspace);
  if (problem) throw new Error(problem);
  const before = await appliedVersions(cql);
  const missing = missingMigrations(cql.keyspace, before ?? []);
  if (before && missing.length === 0) {
    await cql.useKeyspace();
    return [];
  }
  if (options.migrateIfBehind === false) {
    const lacking = before ? `lacks schema versions ${missing.map((migration) => migration.version).join(", ")} of this build` : "does not exist";
    throw new Error(`the Cassandra keyspace ${cql.keyspace} ${lacking}: run \`npm run store -- migrate\` first`);
  }

  // The keyspace and the version table come before the lock (which lives in that table); both are
  // IF NOT EXISTS, which one coordinator serialises. Several nodes creating one table at once can
  // leave a cluster disagreeing on it, so a new cluster's first migration is one command.
  await applyDdl(cql, `CREATE KEYSPACE IF NOT EXISTS ${cql.keyspace} WITH replication = ${options.replication ?? singleNodeReplication}`);
  await cql.useKeyspace();
  await applyDdl(
    cql,
    `CREATE TABLE IF NOT EXISTS ${cql.keyspace}.schema_version (component text, version int, applied_at bigint, holder text, PRIMARY KEY ((component), version))`,
  );
  const lock = await SchemaLock.take(cql);
  if (!lock) return [];
  try {
    const ran: number[] = [];
    for (const migration of missingMigrations(cql.keyspace, (await appliedVersions(cql)) ?? [])) {
      for (const statement of migration.statements) {
        await lock.keep();
        await applyDdl(cql, statement);
      }
      await cql.write("INSERT INTO schema_version (component, version, applied_at) VALUES ('store', ?, ?)", [migration.version, BigInt(Date.now())]);
      ran.push(migration.version);
    }
    return ran;
  } finally {
    await lock.release();
  }
}

/** Runs one schema change and waits until every node has it, so the next statement may rely on it. */
async function applyDdl(cql: Cql, statement: string): Promise<void> {
  // The driver has both (it waits up to 10 s itself, then tells), but its typings omit them.
  const result = await cql.client.execute(statement);
  if ((result.info as { isSchemaInAgreement?: boolean }).isSchemaInAgreement !== false) return;
  const metadata = cql.client.metadata as unknown as { checkSchemaAgreement(): Promise<boolean> };
  const deadline = Date.now() + schemaAgreementWaitMs;
  while (!(await metadata.checkSchemaAgreement())) {
    if (Date.now() > deadline) throw new Error(`the Cassandra nodes did not agree on the schema within ${schemaAgreementWaitMs / 1000} s after: ${statement.split("(")[0].trim()}`);
    await sleep(500);
  }
}

/** The one-runner-at-a-time lock of a keyspace's migrations: a row of schema_version naming its holder. */
class SchemaLock {
  private renewedAt = Date.now();

  private constructor(
    private readonly cql: Cql,
    private readonly holder: string,
  ) {}

  /** Takes the lock, waiting for another holder; undefined when, meanwhile, another runner applied everything. */
  static async take(cql: Cql): Promise<SchemaLock | undefined> {
    const holder = randomUUID();
    const deadline = Date.now() + lockWaitMs;
    for (;;) {
      const outcome = await cql.lwt(
        `INSERT INTO schema_version (component, version, applied_at, holder) VALUES ('lock', 0, ?, ?) IF NOT EXISTS USING TTL ${lockTtlSeconds}`,
        [BigInt(Date.now()), holder],
      );
      if (outcome.applied) return new SchemaLock(cql, holder);
      if (missingMigrations(cql.keyspace, (await appliedVersions(cql)) ?? []).length === 0) return undefined;
      if (Date.now() > deadline) {
        throw new Error(`another runner (${String(outcome.row?.holder)}) has held the schema lock of ${cql.keyspace} for over ${lockWaitMs / 60_000} min; it is freed ${lockTtlSeconds} s after its holder stops`);
      }
      await sleep(lockPollMs);
    }
  }

  /** Renews the lock when due; throws when it was lost (it expired and another runner took it). */
  async keep(): Promise<void> {
    if (Date.now() - this.renewedAt < lockRenewMs) return;
    const outcome = await this.cql.lwt(`UPDATE schema_version USING TTL ${lockTtlSeconds} SET holder = ? WHERE component = 'lock' AND version = 0 IF holder = ?`, [
      this.holder,
      this.holder,
    ]);
    if (!outcome.applied) throw new Error(`lost the schema lock of ${this.cql.keyspace} (it expired, another runner holds it): run the migration again`);
    this.renewedAt = Date.now();
  }

  /** Frees the lock for the next runner. A failure is not the migration's: the lock expires by itself. */
  async release(): Promise<void> {
    await this.cql.lwt("DELETE FROM schema_version WHERE component = 'lock' AND version = 0 IF holder = ?", [this.holder]).catch(() => undefined);
  }
}
