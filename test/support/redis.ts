// One real Redis for the whole test run, on port 6390 so that a developer's Redis on 6379 is never
// touched, started when a test first needs it (it stays running when it was already running before
// the run). Tests share it: each writes under a key prefix of its own (testRedisPrefix) and removes
// its keys when done, so no test sees another's keys, and the append-only file does not grow
// across runs.
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { ensureRedis, restartRedis } from "../../scripts/services/redis.js";
import { testServicesDir } from "./cassandra.js";

export const testRedisPort = 6390;

let running: Promise<{ url: string; stop: () => Promise<void> }> | undefined;

/** The URL of the test Redis, starting it on first need. */
export async function testRedis(): Promise<string> {
  running ??= ensureRedis(testServicesDir, { port: testRedisPort });
  return (await running).url;
}

/** A key prefix no other test (of this run or another) uses. */
export const testRedisPrefix = () => `test:${randomUUID()}:`;

/**
 * Stops the test Redis and starts it again on the same port and data after `downMs` (fault tests).
 * Whether the run's end stops it stays as it was: decided by whether it was running before the run.
 */
export async function restartTestRedis(downMs = 0): Promise<void> {
  await testRedis();
  await restartRedis(testServicesDir, { port: testRedisPort, downMs });
}

/** Removes every key under `prefix` from the test Redis. */
export async function deleteTestRedisKeys(prefix: string): Promise<void> {
  const client = new Redis(await testRedis(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    for await (const keys of client.scanStream({ match: `${prefix}*`, count: 500 }) as AsyncIterable<string[]>) {
      if (keys.length > 0) await client.unlink(...keys);
    }
  } finally {
    client.disconnect();
  }
}

/** Stops the test Redis if this run started it. */
export async function releaseTestRedis(): Promise<void> {
  const instance = running;
  running = undefined;
  if (instance) await (await instance).stop();
}

// In a mocha run the end of the run stops what the run started. Registered here, by the module the
// tests themselves load: mocha loads test files through require, so a module imported by the
// runner script would be a second instance that never saw the server start.
if (typeof after === "function") after(releaseTestRedis);
