// Who a bearer token names, as the engine (which owns credentials) and the processes that serve
// clients (which cache the answer, api/identity-cache.ts) agree on it without importing each other.
//
// A client process asks the engine once per token and then answers from memory. Whatever makes a
// credential stop working or change (a revoked session, a replaced access token, an agent's new
// token, deletion or IP whitelist) is written by the engine first; then, before the engine answers
// the call that made the change, every process holding a cache forgets that account's entries and
// acknowledges it. A process that does not acknowledge within `forgetTimeoutMs` (unreachable,
// dying) keeps what it had for at most `maxAgeMs` after it was cached: no entry lives longer.

export const IdentityCacheBounds = {
  /**
   * The longest an entry serves before the engine is asked again. It bounds how long a process
   * the engine could not reach keeps a revoked credential working, and it paces activity
   * recording: the engine records a session's activity when it answers for it, at most once a
   * minute (AuthPolicy.touchIntervalMs).
   */
  maxAgeMs: 60_000,
  /** How long the engine waits for each process to acknowledge a forget before it answers anyway. */
  forgetTimeoutMs: 2_000,
} as const;

export interface ResolveTokenParams {
  /** The bearer token as the client sent it; it is never stored or logged. */
  token: string;
}

/** What authentication needs to decide a request by itself, without asking the engine again. */
export interface TokenIdentity {
  kind: "user" | "agent";
  userId: number;
  /** The device session of a user token; empty for agents. */
  deviceId: string;
  /** Unix ms from which a user access token answers TOKEN_EXPIRED; 0 for agent tokens, which live until replaced. */
  expiresAt: number;
  /** False for a deleted agent: its token still names it, and every call answers AGENT_NOT_ACTIVE. */
  active: boolean;
  /** An agent's IP whitelist (addresses and CIDR blocks); empty allows every address. */
  ipWhitelist: string[];
  /**
   * Whether the asking process may keep the answer: false while the engine does not yet know
   * that process's cache (it just joined), since a forget could not reach it.
   */
  cacheable: boolean;
}

export interface ForgetIdentitiesParams {
  userId: number;
  /** Only the user tokens of these device sessions; absent forgets every token of the account (agents included). */
  deviceIds?: string[];
}
