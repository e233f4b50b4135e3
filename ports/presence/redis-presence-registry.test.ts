import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "chai";
import type { Redis } from "ioredis";
import { connectRedis } from "../redis-connection.js";
import { deleteTestRedisKeys, restartTestRedis, testRedis, testRedisPrefix } from "../../test/support/redis.js";
import { describePresenceRegistryConformance } from "./presence-conformance.js";
import { RedisPresenceRegistry } from "./redis-presence-registry.js";

describePresenceRegistryConformance("redis", async () => {
  const prefix = testRedisPrefix();
  const registry = await RedisPresenceRegistry.open({ url: await testRedis(), prefix });
  return {
    registry,
    // Redis keeps real time: a heartbeat lapses only by waiting.
    elapse: (ms) => sleep(ms),
    async cleanup() {
      await registry.close();
      await deleteTestRedisKeys(prefix);
    },
  };
});

describe("RedisPresenceRegistry", () => {
  let prefix: string;
  let registry: RedisPresenceRegistry;
  let inspector: Redis;
  beforeEach(async () => {
    prefix = testRedisPrefix();
    registry = await RedisPresenceRegistry.open({ url: await testRedis(), prefix });
    inspector = await connectRedis({ url: await testRedis() });
  });
  afterEach(async () => {
    await registry.close();
    inspector.disconnect();
    await deleteTestRedisKeys(prefix);
  });

  const keysUnder = async () => (await inspector.keys(`${prefix}*`)).sort();

  it("leaves no key behind once every node dropped or zeroed its users", async () => {
    await registry.heartbeat("a", 60_000);
    await registry.heartbeat("b", 60_000);
    await registry.report("a", [
      { userId: 1, connections: 1 },
      { userId: 2, connections: 1 },
    ]);
    await registry.report("b", [{ userId: 2, connections: 1 }]);
    await registry.dropNode("a");
    await registry.report("b", [{ userId: 2, connections: 0 }]);
    expect(await keysUnder()).to.deep.equal([`${prefix}presence:node:b:alive`]);
    await registry.dropNode("b");
    expect(await keysUnder()).to.deep.equal([]);
  });

  it("cleans up a dead node's leftovers after a lookup meets them, and leaves live nodes' entries", async () => {
    await registry.heartbeat("dead", 100);
    await registry.heartbeat("live", 60_000);
    await registry.report("dead", [
      { userId: 1, connections: 1 },
      { userId: 2, connections: 1 },
    ]);
    await registry.report("live", [{ userId: 2, connections: 1 }]);
    await sleep(200);
    expect(Object.fromEntries(await registry.gatewaysOf([1]))).to.deep.equal({});
    // The lookup met only user 1; the clean-up removes every entry of the node.
    const deadline = Date.now() + 5_000;
    while ((await inspector.exists(`${prefix}presence:node:dead:users`)) === 1 && Date.now() < deadline) await sleep(20);
    expect(await keysUnder()).to.deep.equal([`${prefix}presence:node:live:alive`, `${prefix}presence:node:live:users`, `${prefix}presence:user:2`].sort());
    expect(await inspector.hgetall(`${prefix}presence:user:2`)).to.deep.equal({ live: "1" });
  });

  it("keeps each prefix's nodes and users apart", async () => {
    const other = await RedisPresenceRegistry.open({ url: await testRedis(), prefix: testRedisPrefix() });
    try {
      await registry.heartbeat("a", 60_000);
      await registry.report("a", [{ userId: 1, connections: 1 }]);
      expect(await other.heartbeat("a", 60_000)).to.equal(false);
      expect(Object.fromEntries(await other.gatewaysOf([1]))).to.deep.equal({});
      await other.dropNode("a");
      expect(Object.fromEntries(await registry.gatewaysOf([1]))).to.deep.equal({ 1: ["a"] });
    } finally {
      await other.close();
    }
  });

  it("survives a Redis restart: lookups fail while it is down and answer from the persisted entries after", async function () {
    this.timeout(60_000);
    await registry.close();
    registry = await RedisPresenceRegistry.open({ url: await testRedis(), prefix, commandTimeoutMs: 500 });
    await registry.heartbeat("a", 60_000);
    await registry.report("a", [{ userId: 1, connections: 1 }]);
    const restarted = restartTestRedis(2_000);
    await sleep(500);
    const began = performance.now();
    const failure = await registry.gatewaysOf([1]).then(
      () => undefined,
      (error: Error) => error,
    );
    expect(failure, "a lookup while Redis is down fails").to.be.instanceOf(Error);
    expect(performance.now() - began).to.be.below(2_000);
    await restarted;
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        expect(Object.fromEntries(await registry.gatewaysOf([1]))).to.deep.equal({ 1: ["a"] });
        break;
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await sleep(50);
      }
    }
    expect(await registry.heartbeat("a", 60_000)).to.equal(true);
  });
});
