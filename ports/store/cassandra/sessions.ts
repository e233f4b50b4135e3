// Sessions and push tokens (DATA-MODEL.md §5.2): one partition per user for each, keyed by device.
// Token hashes are found through lookup rows that are plain inserts, not claims (a SHA-256 of 256
// random bits does not collide), written before the session names them and validated against it on
// read, so a replaced or half-written token's row answers nothing; they expire on their own a
// while after the token does.
import type { PushTokenRecord, PushTokenStore, SessionRecord, SessionStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { numberOf, type Row, type Statement } from "./cql.js";

const toSession = (row: Row): SessionRecord => ({
  userId: row.user_id as number,
  deviceId: row.device_id as string,
  deviceType: row.device_type as number,
  deviceName: row.device_name as string,
  deviceModel: row.device_model as string,
  osVersion: row.os_version as string,
  appVersion: row.app_version as string,
  loginIp: row.login_ip as string,
  loginAt: numberOf(row.login_at),
  lastActiveAt: numberOf(row.last_active_at),
  accessTokenHash: row.access_token_hash as string,
  accessExpiresAt: numberOf(row.access_expires_at),
  refreshTokenHash: row.refresh_token_hash as string,
  refreshExpiresAt: numberOf(row.refresh_expires_at),
});

const toPushToken = (row: Row): PushTokenRecord => ({
  userId: row.user_id as number,
  deviceId: row.device_id as string,
  token: row.push_token as string,
  platform: row.platform as number,
  isSandbox: row.is_sandbox === true,
  updatedAt: numberOf(row.updated_at),
});

/** A touch racing a delete can leave a row with only last_active_at: not a session. */
const isSession = (row: Row | undefined): row is Row => row !== undefined && row.access_token_hash !== null;

type TokenKind = "access" | "refresh";
const lookupTables: Record<TokenKind, string> = { access: "sessions_by_access", refresh: "sessions_by_refresh" };

/**
 * How long a lookup row outlives its token: an expired token is still recognised (and refused as
 * expired rather than unknown, as SQLite answers) for this long; after that its row is gone.
 */
const lookupGraceSeconds = 30 * 24 * 3600;
/** Cassandra's and ScyllaDB's largest TTL (20 years). */
const maxTtlSeconds = 630_720_000;

export interface SessionStoreOptions {
  /** The wall clock lookup rows' lifetimes are counted from. */
  now?: () => number;
}

export function sessionStore(ctx: CassandraContext, options: SessionStoreOptions = {}): SessionStore {
  const { cql } = ctx;
  const now = options.now ?? Date.now;

  const lookupWrite = (kind: TokenKind, hash: string, userId: number, deviceId: string, expiresAt: number): Statement => {
    const ttl = Math.min(maxTtlSeconds, Math.max(0, Math.ceil((expiresAt - now()) / 1000)) + lookupGraceSeconds);
    return { query: `INSERT INTO ${lookupTables[kind]} (${kind}_token_hash, user_id, device_id) VALUES (?, ?, ?) USING TTL ?`, params: [hash, userId, deviceId, ttl] };
  };
  const lookupDelete = (kind: TokenKind, hash: string): Statement => ({ query: `DELETE FROM ${lookupTables[kind]} WHERE ${kind}_token_hash = ?`, params: [hash] });

  /** Lookup rows of hashes the session no longer carries: validation already ignores them, so losing this write is harmless. */
  const dropLookups = async (previous: Row | undefined, kept: { access?: string; refresh?: string } = {}) => {
    if (!isSession(previous)) return;
    const stale: Statement[] = [];
    if (previous.access_token_hash !== kept.access) stale.push(lookupDelete("access", previous.access_token_hash as string));
    if (previous.refresh_token_hash !== kept.refresh) stale.push(lookupDelete("refresh", previous.refresh_token_hash as string));
    await cql.writeAll(stale);
  };

  const readSession = (userId: number, deviceId: string) => cql.row("SELECT * FROM sessions WHERE user_id = ? AND device_id = ?", [userId, deviceId]);

  async function findBy(kind: TokenKind, hash: string): Promise<SessionRecord | undefined> {
    const lookup = await cql.row(`SELECT user_id, device_id FROM ${lookupTables[kind]} WHERE ${kind}_token_hash = ?`, [hash]);
    if (!lookup) return undefined;
    const row = await readSession(lookup.user_id as number, lookup.device_id as string);
    return isSession(row) && row[`${kind}_token_hash`] === hash ? toSession(row) : undefined;
  }

  async function remove(userId: number, deviceId: string, row: Row | undefined): Promise<void> {
    const statements: Statement[] = [
      { query: "DELETE FROM sessions WHERE user_id = ? AND device_id = ?", params: [userId, deviceId] },
      { query: "DELETE FROM push_tokens WHERE user_id = ? AND device_id = ?", params: [userId, deviceId] },
    ];
    if (isSession(row)) statements.push(lookupDelete("access", row.access_token_hash as string), lookupDelete("refresh", row.refresh_token_hash as string));
    await cql.batch(statements);
  }

  return {
    async upsertSession(session) {
      const previous = await readSession(session.userId, session.deviceId);
      // Lookups first: a session row is never current without the rows that find it.
      await cql.writeAll([
        lookupWrite("access", session.accessTokenHash, session.userId, session.deviceId, session.accessExpiresAt),
        lookupWrite("refresh", session.refreshTokenHash, session.userId, session.deviceId, session.refreshExpiresAt),
      ]);
      await cql.write(
        `INSERT INTO sessions (user_id, device_id, device_type, device_name, device_model, os_version, app_version, login_ip, login_at, last_active_at,
          access_token_hash, access_expires_at, refresh_token_hash, refresh_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          session.userId,
          session.deviceId,
          session.deviceType,
          session.deviceName,
          session.deviceModel,
          session.osVersion,
          session.appVersion,
          session.loginIp,
          BigInt(session.loginAt),
          BigInt(session.lastActiveAt),
          session.accessTokenHash,
          BigInt(session.accessExpiresAt),
          session.refreshTokenHash,
          BigInt(session.refreshExpiresAt),
        ],
      );
      await dropLookups(previous, { access: session.accessTokenHash, refresh: session.refreshTokenHash });
    },

    findByAccessHash: (hash) => findBy("access", hash),
    findByRefreshHash: (hash) => findBy("refresh", hash),

    async rotateTokens(userId, deviceId, expectedRefreshHash, next) {
      const previous = await readSession(userId, deviceId);
      if (!isSession(previous) || previous.refresh_token_hash !== expectedRefreshHash) return false;
      const fresh = [
        lookupWrite("access", next.accessTokenHash, userId, deviceId, next.accessExpiresAt),
        lookupWrite("refresh", next.refreshTokenHash, userId, deviceId, next.refreshExpiresAt),
      ];
      await cql.writeAll(fresh);
      // The condition is what makes two refreshes with one token answer true once.
      const swap = (): Promise<{ applied: boolean }> =>
        cql.lwt(
          `UPDATE sessions SET access_token_hash = ?, access_expires_at = ?, refresh_token_hash = ?, refresh_expires_at = ?, last_active_at = ?
            WHERE user_id = ? AND device_id = ? IF refresh_token_hash = ?`,
          [
            next.accessTokenHash,
            BigInt(next.accessExpiresAt),
            next.refreshTokenHash,
            BigInt(next.refreshExpiresAt),
            BigInt(next.lastActiveAt),
            userId,
            deviceId,
            expectedRefreshHash,
          ],
        );
      let applied: boolean;
      try {
        applied = (await swap()).applied;
      } catch (err) {
        // A swap that timed out may still have applied: a serial read settles it (it completes or ends
        // a proposal still in flight), so a client whose refresh went through is not logged out for it.
        const settled = await cql.row("SELECT refresh_token_hash FROM sessions WHERE user_id = ? AND device_id = ?", [userId, deviceId], { serial: true }).catch(() => undefined);
        if (settled?.refresh_token_hash === next.refreshTokenHash) applied = true;
        else if (settled?.refresh_token_hash === expectedRefreshHash) applied = false;
        else throw err;
      }
      if (!applied) {
        await cql.writeAll([lookupDelete("access", next.accessTokenHash), lookupDelete("refresh", next.refreshTokenHash)]);
        return false;
      }
      await dropLookups(previous, { access: next.accessTokenHash, refresh: next.refreshTokenHash });
      return true;
    },

    async touchSession(userId, deviceId, lastActiveAt) {
      await cql.write("UPDATE sessions SET last_active_at = ? WHERE user_id = ? AND device_id = ?", [BigInt(lastActiveAt), userId, deviceId]);
    },

    async listSessions(userId) {
      const rows = await cql.rows("SELECT * FROM sessions WHERE user_id = ?", [userId]);
      const leftovers = rows.filter((row) => row.access_token_hash === null);
      // Only while still a leftover: a session written since keeps its row.
      await Promise.all(
        leftovers.map((row) => cql.lwt("DELETE FROM sessions WHERE user_id = ? AND device_id = ? IF access_token_hash = null", [userId, row.device_id])),
      );
      return rows
        .filter(isSession)
        .map(toSession)
        .sort((a, b) => b.lastActiveAt - a.lastActiveAt || (a.deviceId < b.deviceId ? -1 : a.deviceId > b.deviceId ? 1 : 0));
    },

    async deleteSession(userId, deviceId) {
      const row = await readSession(userId, deviceId);
      await remove(userId, deviceId, row);
      return isSession(row);
    },

    async deleteSessionsExcept(userId, keepDeviceId) {
      const rows = await cql.rows("SELECT * FROM sessions WHERE user_id = ?", [userId]);
      const removed = rows.filter((row) => row.device_id !== keepDeviceId);
      await Promise.all(removed.map((row) => remove(userId, row.device_id as string, row)));
      return removed.filter(isSession).map((row) => row.device_id as string);
    },
  };
}

/** Partition keys per IN query of push tokens: a coordinator reads them in parallel; more would burden one coordinator. */
const usersPerTokenRead = 100;

export function pushTokenStore(ctx: CassandraContext): PushTokenStore {
  const { cql } = ctx;
  const listOf = async (userId: number) => (await cql.rows("SELECT * FROM push_tokens WHERE user_id = ?", [userId])).map(toPushToken);
  return {
    async upsertPushToken(record) {
      await cql.write("INSERT INTO push_tokens (user_id, device_id, push_token, platform, is_sandbox, updated_at) VALUES (?, ?, ?, ?, ?, ?)", [
        record.userId,
        record.deviceId,
        record.token,
        record.platform,
        record.isSandbox,
        BigInt(record.updatedAt),
      ]);
    },
    async deletePushToken(userId, deviceId) {
      // An LWT so that "existed" is exact; token removal is rare.
      return (await cql.lwt("DELETE FROM push_tokens WHERE user_id = ? AND device_id = ? IF EXISTS", [userId, deviceId])).applied;
    },
    async deleteRejectedPushToken(userId, deviceId, token) {
      // Conditional, so a token the device registered after the rejected one was sent survives.
      return (await cql.lwt("DELETE FROM push_tokens WHERE user_id = ? AND device_id = ? IF push_token = ?", [userId, deviceId, token])).applied;
    },
    listPushTokens: listOf,
    async listPushTokensOf(userIds) {
      // A group message asks for every offline member: one IN query per slice of partitions, not a
      // statement per member (the driver's cost per statement was most of Parley's CPU per group
      // message on Cassandra); the coordinator reads the same partitions either way.
      const unique = [...new Set(userIds)];
      const slices = Array.from({ length: Math.ceil(unique.length / usersPerTokenRead) }, (_, i) => unique.slice(i * usersPerTokenRead, (i + 1) * usersPerTokenRead));
      const rows = (await Promise.all(slices.map((slice) => cql.rows("SELECT * FROM push_tokens WHERE user_id IN ?", [slice])))).flat();
      return rows.map(toPushToken).sort((a, b) => a.userId - b.userId || (a.deviceId < b.deviceId ? -1 : a.deviceId > b.deviceId ? 1 : 0));
    },
  };
}
