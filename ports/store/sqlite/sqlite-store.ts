// The embedded store: one SQLite file under DATA_DIR (better-sqlite3, WAL).
//
// Every value in this schema fits in 2^53 (user ids and sn are int32, timestamps are ms), so
// integers are read as plain numbers; tables holding int64 protocol ids (message ids,
// conversation ids) must read them with safeIntegers(true) as bigint.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import type {
  NewUser,
  ProfileChange,
  PushTokenRecord,
  PushTokenStore,
  SessionRecord,
  SessionStore,
  Store,
  UserRecord,
  UserStore,
} from "../store.js";
import { agentStore } from "./agents.js";
import { fenceCheck, leaseStore } from "./leases.js";
import { conversationStore, lastMessageWriter } from "./conversations.js";
import { groupStore } from "./groups.js";
import { agentDeliveryWriters, webhookJobStore } from "./webhook-jobs.js";
import { messageStore } from "./messages.js";
import { outboxStore, outboxWriter, recorder, type Recorder } from "./outbox.js";
import { mediaStore } from "./media.js";
import { measureQueries } from "./measured-queries.js";
import { migrate } from "./migrations.js";
import { contactStore } from "./contacts.js";
import { updateLogStore } from "./updates.js";

interface UserRow {
  user_id: number;
  account_type: 1 | 2;
  username: string;
  username_custom: number;
  phone: string | null;
  email: string | null;
  nickname: string;
  avatar_url: string;
  signature: string;
  password_hash: string | null;
  created_at: number;
}

interface SessionRow {
  user_id: number;
  device_id: string;
  device_type: number;
  device_name: string;
  device_model: string;
  os_version: string;
  app_version: string;
  login_ip: string;
  login_at: number;
  last_active_at: number;
  access_token_hash: string;
  access_expires_at: number;
  refresh_token_hash: string;
  refresh_expires_at: number;
}

interface PushTokenRow {
  user_id: number;
  device_id: string;
  token: string;
  platform: number;
  is_sandbox: number;
  updated_at: number;
}

const toUser = (row: UserRow): UserRecord => ({
  userId: row.user_id,
  accountType: row.account_type,
  username: row.username,
  usernameCustom: row.username_custom === 1,
  phone: row.phone,
  email: row.email,
  nickname: row.nickname,
  avatarUrl: row.avatar_url,
  signature: row.signature,
  passwordHash: row.password_hash,
  createdAt: row.created_at,
});

const toSession = (row: SessionRow): SessionRecord => ({
  userId: row.user_id,
  deviceId: row.device_id,
  deviceType: row.device_type,
  deviceName: row.device_name,
  deviceModel: row.device_model,
  osVersion: row.os_version,
  appVersion: row.app_version,
  loginIp: row.login_ip,
  loginAt: row.login_at,
  lastActiveAt: row.last_active_at,
  accessTokenHash: row.access_token_hash,
  accessExpiresAt: row.access_expires_at,
  refreshTokenHash: row.refresh_token_hash,
  refreshExpiresAt: row.refresh_expires_at,
});

const toPushToken = (row: PushTokenRow): PushTokenRecord => ({
  userId: row.user_id,
  deviceId: row.device_id,
  token: row.token,
  platform: row.platform,
  isSandbox: row.is_sandbox === 1,
  updatedAt: row.updated_at,
});

function isConstraintError(err: unknown, code: string): boolean {
  return typeof err === "object" && err !== null && (err as { code?: string }).code === code;
}

function userStore(db: Database.Database, record: Recorder): UserStore {
  const insert = db.prepare(
    "INSERT INTO users (account_type, username, phone, email, nickname, created_at) VALUES (?, ?, ?, ?, ?, ?)",
  );
  const renameToDefault = db.prepare("UPDATE users SET username = 'u_' || user_id WHERE user_id = ?");
  const byId = db.prepare<[number], UserRow>("SELECT * FROM users WHERE user_id = ?");
  const byEmail = db.prepare<[string], UserRow>("SELECT * FROM users WHERE email = ?");
  const byPhone = db.prepare<[string], UserRow>("SELECT * FROM users WHERE phone = ?");
  const byUsername = db.prepare<[string], UserRow>("SELECT * FROM users WHERE username = ?");
  // The id list travels as one JSON parameter so a single prepared statement serves any length.
  const byIds = db.prepare<[string], UserRow>("SELECT * FROM users WHERE user_id IN (SELECT value FROM json_each(?))");
  const setUsername = db.prepare("UPDATE users SET username = ?, username_custom = 1 WHERE user_id = ? AND username_custom = 0");
  const setPassword = db.prepare("UPDATE users SET password_hash = ? WHERE user_id = ?");
  // IS, not =: it matches NULL too, the "no password set" condition.
  const setPasswordIf = db.prepare("UPDATE users SET password_hash = ? WHERE user_id = ? AND password_hash IS ?");
  const updateProfile = db.prepare(
    "UPDATE users SET nickname = COALESCE(?, nickname), avatar_url = COALESCE(?, avatar_url), signature = COALESCE(?, signature) WHERE user_id = ?",
  );
  const create = db.transaction((user: NewUser): UserRecord => {
    // A placeholder that cannot collide (usernames never contain '#') until the id is known.
    const placeholder = `#pending-${process.pid}-${Math.random()}`;
    const { lastInsertRowid } = insert.run(user.accountType, placeholder, user.phone, user.email, user.nickname, user.createdAt);
    renameToDefault.run(Number(lastInsertRowid));
    return toUser(byId.get(Number(lastInsertRowid))!);
  });
  const changeUsername = db.transaction((userId: number, username: string): "ok" | "taken" | "already-set" => {
    const current = byId.get(userId);
    if (!current || current.username_custom === 1) return "already-set";
    const holder = byUsername.get(username);
    if (holder && holder.user_id !== userId) return "taken";
    return setUsername.run(username, userId).changes === 1 ? "ok" : "already-set";
  });
  const agentSearch = db.prepare<[string, string, string, number], UserRow>(
    `SELECT u.* FROM users u JOIN agents a ON a.agent_user_id = u.user_id
     WHERE a.status = 1 AND a.visibility = 1
       AND (instr(lower(u.nickname), ?) > 0 OR instr(u.username, ?) > 0 OR instr(lower(u.signature), ?) > 0)
     ORDER BY u.user_id LIMIT ?`,
  );
  return {
    async searchAgents(text, limit) {
      const needle = text.toLowerCase();
      return agentSearch.all(needle, needle, needle, limit).map(toUser);
    },
    async createUser(user) {
      return create(user);
    },
    async getUser(userId) {
      const row = byId.get(userId);
      return row && toUser(row);
    },
    async getUsers(userIds) {
      if (userIds.length === 0) return [];
      return byIds.all(JSON.stringify(userIds)).map(toUser);
    },
    async findByEmail(email) {
      const row = byEmail.get(email);
      return row && toUser(row);
    },
    async findByPhone(phone) {
      const row = byPhone.get(phone);
      return row && toUser(row);
    },
    async findByUsername(username) {
      const row = byUsername.get(username);
      return row && toUser(row);
    },
    async updateProfile(userId, change: ProfileChange, events) {
      return record(() => {
        // COALESCE keeps a column whose new value is absent (NULL), so one statement serves every change.
        updateProfile.run(change.nickname ?? null, change.avatarUrl ?? null, change.signature ?? null, userId);
        const row = byId.get(userId);
        if (!row) throw new Error(`user ${userId} does not exist`);
        return toUser(row);
      }, events);
    },
    async setCustomUsername(userId, username, events) {
      try {
        return record(() => changeUsername(userId, username), events);
      } catch (err) {
        // Two accounts racing for one name: the UNIQUE index decides.
        if (isConstraintError(err, "SQLITE_CONSTRAINT_UNIQUE")) return "taken";
        throw err;
      }
    },
    async setPasswordHash(userId, passwordHash, condition) {
      const changed = condition ? setPasswordIf.run(passwordHash, userId, condition.ifPasswordHash) : setPassword.run(passwordHash, userId);
      return changed.changes === 1;
    },
  };
}

function sessionStore(db: Database.Database): SessionStore {
  const upsert = db.prepare(`
    INSERT INTO sessions (user_id, device_id, device_type, device_name, device_model, os_version, app_version, login_ip,
      login_at, last_active_at, access_token_hash, access_expires_at, refresh_token_hash, refresh_expires_at)
    VALUES (@userId, @deviceId, @deviceType, @deviceName, @deviceModel, @osVersion, @appVersion, @loginIp,
      @loginAt, @lastActiveAt, @accessTokenHash, @accessExpiresAt, @refreshTokenHash, @refreshExpiresAt)
    ON CONFLICT (user_id, device_id) DO UPDATE SET
      device_type = excluded.device_type, device_name = excluded.device_name, device_model = excluded.device_model,
      os_version = excluded.os_version, app_version = excluded.app_version, login_ip = excluded.login_ip,
      login_at = excluded.login_at, last_active_at = excluded.last_active_at,
      access_token_hash = excluded.access_token_hash, access_expires_at = excluded.access_expires_at,
      refresh_token_hash = excluded.refresh_token_hash, refresh_expires_at = excluded.refresh_expires_at`);
  const byAccess = db.prepare<[string], SessionRow>("SELECT * FROM sessions WHERE access_token_hash = ?");
  const byRefresh = db.prepare<[string], SessionRow>("SELECT * FROM sessions WHERE refresh_token_hash = ?");
  const rotate = db.prepare(`
    UPDATE sessions SET access_token_hash = ?, access_expires_at = ?, refresh_token_hash = ?, refresh_expires_at = ?, last_active_at = ?
    WHERE user_id = ? AND device_id = ? AND refresh_token_hash = ?`);
  const touch = db.prepare("UPDATE sessions SET last_active_at = ? WHERE user_id = ? AND device_id = ?");
  const list = db.prepare<[number], SessionRow>("SELECT * FROM sessions WHERE user_id = ? ORDER BY last_active_at DESC, device_id");
  const deleteOne = db.prepare("DELETE FROM sessions WHERE user_id = ? AND device_id = ?");
  const deleteToken = db.prepare("DELETE FROM push_tokens WHERE user_id = ? AND device_id = ?");
  const removeOne = db.transaction((userId: number, deviceId: string) => {
    deleteToken.run(userId, deviceId);
    return deleteOne.run(userId, deviceId).changes === 1;
  });
  const removeExcept = db.transaction((userId: number, keep: string | null) => {
    const removed = list
      .all(userId)
      .map((row) => row.device_id)
      .filter((deviceId) => deviceId !== keep);
    for (const deviceId of removed) {
      deleteToken.run(userId, deviceId);
      deleteOne.run(userId, deviceId);
    }
    return removed;
  });
  return {
    async upsertSession(session) {
      upsert.run(session);
    },
    async findByAccessHash(hash) {
      const row = byAccess.get(hash);
      return row && toSession(row);
    },
    async findByRefreshHash(hash) {
      const row = byRefresh.get(hash);
      return row && toSession(row);
    },
    async rotateTokens(userId, deviceId, expectedRefreshHash, next) {
      const result = rotate.run(
        next.accessTokenHash,
        next.accessExpiresAt,
        next.refreshTokenHash,
        next.refreshExpiresAt,
        next.lastActiveAt,
        userId,
        deviceId,
        expectedRefreshHash,
      );
      return result.changes === 1;
    },
    async touchSession(userId, deviceId, lastActiveAt) {
      touch.run(lastActiveAt, userId, deviceId);
    },
    async listSessions(userId) {
      return list.all(userId).map(toSession);
    },
    async deleteSession(userId, deviceId) {
      return removeOne(userId, deviceId);
    },
    async deleteSessionsExcept(userId, keepDeviceId) {
      return removeExcept(userId, keepDeviceId);
    },
  };
}

function pushTokenStore(db: Database.Database): PushTokenStore {
  const upsert = db.prepare(`
    INSERT INTO push_tokens (user_id, device_id, token, platform, is_sandbox, updated_at) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (user_id, device_id) DO UPDATE SET token = excluded.token, platform = excluded.platform,
      is_sandbox = excluded.is_sandbox, updated_at = excluded.updated_at`);
  const remove = db.prepare("DELETE FROM push_tokens WHERE user_id = ? AND device_id = ?");
  const removeRejected = db.prepare("DELETE FROM push_tokens WHERE user_id = ? AND device_id = ? AND token = ?");
  const list = db.prepare<[number], PushTokenRow>("SELECT * FROM push_tokens WHERE user_id = ? ORDER BY device_id");
  const listOf = db.prepare<[string], PushTokenRow>(
    "SELECT * FROM push_tokens WHERE user_id IN (SELECT value FROM json_each(?)) ORDER BY user_id, device_id",
  );
  return {
    async upsertPushToken(r) {
      upsert.run(r.userId, r.deviceId, r.token, r.platform, r.isSandbox ? 1 : 0, r.updatedAt);
    },
    async deletePushToken(userId, deviceId) {
      return remove.run(userId, deviceId).changes === 1;
    },
    async deleteRejectedPushToken(userId, deviceId, token) {
      return removeRejected.run(userId, deviceId, token).changes === 1;
    },
    async listPushTokens(userId) {
      return list.all(userId).map(toPushToken);
    },
    async listPushTokensOf(userIds) {
      return userIds.length === 0 ? [] : listOf.all(JSON.stringify(userIds)).map(toPushToken);
    },
  };
}

/**
 * Makes the connection's transactions begin IMMEDIATE (taking the write lock as they begin) when
 * called plainly. Every transaction of this store writes; a deferred one that read first would
 * fail at its first write with SQLITE_BUSY_SNAPSHOT whenever another connection to the file
 * committed meanwhile (engine processes sharing it), and busy_timeout cannot wait that out: it
 * waits only for a lock taken before the transaction read anything.
 */
export function beginTransactionsImmediately(db: Database.Database): void {
  const transaction = db.transaction.bind(db);
  db.transaction = (<F extends (...args: never[]) => unknown>(fn: F) => {
    const made = transaction(fn);
    const { immediate } = made;
    // A function of its own: better-sqlite3's come with read-only properties.
    const begunImmediately = function (this: unknown, ...args: unknown[]) {
      return (immediate as (...args: unknown[]) => unknown).apply(this, args);
    };
    return Object.assign(begunImmediately, { default: immediate, deferred: made.deferred, immediate, exclusive: made.exclusive }) as unknown as typeof made;
  }) as Database.Database["transaction"];
}

/** Opens (creating if needed) the database under dataDir and brings its schema up to date. */
export async function openSqliteStore(dataDir: string): Promise<Store> {
  mkdirSync(dataDir, { recursive: true });
  const db = new Database(join(dataDir, "parley.db"));
  try {
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = NORMAL");
    db.pragma("foreign_keys = ON");
    db.pragma("busy_timeout = 5000");
    beginTransactionsImmediately(db);
    migrate(db);
  } catch (err) {
    db.close();
    throw err;
  }
  measureQueries(db);
  const getUserNow = db.prepare<[number], UserRow>("SELECT * FROM users WHERE user_id = ?");
  const agentDelivery = agentDeliveryWriters(db);
  const recordAsLast = lastMessageWriter(db);
  const outboxWrites = outboxWriter(db);
  const record = recorder(db, outboxWrites);
  const users = userStore(db, record);
  const outbox = outboxStore(db);
  const requireFence = fenceCheck(db);
  return {
    users,
    agents: agentStore(db, (userId) => toUser(getUserNow.get(userId)!), record),
    contacts: contactStore(db, record),
    groups: groupStore(db, record, requireFence),
    webhookJobs: webhookJobStore(db, agentDelivery),
    conversations: conversationStore(db, recordAsLast, record),
    messages: messageStore(db, recordAsLast, outboxWrites, record, requireFence),
    outbox,
    media: mediaStore(db),
    sessions: sessionStore(db),
    pushTokens: pushTokenStore(db),
    updates: updateLogStore(db, agentDelivery, requireFence),
    leases: leaseStore(db),
    async close() {
      if (!db.open) return;
      outbox.close();
      // Folds the write-ahead log into the database file and empties it, so a stopped server
      // leaves parley.db whole (closing the last connection then removes the -wal file).
      db.pragma("wal_checkpoint(TRUNCATE)");
      db.close();
    },
  };
}
