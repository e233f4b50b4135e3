import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "chai";
import { deleteTestRedisKeys, restartTestRedis, testRedis, testRedisPrefix } from "../../test/support/redis.js";
import { describeEphemeralStateConformance } from "./ephemeral-conformance.js";
import { RedisEphemeralState } from "./redis-ephemeral-state.js";

describeEphemeralStateConformance("redis", async () => {
  const prefix = testRedisPrefix();
  const state = await RedisEphemeralState.open({ url: await testRedis(), prefix });
  return {
    state,
    // Redis keeps real time: a time to live passes only by waiting.
    elapse: (ms) => sleep(ms),
    async cleanup() {
      await state.close();
      await deleteTestRedisKeys(prefix);
    },
  };
});

describe("RedisEphemeralState", () => {
  let prefix: string;
  const opened: RedisEphemeralState[] = [];
  const open = async (commandTimeoutMs?: number) => {
    const state = await RedisEphemeralState.open({ url: await testRedis(), prefix, commandTimeoutMs });
    opened.push(state);
    return state;
  };
  beforeEach(() => {
    prefix = testRedisPrefix();
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((state) => state.close()));
    await deleteTestRedisKeys(prefix);
  });

  it("keeps every key under its prefix, so two prefixes on one Redis never see each other's keys", async () => {
    const mine = await open();
    await mine.set("shared-name", "mine", 60_000);
    const otherPrefix = prefix;
    prefix = testRedisPrefix();
    const theirs = await open();
    try {
      expect(await theirs.get("shared-name")).to.equal(undefined);
      expect(await theirs.setIfAbsent("shared-name", "theirs", 60_000)).to.equal(true);
      expect(await mine.get("shared-name")).to.equal("mine");
    } finally {
      await deleteTestRedisKeys(otherPrefix);
    }
  });

  it("rejects the first connection when nothing listens, instead of retrying for ever", async () => {
    const failure = await RedisEphemeralState.open({ url: "redis://127.0.0.1:1/0", prefix }).then(
      () => undefined,
      (error: Error) => error.message,
    );
    expect(failure).to.match(/could not connect to Redis at redis:\/\/127\.0\.0\.1:1\/0/);
  });

  it("survives a Redis restart: calls fail while it is down, within the command timeout, and work once it is back", async function () {
    this.timeout(60_000);
    const commandTimeoutMs = 500;
    const state = await open(commandTimeoutMs);
    await state.set("kept", "v", 60_000);
    const crashes: unknown[] = [];
    const onCrash = (error: unknown) => crashes.push(error);
    process.on("uncaughtException", onCrash);
    process.on("unhandledRejection", onCrash);
    try {
      // Calls issued throughout the restart: each answers or fails, none hangs.
      let stopping = false;
      const outcomes: { ok: boolean; ms: number }[] = [];
      const caller = (async () => {
        while (!stopping) {
          const began = performance.now();
          const ok = await state.increment("during", 60_000).then(
            () => true,
            () => false,
          );
          outcomes.push({ ok, ms: performance.now() - began });
          await sleep(20);
        }
      })();
      // Down for longer than the command timeout, so calls cannot simply wait in the offline queue.
      await restartTestRedis(4 * commandTimeoutMs);
      stopping = true;
      await caller;
      expect(outcomes.filter((outcome) => !outcome.ok).length, "calls failed while Redis was down").to.be.greaterThan(0);
      // Generous above the timeout for a loaded machine; the point is that no call waited for ever.
      expect(Math.max(...outcomes.map((outcome) => outcome.ms))).to.be.below(commandTimeoutMs + 1_500);

      // The client reconnects by itself; the first call after that works and sees the persisted data.
      const deadline = Date.now() + 10_000;
      let value: string | undefined;
      for (;;) {
        try {
          value = await state.get("kept");
          break;
        } catch (error) {
          if (Date.now() > deadline) throw error;
          await sleep(50);
        }
      }
      expect(value).to.equal("v");
      expect((await state.increment("after", 60_000)).count).to.equal(1);
      expect(await state.deleteIfEquals("after", "1")).to.equal(true);
    } finally {
      process.off("uncaughtException", onCrash);
      process.off("unhandledRejection", onCrash);
    }
    expect(crashes).to.deep.equal([]);
  });
});
