// Opens the presence registry the configuration names (the port is presence-registry.ts): Redis
// where a URL is given (REDIS_URL, a cluster), in memory where one process runs everything.
import { MemoryPresenceRegistry } from "./memory-presence-registry.js";
import type { PresenceRegistry } from "./presence-registry.js";
import { RedisPresenceRegistry } from "./redis-presence-registry.js";

export async function openPresenceRegistry(redis: { redisUrl: string | undefined; redisPrefix: string }, onError: (error: Error) => void): Promise<PresenceRegistry> {
  return redis.redisUrl ? RedisPresenceRegistry.open({ url: redis.redisUrl, prefix: redis.redisPrefix, onError }) : new MemoryPresenceRegistry();
}
