// How every Redis driver (ephemeral state, presence) connects, so that one policy decides what a
// caller sees while Redis is away:
// - The client reconnects for ever, backing off to one attempt a second: a Redis restart never
//   takes the process down, and the first command after Redis is back works.
// - A command issued while the connection is down waits in the client's offline queue, so a blip
//   shorter than a reconnect attempt or two goes unnoticed (maxRetriesPerRequest: 1 fails the
//   queued commands when the second attempt in a row fails).
// - Whatever happens, a command answers within commandTimeoutMs: ioredis starts that timer when the
//   command is issued, queued or not, so a caller never hangs on a Redis that is down or silent.
//   A timed-out write may still have been applied (it can have reached Redis before the answer was
//   lost); callers treat the error as "unknown", as they would any failed call.
import { Redis } from "ioredis";

export interface RedisConnectionOptions {
  /** redis:// or rediss:// URL. */
  url: string;
  /** The longest any command may take to answer, including time spent waiting for a reconnect. */
  commandTimeoutMs?: number;
  /** Told each connection error (the client keeps reconnecting); ignored when absent. */
  onError?: (error: Error) => void;
}

export const defaultRedisCommandTimeoutMs = 2_000;

/** Connects and resolves once the connection is ready; rejects when the first connection fails. */
export async function connectRedis(options: RedisConnectionOptions): Promise<Redis> {
  const commandTimeoutMs = options.commandTimeoutMs ?? defaultRedisCommandTimeoutMs;
  const client = new Redis(options.url, {
    lazyConnect: true,
    connectTimeout: commandTimeoutMs,
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
  });
  // Without a listener ioredis prints every failed reconnect attempt to the console.
  client.on("error", (error: Error) => options.onError?.(error));
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new Error(`could not connect to Redis at ${options.url}: ${(error as Error).message}`, { cause: error });
  }
  return client;
}

/** Closes politely (QUIT) while connected, at once otherwise. */
export async function closeRedis(client: Redis): Promise<void> {
  if (client.status === "ready") {
    try {
      await client.quit();
      return;
    } catch {
      // fall through: the connection went away meanwhile
    }
  }
  client.disconnect();
}
