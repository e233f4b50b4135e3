// Opens the ephemeral state the configuration names (the port is ephemeral-state.ts): Redis where
// a URL is given (REDIS_URL, a cluster; its keys under the prefix's `ephemeral:`), in memory where
// one process runs everything.
import type { Clock } from "../../shared/clock.js";
import type { EphemeralState } from "./ephemeral-state.js";
import { MemoryEphemeralState } from "./memory-ephemeral-state.js";
import { RedisEphemeralState } from "./redis-ephemeral-state.js";

export async function openEphemeralState(redis: { redisUrl: string | undefined; redisPrefix: string }, clock: Clock, onError: (error: Error) => void): Promise<EphemeralState> {
  return redis.redisUrl ? RedisEphemeralState.open({ url: redis.redisUrl, prefix: `${redis.redisPrefix}ephemeral:`, onError }) : new MemoryEphemeralState(clock);
}
