// Versioned schema migrations, applied in order and tracked in PRAGMA user_version.
// Append only: a released migration is never edited; later issues add version 2, 3, …
import type Database from "better-sqlite3";

export interface Migration {
  version: number;
  up: string;
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
];

/** Brings the database to the newest schema; refuses a database written by newer code. */
export function migrate(db: Database.Database): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  const newest = migrations[migrations.length - 1].version;
  if (current > newest) {
    throw new Error(`the database schema is version ${current}, newer than this build knows (${newest}); refusing to open it`);
  }
  for (const migration of migrations) {
    if (migration.version <= current) continue;
    db.transaction(() => {
      db.exec(migration.up);
      db.pragma(`user_version = ${migration.version}`);
    })();
  }
}
