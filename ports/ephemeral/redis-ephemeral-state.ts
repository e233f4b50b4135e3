// Ephemeral state in Redis, for a cluster: every node sees the same counters, sessions and tokens.
// Each operation is one command or one Lua script, so Redis runs it as one atomic step. Every key
// lives under a prefix, so several deployments (or test runs) can share one Redis. The connection
// policy (reconnects, bounded waits while Redis is away) is ports/redis-connection.ts's.
import type { Redis } from "ioredis";
import { closeRedis, connectRedis, type RedisConnectionOptions } from "../redis-connection.js";
import type { Counter, EphemeralState } from "./ephemeral-state.js";

/** Deletes KEYS[1] only while it holds ARGV[1]; answers 1 when it deleted. */
const deleteIfEqualsScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;

/**
 * INCR, and a time to live of ARGV[1] ms only for a new counter (a live one keeps its expiry);
 * answers {count, ms left}. A counter found without expiry gets one rather than living for ever.
 */
const incrementScript = `
local count = redis.call('INCR', KEYS[1])
local ttl = tonumber(ARGV[1])
if count ~= 1 then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 then return {count, left} end
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {count, ttl}`;

interface EphemeralScripts {
  deleteIfEquals(key: string, value: string): Promise<number>;
  incrementWithTtl(key: string, ttlMs: number): Promise<[number, number]>;
}

export interface RedisEphemeralStateOptions extends RedisConnectionOptions {
  /** Put before every key, e.g. "parley:ephemeral:". */
  prefix: string;
}

export class RedisEphemeralState implements EphemeralState {
  private readonly redis: Redis & EphemeralScripts;

  /** Takes over `client` (close() closes it). */
  constructor(
    client: Redis,
    private readonly prefix: string,
  ) {
    // defineCommand runs a script by its digest and sends it again when Redis answers NOSCRIPT
    // (a restarted Redis has forgotten it).
    client.defineCommand("deleteIfEquals", { numberOfKeys: 1, lua: deleteIfEqualsScript });
    client.defineCommand("incrementWithTtl", { numberOfKeys: 1, lua: incrementScript });
    this.redis = client as Redis & EphemeralScripts;
  }

  static async open(options: RedisEphemeralStateOptions): Promise<RedisEphemeralState> {
    return new RedisEphemeralState(await connectRedis(options), options.prefix);
  }

  private key(key: string): string {
    return this.prefix + key;
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.redis.get(this.key(key))) ?? undefined;
  }

  async set(key: string, value: string, ttlMs: number): Promise<void> {
    await this.redis.set(this.key(key), value, "PX", ttlMs);
  }

  async setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(this.key(key), value, "PX", ttlMs, "NX")) === "OK";
  }

  async take(key: string): Promise<string | undefined> {
    return (await this.redis.getdel(this.key(key))) ?? undefined;
  }

  async delete(key: string): Promise<void> {
    await this.redis.del(this.key(key));
  }

  async deleteIfEquals(key: string, value: string): Promise<boolean> {
    return (await this.redis.deleteIfEquals(this.key(key), value)) === 1;
  }

  async increment(key: string, ttlMs: number): Promise<Counter> {
    const [count, left] = await this.redis.incrementWithTtl(this.key(key), ttlMs);
    return { count, ttlMs: Math.max(1, left) };
  }

  async expire(key: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.pexpire(this.key(key), ttlMs)) === 1;
  }

  async close(): Promise<void> {
    await closeRedis(this.redis);
  }
}
