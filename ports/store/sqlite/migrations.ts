// Versioned schema migrations, applied in order and tracked in PRAGMA user_version.
// Append only: a released migration is never edited; later issues add version 2, 3, …
import type Database from "better-sqlite3";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { SnUpdateSchema } from "../../../shared/gen/shared/v1/updates_pb.js";
import { messageBodyToUpstream, snUpdateToUpstream } from "./upstream-numbering.js";

export interface Migration {
  version: number;
  /** SQL to run. */
  up?: string;
  /** A step SQL alone cannot do, run in the same transaction after `up`. */
  run?: (db: Database.Database) => void;
}

/** Rewrites one BLOB column of a table row by row, walking the table by its key in batches. */
function rewriteColumn(db: Database.Database, table: string, key: readonly string[], column: string, rewrite: (bytes: Uint8Array) => Uint8Array): void {
  const keyList = key.join(", ");
  const after = key.length === 1 ? `${key[0]} > ?` : `(${keyList}) > (${key.map(() => "?").join(", ")})`;
  const first = db.prepare(`SELECT ${keyList}, ${column} AS bytes FROM ${table} ORDER BY ${keyList} LIMIT 500`).safeIntegers(true);
  const next = db.prepare(`SELECT ${keyList}, ${column} AS bytes FROM ${table} WHERE ${after} ORDER BY ${keyList} LIMIT 500`).safeIntegers(true);
  const update = db.prepare(`UPDATE ${table} SET ${column} = ? WHERE ${key.map((name) => `${name} = ?`).join(" AND ")}`);
  let rows = first.all() as Record<string, unknown>[];
  while (rows.length > 0) {
    for (const row of rows) update.run(Buffer.from(rewrite(new Uint8Array(row.bytes as Buffer))), ...key.map((name) => row[name]));
    const last = rows[rows.length - 1];
    rows = next.all(...key.map((name) => last[name])) as Record<string, unknown>[];
  }
}

/** An SnUpdate's bytes without its sn (the stream entry holding it carries the sn). */
function withoutSn(bytes: Uint8Array): Uint8Array {
  const update = fromBinary(SnUpdateSchema, bytes);
  update.sn = 0;
  return toBinary(SnUpdateSchema, update);
}

/** User ids start here, leaving room below for reserved accounts. */
export const firstUserId = 10001;

export const migrations: readonly Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE users (
        user_id INTEGER PRIMARY KEY AUTOINCREMENT,
        account_type INTEGER NOT NULL,
        username TEXT NOT NULL UNIQUE,
        username_custom INTEGER NOT NULL DEFAULT 0,
        phone TEXT UNIQUE,
        email TEXT UNIQUE,
        nickname TEXT NOT NULL DEFAULT '',
        avatar_url TEXT NOT NULL DEFAULT '',
        signature TEXT NOT NULL DEFAULT '',
        password_hash TEXT,
        created_at INTEGER NOT NULL
      );
      INSERT INTO sqlite_sequence (name, seq) VALUES ('users', ${firstUserId - 1});

      CREATE TABLE sessions (
        user_id INTEGER NOT NULL REFERENCES users (user_id),
        device_id TEXT NOT NULL,
        device_type INTEGER NOT NULL,
        device_name TEXT NOT NULL,
        device_model TEXT NOT NULL,
        os_version TEXT NOT NULL,
        app_version TEXT NOT NULL,
        login_ip TEXT NOT NULL,
        login_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        access_token_hash TEXT NOT NULL UNIQUE,
        access_expires_at INTEGER NOT NULL,
        refresh_token_hash TEXT NOT NULL UNIQUE,
        refresh_expires_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, device_id)
      ) WITHOUT ROWID;

      CREATE TABLE push_tokens (
        user_id INTEGER NOT NULL,
        device_id TEXT NOT NULL,
        token TEXT NOT NULL,
        platform INTEGER NOT NULL,
        is_sandbox INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, device_id)
      ) WITHOUT ROWID;

      CREATE TABLE updates (
        user_id INTEGER NOT NULL,
        sn INTEGER NOT NULL,
        payload BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, sn)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    up: `
      CREATE TABLE friend_requests (
        request_id INTEGER PRIMARY KEY AUTOINCREMENT,
        from_user_id INTEGER NOT NULL,
        to_user_id INTEGER NOT NULL,
        message TEXT NOT NULL,
        status INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        handled_at INTEGER
      );
      CREATE INDEX friend_requests_inbox ON friend_requests (to_user_id, status, created_at DESC);
      CREATE INDEX friend_requests_pair ON friend_requests (from_user_id, to_user_id, status);

      CREATE TABLE contacts (
        owner_id INTEGER NOT NULL,
        contact_id INTEGER NOT NULL,
        alias TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (owner_id, contact_id)
      ) WITHOUT ROWID;

      CREATE TABLE blocks (
        blocker_id INTEGER NOT NULL,
        blocked_id INTEGER NOT NULL,
        blocked_at INTEGER NOT NULL,
        PRIMARY KEY (blocker_id, blocked_id)
      ) WITHOUT ROWID;
      CREATE INDEX blocks_by_time ON blocks (blocker_id, blocked_at DESC);

      CREATE TABLE conversations (
        conversation_id INTEGER PRIMARY KEY,
        type INTEGER NOT NULL,
        last_message_id INTEGER NOT NULL DEFAULT 0,
        last_message_time INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
      );

      CREATE TABLE user_conversations (
        user_id INTEGER NOT NULL,
        conversation_id INTEGER NOT NULL,
        is_muted INTEGER NOT NULL DEFAULT 0,
        is_deleted INTEGER NOT NULL DEFAULT 0,
        last_read_message_id INTEGER NOT NULL DEFAULT 0,
        cleared_up_to INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, conversation_id)
      ) WITHOUT ROWID;

      CREATE TABLE messages (
        conversation_id INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        sender_id INTEGER NOT NULL,
        client_message_id INTEGER NOT NULL,
        body BLOB NOT NULL,
        reply_to BLOB,
        metadata TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER,
        edited INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (conversation_id, message_id)
      ) WITHOUT ROWID;
      CREATE UNIQUE INDEX messages_idempotency ON messages (conversation_id, sender_id, client_message_id) WHERE client_message_id > 0;

      CREATE TABLE agents (
        agent_user_id INTEGER PRIMARY KEY REFERENCES users (user_id),
        creator_id INTEGER NOT NULL,
        status INTEGER NOT NULL,
        visibility INTEGER NOT NULL,
        is_system INTEGER NOT NULL DEFAULT 0,
        token_hash TEXT NOT NULL UNIQUE,
        token_prefix TEXT NOT NULL,
        secret_key TEXT NOT NULL,
        delivery_mode INTEGER NOT NULL,
        webhook_url TEXT NOT NULL DEFAULT '',
        ip_whitelist TEXT NOT NULL DEFAULT '[]',
        commands TEXT NOT NULL DEFAULT '[]',
        mini_app TEXT NOT NULL DEFAULT '{}',
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );
      CREATE INDEX agents_by_creator ON agents (creator_id);

      CREATE TABLE message_deletions (
        user_id INTEGER NOT NULL,
        conversation_id INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        PRIMARY KEY (user_id, conversation_id, message_id)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 3,
    up: `
      CREATE TABLE groups (
        group_id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        avatar_url TEXT NOT NULL,
        description TEXT NOT NULL,
        owner_id INTEGER NOT NULL,
        status INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE group_members (
        group_id INTEGER NOT NULL,
        user_id INTEGER NOT NULL,
        role INTEGER NOT NULL,
        joined_at INTEGER NOT NULL,
        PRIMARY KEY (group_id, user_id)
      ) WITHOUT ROWID;
      CREATE INDEX group_members_by_user ON group_members (user_id, group_id);
    `,
  },
  {
    version: 4,
    up: `
      CREATE TABLE webhook_jobs (
        job_id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_user_id INTEGER NOT NULL,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX webhook_jobs_by_agent ON webhook_jobs (agent_user_id, job_id);

      CREATE TABLE agent_cursors (
        agent_user_id INTEGER PRIMARY KEY,
        delivered_sn INTEGER NOT NULL
      );
    `,
  },
  {
    version: 5,
    up: `
      CREATE TABLE media_files (
        file_id TEXT PRIMARY KEY,
        owner_id INTEGER NOT NULL,
        purpose INTEGER NOT NULL,
        file_name TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        checksum TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        thumbnail_file_id TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );

      CREATE TABLE upload_sessions (
        session_id TEXT PRIMARY KEY,
        owner_id INTEGER NOT NULL,
        file_id TEXT NOT NULL UNIQUE,
        file_name TEXT NOT NULL,
        content_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        uploaded INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      );
      CREATE INDEX upload_sessions_resume ON upload_sessions (owner_id, file_name, content_type, size, expires_at);
      CREATE INDEX upload_sessions_expiry ON upload_sessions (expires_at);

      CREATE TABLE server_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
    `,
  },
  {
    version: 6,
    // A conversation without messages sorts by its creation time: at 0, every such conversation
    // shared one ListConversations cursor value and those beyond the first page were unreachable.
    up: `
      UPDATE conversations SET last_message_time = created_at WHERE last_message_id = 0;
    `,
  },
  {
    version: 7,
    // Streams between START and END or ERROR, so that streams whose owner restarted can still be
    // found and, if their agent never comes back, ended. Streams started before this version are
    // not listed.
    up: `
      CREATE TABLE open_streams (
        conversation_id INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        sender_id INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        PRIMARY KEY (conversation_id, message_id)
      ) WITHOUT ROWID;
      CREATE INDEX open_streams_by_start ON open_streams (started_at);
    `,
  },
  {
    version: 8,
    // The outbox: events recorded with the change they report, until every recipient's stream has
    // them. An update carries the fan-out it came from, so a fan-out delivered again is taken once.
    // No index on it: a unique one cost about a third more per append, and only a repeat (rare)
    // looks for it, within one user's retained entries.
    up: `
      CREATE TABLE fan_outs (
        fan_out_id INTEGER PRIMARY KEY,
        scope TEXT NOT NULL,
        recipients TEXT NOT NULL,
        entry BLOB NOT NULL,
        related TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX fan_outs_by_scope ON fan_outs (scope, fan_out_id);
      ALTER TABLE updates ADD COLUMN fan_out_id INTEGER;
      CREATE TABLE system_messages (
        system_message_id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL,
        body BLOB NOT NULL,
        extra_recipients TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
    `,
  },
  {
    version: 9,
    // Field numbers of the upstream protocol (nexus-proto v0.0.12): what was stored before in the
    // old numbering is rewritten (upstream-numbering.ts).
    run: (db) => {
      rewriteColumn(db, "updates", ["user_id", "sn"], "payload", snUpdateToUpstream);
      rewriteColumn(db, "fan_outs", ["fan_out_id"], "entry", snUpdateToUpstream);
      rewriteColumn(db, "messages", ["conversation_id", "message_id"], "body", messageBodyToUpstream);
      rewriteColumn(db, "system_messages", ["system_message_id"], "body", messageBodyToUpstream);
    },
  },
  {
    version: 10,
    // Each event's entry is stored once (update_events); a stream entry is a small row naming it.
    // What was stored before becomes events too: the entries of one fan-out (identical but for
    // their sn) one event under the fan-out's id, so a fan-out delivered again after the upgrade
    // is still recognised; any other entry an event of its own under a negative id made of its
    // user and sn, a range fan-out ids never use. Entries are stored without sn from now on.
    up: `
      CREATE TABLE update_events (
        event_id INTEGER PRIMARY KEY,
        entry BLOB NOT NULL,
        refs INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE stream_entries (
        user_id INTEGER NOT NULL,
        sn INTEGER NOT NULL,
        event_id INTEGER NOT NULL,
        PRIMARY KEY (user_id, sn)
      ) WITHOUT ROWID;
      INSERT INTO update_events (event_id, entry, refs, created_at)
        SELECT COALESCE(fan_out_id, -((user_id << 32) | sn)) AS id, payload, COUNT(*), MIN(created_at) FROM updates GROUP BY id;
      INSERT INTO stream_entries (user_id, sn, event_id)
        SELECT user_id, sn, COALESCE(fan_out_id, -((user_id << 32) | sn)) FROM updates;
      DROP TABLE updates;
      ALTER TABLE stream_entries RENAME TO updates;
    `,
    run: (db) => rewriteColumn(db, "update_events", ["event_id"], "entry", withoutSn),
  },
  {
    version: 11,
    // Ownership of conversations and update streams: one lease per shard of keys, whose epoch
    // every owner's write is checked against (engine/ownership.ts). A released lease keeps its
    // epoch with an empty instance. (IF NOT EXISTS: a test rewinds user_version to replay 9.)
    up: `
      CREATE TABLE IF NOT EXISTS leases (
        shard INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        instance TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      );
    `,
  },
  {
    version: 12,
    // The staged part each accepted chunk was written to (a JSON array of blob-store names, in
    // order): parts are named per attempt, so the session says which attempt at an offset counts.
    // A session from before has none; the engine drops it (its bytes are in the old layout).
    up: `ALTER TABLE upload_sessions ADD COLUMN parts TEXT NOT NULL DEFAULT '[]';`,
  },
  {
    version: 13,
    // A stream holds an event at most once: the unique index refuses the append's insert of a
    // second entry of it (two engines finishing one fan-out across a lease move). Entries older
    // code appended twice keep their sn and bytes: each later one is moved to an event of its own,
    // under the negative id made of its user and sn (migration 10's range, never a fan-out's).
    run: (db) => {
      const repeats = db
        .prepare(
          `SELECT user_id, sn, event_id FROM (
             SELECT user_id, sn, event_id, ROW_NUMBER() OVER (PARTITION BY user_id, event_id ORDER BY sn) AS n FROM updates
           ) WHERE n > 1`,
        )
        .safeIntegers(true)
        .all() as { user_id: bigint; sn: bigint; event_id: bigint }[];
      const copy = db.prepare("INSERT INTO update_events (event_id, entry, refs, created_at) SELECT ?, entry, 1, created_at FROM update_events WHERE event_id = ?");
      const repoint = db.prepare("UPDATE updates SET event_id = ? WHERE user_id = ? AND sn = ?");
      const release = db.prepare("UPDATE update_events SET refs = refs - 1 WHERE event_id = ?");
      for (const repeat of repeats) {
        const own = -((repeat.user_id << 32n) | repeat.sn);
        copy.run(own, repeat.event_id);
        repoint.run(own, repeat.user_id, repeat.sn);
        release.run(repeat.event_id);
      }
      db.exec("CREATE UNIQUE INDEX updates_by_event ON updates (user_id, event_id)");
    },
  },
  {
    version: 14,
    // The append checks an event's holders itself, only for an event some stream holds (updates.ts):
    // the index doubled the cost of every stream entry's insert (2.8 to 5.7 ms for a 200-member
    // group's entries), for a check first deliveries never need.
    up: "DROP INDEX updates_by_event;",
  },
];

/**
 * Brings the database to the newest schema (or to `through`: tests build the databases older
 * versions left); refuses a database written by newer code.
 */
export function migrate(db: Database.Database, through = migrations[migrations.length - 1].version): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  const newest = migrations[migrations.length - 1].version;
  if (current > newest) {
    throw new Error(`the database schema is version ${current}, newer than this build knows (${newest}); refusing to open it`);
  }
  for (const migration of migrations) {
    if (migration.version <= current || migration.version > through) continue;
    db.transaction(() => {
      if (migration.up) db.exec(migration.up);
      migration.run?.(db);
      db.pragma(`user_version = ${migration.version}`);
    })();
  }
}
