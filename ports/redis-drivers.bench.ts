// Figures for the Redis drivers on the machine at hand: `npx tsx ports/redis-drivers.bench.ts`.
// Starts the test Redis (port 6390) if none runs, and stops it after if it started it. Prints the
// median of 5 rounds of each measurement: sequential latency (one call at a time) and throughput
// with 64 calls in flight (8 for the 1,000-user lookups), for the ephemeral operations the sign-in path uses and for presence
// lookups of 1, 100 and 1,000 users (a group fan-out's recipients).
import { RedisEphemeralState } from "./ephemeral/redis-ephemeral-state.js";
import { RedisPresenceRegistry } from "./presence/redis-presence-registry.js";
import { deleteTestRedisKeys, releaseTestRedis, testRedis, testRedisPrefix } from "../test/support/redis.js";

const rounds = 5;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Median over rounds of: µs per call one at a time, and calls/s with `inFlight` concurrent callers. */
async function measure(label: string, call: (i: number) => Promise<unknown>, calls = 20_000, inFlight = 64): Promise<void> {
  const latencies: number[] = [];
  const rates: number[] = [];
  for (let round = 0; round < rounds; round++) {
    let began = performance.now();
    for (let i = 0; i < calls / 4; i++) await call(i);
    latencies.push(((performance.now() - began) * 1000) / (calls / 4));
    let next = 0;
    began = performance.now();
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < calls) await call(next++);
      }),
    );
    rates.push(calls / ((performance.now() - began) / 1000));
  }
  console.log(`| ${label} | ${median(latencies).toFixed(0)} µs | ${median(rates).toFixed(0)} /s |`);
}

const url = await testRedis();
const prefix = testRedisPrefix();
const state = await RedisEphemeralState.open({ url, prefix });
const presence = await RedisPresenceRegistry.open({ url, prefix });
try {
  console.log("| operation | one at a time (median µs/call) | 64 in flight (median calls/s) |\n|---|---|---|");
  await measure("ephemeral increment (Lua)", (i) => state.increment(`bench:n:${i % 100}`, 60_000));
  await measure("ephemeral setIfAbsent (SET NX PX)", (i) => state.setIfAbsent(`bench:s:${i}`, "v", 60_000));
  await measure("ephemeral get", (i) => state.get(`bench:s:${i % 1000}`));
  for (const node of ["a", "b", "c", "d"]) await presence.heartbeat(node, 600_000);
  const users = Array.from({ length: 10_000 }, (_, i) => i + 1);
  for (const [index, node] of ["a", "b", "c", "d"].entries()) {
    await presence.report(node, users.filter((userId) => userId % 4 === index).map((userId) => ({ userId, connections: 1 })));
  }
  await measure("presence report (1 user)", (i) => presence.report("a", [{ userId: 20_000 + (i % 500), connections: 1 + (i % 2) }]));
  await measure("presence gatewaysOf (1 user)", (i) => presence.gatewaysOf([1 + (i % 10_000)]));
  await measure("presence gatewaysOf (100 users)", (i) => presence.gatewaysOf(users.slice(i % 9_900, (i % 9_900) + 100)), 4_000);
  await measure("presence gatewaysOf (1,000 users)", (i) => presence.gatewaysOf(users.slice(i % 9_000, (i % 9_000) + 1_000)), 800, 8);
} finally {
  await state.close();
  await presence.close();
  await deleteTestRedisKeys(prefix);
  await releaseTestRedis();
}
