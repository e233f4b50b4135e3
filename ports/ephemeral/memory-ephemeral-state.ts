import type { Clock } from "../../shared/clock.js";
import type { Counter, EphemeralState } from "./ephemeral-state.js";

interface Entry {
  value: string;
  expiresAt: number;
}

/**
 * In-process ephemeral state for embedded mode. No method awaits before it answers, so each runs
 * as one atomic step. Expired entries are swept once a minute.
 */
export class MemoryEphemeralState implements EphemeralState {
  private readonly entries = new Map<string, Entry>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly clock: Clock) {
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  private live(key: string): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry && entry.expiresAt <= this.clock.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry;
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(key);
  }

  async get(key: string): Promise<string | undefined> {
    return this.live(key)?.value;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    this.entries.set(key, { value, expiresAt: this.clock.now() + ttlMs });
  }

  async setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    if (this.live(key)) return false;
    this.entries.set(key, { value, expiresAt: this.clock.now() + ttlMs });
    return true;
  }

  async take(key: string): Promise<string | undefined> {
    const entry = this.live(key);
    this.entries.delete(key);
    return entry?.value;
  }

  async delete(key: string): Promise<void> {
    this.entries.delete(key);
  }

  async deleteIfEquals(key: string, value: string): Promise<boolean> {
    if (this.live(key)?.value !== value) return false;
    this.entries.delete(key);
    return true;
  }

  async increment(key: string, ttlMs: number): Promise<Counter> {
    const now = this.clock.now();
    const entry = this.live(key);
    const count = entry ? Number(entry.value) + 1 : 1;
    const expiresAt = entry?.expiresAt ?? now + ttlMs;
    this.entries.set(key, { value: String(count), expiresAt });
    return { count, ttlMs: Math.max(1, expiresAt - now) };
  }

  async expire(key: string, ttlMs: number): Promise<boolean> {
    const entry = this.live(key);
    if (!entry) return false;
    entry.expiresAt = this.clock.now() + ttlMs;
    return true;
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.entries.clear();
  }
}
