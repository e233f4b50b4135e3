// The ephemeral-state port: short-lived values with a time to live (rate limits, verification
// sessions, reset tokens, login lockouts). Embedded mode keeps them in memory; a cluster keeps
// them in Redis. Losing them on restart is acceptable by design: each has a short TTL.
//
// Every operation is one atomic step on the backing store (a single Redis command or script), so
// callers that must count concurrent attempts exactly reserve them with one call, never with a
// read followed by a write. The promises are pinned by ./ephemeral-conformance.ts.
export interface EphemeralState {
  /** The value under key, or undefined when absent or expired. */
  get(key: string): Promise<string | undefined>;
  /** Stores value under key for ttlMs, replacing any earlier value. */
  set(key: string, value: string, ttlMs: number): Promise<void>;
  /** Stores value only when the key is absent or expired; answers whether it stored. */
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
  /** Removes the key and answers the value it held, so at most one caller can consume it. */
  take(key: string): Promise<string | undefined>;
  /** Removes the key. */
  delete(key: string): Promise<void>;
  /** Removes the key only while it holds exactly value; answers whether it removed it. */
  deleteIfEquals(key: string, value: string): Promise<boolean>;
  /** Adds one to a counter (created at 1 with ttlMs; a live counter keeps its expiry) and answers the new count and its milliseconds left. */
  increment(key: string, ttlMs: number): Promise<Counter>;
  /** Gives a live key ttlMs to live from now, keeping its value; answers false when it is absent. */
  expire(key: string, ttlMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/** A counter as one increment left it. */
export interface Counter {
  count: number;
  /** Milliseconds until the counter expires (at least 1). */
  ttlMs: number;
}
