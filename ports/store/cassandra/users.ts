// Accounts (DATA-MODEL.md §5.1): the `users` row is the truth; email, phone and username lookups
// are claims validated against it (unique-claims.ts). Profile changes commit with their events in
// one logged batch (P2); a custom username is claimed, then set with its events in one logged
// batch under a per-account rename lock (see setCustomUsername).
import { randomUUID } from "node:crypto";
import { AccountType, type AccountTypeValue, type UserRecord, type UserStore } from "../store.js";
import { directoryStatement, isListed, matchesText, searchDirectory } from "./agent-directory.js";
import type { CassandraContext } from "./context.js";
import { numberOf, settledLwt, type Params, type Row, type Statement } from "./cql.js";
import { commitWithEvents, outboxStatements } from "./outbox-rows.js";
import { orphanClaimAgeMs, UniqueClaims, type ClaimKind, type ClaimOutcome } from "./unique-claims.js";

export const defaultUsername = (userId: number) => `u_${userId}`;


export function toUser(row: Row): UserRecord {
  return {
    userId: row.user_id as number,
    accountType: row.account_type as AccountTypeValue,
    username: row.username as string,
    usernameCustom: row.username_custom === true,
    phone: (row.phone as string | null) ?? null,
    email: (row.email as string | null) ?? null,
    nickname: (row.nickname as string | null) ?? "",
    avatarUrl: (row.avatar_url as string | null) ?? "",
    signature: (row.signature as string | null) ?? "",
    passwordHash: (row.password_hash as string | null) ?? null,
    createdAt: numberOf(row.created_at),
  };
}

/** The whole account row of a new account (a plain insert: its id is its own, from the id blocks or a reserved-id LWT). */
export function userInsert(user: UserRecord, ifNotExists = false): Statement {
  return {
    query: `INSERT INTO users (user_id, account_type, username, username_custom, phone, email, nickname, avatar_url, signature, password_hash, created_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)${ifNotExists ? " IF NOT EXISTS" : ""}`,
    params: [
      user.userId,
      user.accountType,
      user.username,
      user.usernameCustom,
      user.phone,
      user.email,
      user.nickname,
      user.avatarUrl,
      user.signature,
      user.passwordHash,
      BigInt(user.createdAt),
    ],
  };
}

export async function readUser(ctx: CassandraContext, userId: number): Promise<UserRecord | undefined> {
  const row = await ctx.cql.row("SELECT * FROM users WHERE user_id = ?", [userId]);
  // A row without a username is not an account (only a write racing nothing could make one; none does).
  return row && row.username !== null ? toUser(row) : undefined;
}

/** The profile columns a change may set, by field. */
const profileColumns = { nickname: "nickname", avatarUrl: "avatar_url", signature: "signature" } as const;

export interface UserStoreOptions {
  /** The wall clock of claims and the rename lock (tests age them without waiting). */
  now?: () => number;
  /** How long setCustomUsername waits between looks at another rename of the same account in flight. */
  renamePollMs?: number;
}

export function userStore(ctx: CassandraContext, options: UserStoreOptions = {}): UserStore {
  const { cql } = ctx;
  const now = options.now ?? Date.now;
  const claims = new UniqueClaims(cql, now);

  async function findBy(kind: ClaimKind, value: string): Promise<UserRecord | undefined> {
    const holder = await claims.holder(kind, value);
    if (holder === undefined) return undefined;
    const user = await readUser(ctx, holder);
    return user && user[kind] === value ? user : undefined;
  }

  /**
   * The account's rename lock: an LWT on its row that only one setCustomUsername holds at a time,
   * so the change itself can be a plain logged batch with its events. "already-set" when the
   * account chose a name already (or does not exist). A lock whose holder died is taken over
   * once it is as old as an orphan claim; a live one is waited for (it lasts milliseconds).
   */
  async function lockRename(userId: number): Promise<{ token: string; lockedAt: number } | "already-set"> {
    const token = randomUUID();
    let seen: { pending: string | null; pendingAt: bigint | null } = { pending: null, pendingAt: null };
    for (;;) {
      const lockedAt = now();
      const outcome = await cql.lwt(
        "UPDATE users SET username_pending = ?, username_pending_at = ? WHERE user_id = ? IF username_custom = false AND username_pending = ? AND username_pending_at = ?",
        [token, BigInt(lockedAt), userId, seen.pending, seen.pendingAt],
      );
      if (outcome.applied) return { token, lockedAt };
      if (outcome.row?.username_custom !== false) return "already-set";
      const pending = (outcome.row.username_pending as string | null) ?? null;
      const pendingAt = (outcome.row.username_pending_at as bigint | null) ?? null;
      if (pending !== null && now() - numberOf(pendingAt) < orphanClaimAgeMs) {
        await new Promise((resolve) => setTimeout(resolve, options.renamePollMs ?? 50));
        seen = { pending: null, pendingAt: null };
      } else {
        seen = { pending, pendingAt };
      }
    }
  }

  async function unlockRename(userId: number, token: string): Promise<void> {
    await cql.lwt("UPDATE users SET username_pending = null, username_pending_at = null WHERE user_id = ? IF username_pending = ?", [userId, token]);
  }

  return {
    async searchAgents(text, limit) {
      if (limit <= 0) return [];
      const needle = text.toLowerCase();
      const found: UserRecord[] = [];
      const candidates = await searchDirectory(cql, needle);
      // The directory is a hint: each candidate is confirmed against its rows, in id order, a page at a time.
      for (let i = 0; i < candidates.length && found.length < limit; i += limit) {
        const page = candidates.slice(i, i + limit);
        const confirmed = await Promise.all(
          page.map(async (agentUserId) => {
            const [user, agent] = await Promise.all([
              readUser(ctx, agentUserId),
              cql.row("SELECT status, visibility FROM agents WHERE agent_user_id = ?", [agentUserId]),
            ]);
            const listed = agent !== undefined && isListed({ status: agent.status as number, visibility: agent.visibility as number });
            return user && listed && user.accountType === AccountType.agent && matchesText(user, needle) ? user : undefined;
          }),
        );
        for (const user of confirmed) if (user && found.length < limit) found.push(user);
      }
      return found;
    },

    async createUser(user) {
      const userId = await ctx.ids.user.take();
      const made: [ClaimKind, string][] = [];
      const compensate = async () => {
        for (const [kind, value] of made.reverse()) await claims.release(kind, value, userId);
        ctx.ids.user.giveBack(userId);
      };
      for (const [kind, value] of [["email", user.email], ["phone", user.phone]] as const) {
        if (value === null) continue;
        let claimed: ClaimOutcome;
        try {
          claimed = await claims.claim(kind, value, userId);
        } catch (err) {
          // The claim's outcome is unknown: it stays (an orphan once old), and so does the id.
          for (const [madeKind, madeValue] of made.reverse()) await claims.release(madeKind, madeValue, userId);
          throw err;
        }
        // An account row naming the value already under a fresh id: the id sequence is behind the accounts.
        if (claimed === "own") throw new Error(`user ${userId} exists already: the user id sequence is behind`);
        if (claimed === "refused") {
          await compensate();
          throw new Error(`another account already has this ${kind}`);
        }
        made.push([kind, value]);
      }
      const record: UserRecord = {
        userId,
        accountType: user.accountType,
        username: defaultUsername(userId),
        usernameCustom: false,
        phone: user.phone,
        email: user.email,
        nickname: user.nickname,
        avatarUrl: "",
        signature: "",
        passwordHash: null,
        createdAt: user.createdAt,
      };
      // Not compensated on failure: a batch that timed out may still apply, and claims its row
      // never names are orphans that the next claimant takes over.
      await cql.batch([userInsert(record), claims.plainClaim("username", record.username, userId)]);
      return record;
    },

    getUser: (userId) => readUser(ctx, userId),

    async getUsers(userIds) {
      const users = await Promise.all([...new Set(userIds)].map((userId) => readUser(ctx, userId)));
      return users.filter((user): user is UserRecord => user !== undefined);
    },

    findByEmail: (email) => findBy("email", email),
    findByPhone: (phone) => findBy("phone", phone),
    findByUsername: (username) => findBy("username", username),

    async updateProfile(userId, change, events) {
      const before = await readUser(ctx, userId);
      if (!before) throw new Error(`user ${userId} does not exist`);
      const after = { ...before };
      const assignments: string[] = [];
      const values: unknown[] = [];
      for (const field of ["nickname", "avatarUrl", "signature"] as const) {
        const value = change[field];
        if (value === undefined) continue;
        after[field] = value;
        assignments.push(`${profileColumns[field]} = ?`);
        values.push(value);
      }
      const statements: Statement[] = [];
      if (assignments.length > 0) {
        statements.push({ query: `UPDATE users SET ${assignments.join(", ")} WHERE user_id = ?`, params: [...values, userId] });
        if (before.accountType === AccountType.agent) {
          // A listed agent's directory text follows its profile (search matches the new name at once).
          const agent = await cql.row("SELECT status, visibility FROM agents WHERE agent_user_id = ?", [userId]);
          if (agent && isListed({ status: agent.status as number, visibility: agent.visibility as number })) statements.push(directoryStatement(userId, true, after));
        }
      }
      return commitWithEvents(cql, after, statements, events);
    },

    async setCustomUsername(userId, username, events) {
      const lock = await lockRename(userId);
      if (lock === "already-set") return commitWithEvents(cql, "already-set" as const, [], events);
      let claimed: ClaimOutcome;
      try {
        claimed = await claims.claim("username", username, userId);
      } catch (err) {
        await unlockRename(userId, lock.token);
        throw err;
      }
      if (claimed === "refused") {
        await unlockRename(userId, lock.token);
        return commitWithEvents(cql, "taken" as const, [], events);
      }
      let statements: Statement[];
      try {
        if (now() - lock.lockedAt > orphanClaimAgeMs / 2) throw new Error(`setting the username of user ${userId} took too long; nothing was changed`);
        const outbox = await outboxStatements(cql, events ? events("ok") : []);
        statements = [
          {
            query: "UPDATE users SET username = ?, username_custom = true, username_pending = null, username_pending_at = null WHERE user_id = ?",
            params: [username, userId],
          },
          ...(username === defaultUsername(userId) ? [] : [{ query: "DELETE FROM usernames WHERE username = ?", params: [defaultUsername(userId)] }]),
          ...outbox,
        ];
      } catch (err) {
        if (claimed === "claimed") await claims.release("username", username, userId);
        await unlockRename(userId, lock.token);
        throw err;
      }
      // The change and its events in one logged batch. A batch that fails may still apply, so
      // nothing is compensated: a lock or claim left behind ages out (orphan takeover).
      await cql.batch(statements);
      return "ok";
    },

    async setPasswordHash(userId, passwordHash, condition) {
      // Accounts are never deleted, so a read first makes "no account, no write" exact (an LWT
      // update would otherwise create a row for a missing account).
      if (!(await readUser(ctx, userId))) return false;
      // Every write of the hash is a lightweight transaction, the unconditional one too (IF
      // EXISTS): a plain write next to Paxos rounds on the same cell could be ordered by its own
      // timestamp behind a conditional write it followed.
      const [query, params]: [string, Params] = !condition
        ? ["UPDATE users SET password_hash = ? WHERE user_id = ? IF EXISTS", [passwordHash, userId]]
        : condition.ifPasswordHash === null
          ? ["UPDATE users SET password_hash = ? WHERE user_id = ? IF password_hash = null", [passwordHash, userId]]
          : ["UPDATE users SET password_hash = ? WHERE user_id = ? IF password_hash = ?", [passwordHash, userId, condition.ifPasswordHash]];
      const outcome = await settledLwt(cql, query, params, async () => {
        // Every hash is salted, so finding this one means this write applied.
        const stored = (await cql.row("SELECT password_hash FROM users WHERE user_id = ?", [userId], { serial: true }))?.password_hash ?? null;
        if (stored === passwordHash) return true;
        return condition && stored !== condition.ifPasswordHash ? false : undefined;
      });
      return outcome.applied;
    },
  };
}
