// Uniqueness of an account's email, phone and username across partitions (DATA-MODEL.md §1.6 P3):
// each value is a lookup row claimed with `IF NOT EXISTS` before the account row names it. The
// account row is the truth: a claim whose owner row does not name the value back is an orphan (its
// claimant died before writing the owner row or before releasing the claim). Readers treat an
// orphan as absent, and a claimant takes it over once it is old enough that its claimant cannot
// still be on its way to the owner row.
import { numberOf, type Cql } from "./cql.js";

export type ClaimKind = "username" | "email" | "phone";

/**
 * "claimed": the account holds the value now and its row does not name it yet (release it if the
 * account is not written); "own": its row names it already (nothing to release); "refused".
 */
export type ClaimOutcome = "claimed" | "own" | "refused";

/** The lookup table of each kind; its key column is also the owner row's column in `users`. */
const tables: Record<ClaimKind, { table: string; column: ClaimKind }> = {
  username: { table: "usernames", column: "username" },
  email: { table: "user_emails", column: "email" },
  phone: { table: "user_phones", column: "phone" },
};

/** A claim this old whose owner row does not name it is abandoned: no write path of a live claimant takes that long. */
export const orphanClaimAgeMs = 60_000;

export class UniqueClaims {
  constructor(
    private readonly cql: Cql,
    /** The wall clock claims are stamped and aged with (injectable so tests need not wait a minute). */
    private readonly now: () => number = Date.now,
  ) {}

  /** The statement writing a claim without a condition, for a value nobody else can claim (a default `u_<id>` username). */
  plainClaim(kind: ClaimKind, value: string, userId: number) {
    const { table, column } = tables[kind];
    return { query: `INSERT INTO ${table} (${column}, user_id, claimed_at) VALUES (?, ?, ?)`, params: [value, userId, BigInt(this.now())] };
  }

  /**
   * Claims the value for the account: refused when another live account holds it or another's
   * young claim may still become one; an orphan, or a leftover of this account's own, is taken.
   */
  async claim(kind: ClaimKind, value: string, userId: number): Promise<ClaimOutcome> {
    const { table, column } = tables[kind];
    for (let attempt = 0; attempt < 3; attempt++) {
      const stamp = BigInt(this.now());
      const inserted = await this.cql.lwt(`INSERT INTO ${table} (${column}, user_id, claimed_at) VALUES (?, ?, ?) IF NOT EXISTS`, [value, userId, stamp]);
      if (inserted.applied) return "claimed";
      const holder = inserted.row?.user_id as number | undefined;
      const claimedAt = (inserted.row?.claimed_at as bigint | null | undefined) ?? null;
      if (holder === undefined) continue; // released between our insert and its answer
      if (await this.isLive(kind, value, holder)) return holder === userId ? "own" : "refused";
      // A leftover of our own is restamped like an orphan is taken, so nobody ages it out while we write the owner row.
      if (holder !== userId && this.now() - numberOf(claimedAt) < orphanClaimAgeMs) return "refused";
      const taken = await this.cql.lwt(`UPDATE ${table} SET user_id = ?, claimed_at = ? WHERE ${column} = ? IF user_id = ? AND claimed_at = ?`, [
        userId,
        stamp,
        value,
        holder,
        claimedAt,
      ]);
      if (taken.applied) return "claimed";
    }
    return "refused";
  }

  /** Gives a claim back (compensation): only while it is still this account's. */
  async release(kind: ClaimKind, value: string, userId: number): Promise<void> {
    const { table, column } = tables[kind];
    await this.cql.lwt(`DELETE FROM ${table} WHERE ${column} = ? IF user_id = ?`, [value, userId]);
  }

  /** The account a lookup row names, whether or not that account names the value back (readers validate). */
  async holder(kind: ClaimKind, value: string): Promise<number | undefined> {
    const { table, column } = tables[kind];
    const row = await this.cql.row(`SELECT user_id FROM ${table} WHERE ${column} = ?`, [value]);
    return (row?.user_id as number | null | undefined) ?? undefined;
  }

  /** Whether the holder's account row names the value (read at LOCAL_SERIAL: a claim's outcome may be in flight). */
  private async isLive(kind: ClaimKind, value: string, holder: number): Promise<boolean> {
    const owner = await this.cql.row(`SELECT ${tables[kind].column} FROM users WHERE user_id = ?`, [holder], { serial: true });
    return owner?.[tables[kind].column] === value;
  }
}
