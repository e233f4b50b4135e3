// The ephemeral-state port: short-lived values with a time to live (rate limits, verification
// sessions, reset tokens, login lockouts). Embedded mode keeps them in memory; a cluster keeps
// them in Redis. Losing them on restart is acceptable by design: each has a short TTL.
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
  /** Adds one to a counter (creating it at 1 with ttlMs) and answers the new count. */
  increment(key: string, ttlMs: number): Promise<number>;
  close(): Promise<void>;
}
