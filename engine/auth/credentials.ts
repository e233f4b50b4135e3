// Secrets the platform hands out (tokens, codes) and keeps (password hashes). Tokens are 256-bit
// random values behind a fixed prefix per kind, so a token's kind is known without a lookup;
// only their SHA-256 is ever stored.
import { createHash, createHmac, randomBytes, randomInt, scrypt, timingSafeEqual } from "node:crypto";

/**
 * User access and agent tokens use the prefixes the upstream SDKs check (nexus-openclaw refuses
 * an agent token without `nxa_`); the other kinds follow the same pattern with a letter each.
 */
export const TokenPrefix = {
  userAccess: "nxs_",
  agent: "nxa_",
  refresh: "nxr_",
  verify: "nxv_",
  reset: "nxp_",
  secretKey: "nxk_",
} as const;

/**
 * The prefixes tokens were issued with before, still accepted for the same kind: a stored hash
 * covers the whole token, so a token handed out earlier (an agent token lives until it is
 * regenerated, a refresh token 30 days) keeps working instead of failing on its prefix.
 */
const legacyTokenPrefix: Partial<Record<string, string>> = {
  [TokenPrefix.userAccess]: "ply_u_",
  [TokenPrefix.agent]: "ply_a_",
  [TokenPrefix.refresh]: "ply_r_",
  [TokenPrefix.verify]: "ply_v_",
  [TokenPrefix.reset]: "ply_p_",
};

const tokenBodyLength = 43; // base64url of 32 bytes

export function newToken(prefix: string): string {
  return prefix + randomBytes(32).toString("base64url");
}

function hasShape(token: string, prefix: string): boolean {
  return token.length === prefix.length + tokenBodyLength && token.startsWith(prefix) && /^[A-Za-z0-9_-]+$/.test(token.slice(prefix.length));
}

/** Whether a string has the exact shape of a token of this kind (its prefix, or the kind's earlier one, and a 256-bit body). */
export function isWellFormedToken(token: string, prefix: string): boolean {
  const legacy = legacyTokenPrefix[prefix];
  return hasShape(token, prefix) || (legacy !== undefined && hasShape(token, legacy));
}

export function hashToken(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** A six-digit numeric code, uniformly drawn. */
export function newVerificationCode(): string {
  return randomInt(0, 1_000_000).toString().padStart(6, "0");
}

/** Binds a code to its session, so a stored hash is useless for any other session. */
export function hashCode(sessionKey: string, code: string): string {
  return createHmac("sha256", sessionKey).update(code).digest("hex");
}

export function equalHashes(a: string, b: string): boolean {
  const left = Buffer.from(a, "hex");
  const right = Buffer.from(b, "hex");
  return left.length === right.length && timingSafeEqual(left, right);
}

const scryptParams = { N: 16384, r: 8, p: 1, keyLength: 32 } as const;

function scryptAsync(password: string, salt: Buffer, keyLength: number, options: { N: number; r: number; p: number }): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password, salt, keyLength, options, (err, key) => (err ? reject(err) : resolve(key)));
  });
}

/** A self-describing scrypt hash: `scrypt$N$r$p$salt$key` (base64url parts). */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const { N, r, p, keyLength } = scryptParams;
  const key = await scryptAsync(password.normalize("NFC"), salt, keyLength, { N, r, p });
  return ["scrypt", N, r, p, salt.toString("base64url"), key.toString("base64url")].join("$");
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split("$");
  if (scheme !== "scrypt" || !salt || !key) return false;
  const expected = Buffer.from(key, "base64url");
  const actual = await scryptAsync(password.normalize("NFC"), Buffer.from(salt, "base64url"), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return timingSafeEqual(expected, actual);
}

/**
 * Password rules beyond the 8..128 length the protocol enforces: at least one letter and one
 * digit, and not only white space. Answers the reason it fails, or undefined when it passes.
 */
export function passwordWeakness(password: string): string | undefined {
  if (password.trim().length === 0) return "the password cannot be only white space";
  if (!/\p{L}/u.test(password)) return "the password needs at least one letter";
  if (!/\p{Nd}/u.test(password)) return "the password needs at least one digit";
  return undefined;
}
