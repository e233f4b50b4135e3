import { expect } from "chai";
import moleculer from "moleculer";
import { samplesOf } from "../test/support/prometheus-text.js";
import { backgroundFailed, failureReasonOf, keepServingThroughUnhandledRejections, retryInBackground } from "./background.js";
import { Errors, ParleyError } from "./errors.js";
import { metricsRegistry } from "./metrics.js";

const quiet = { warn: () => {}, error: () => {} };

async function failuresCounted(task: string, reason: string): Promise<number> {
  return samplesOf(await metricsRegistry.metrics(), "parley_background_failures_total", { task, reason })[0]?.value ?? 0;
}

describe("background work: failures logged, counted and retried, never thrown out", () => {
  it("names the reason of a refused or lost lease, a timeout, an unreachable peer and anything else", () => {
    const timedOut = Object.assign(new Error("no answer from the coordinator"), { name: "OperationTimedOutError" });
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9042"), { code: "ECONNREFUSED" });
    const lost = Object.assign(new Error("shard 3 has moved past epoch 2"), { name: "OwnershipLostError" });
    expect(failureReasonOf(new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_ELSEWHERE", shard: "642" }))).to.equal("ownership");
    expect(failureReasonOf(new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: "642" }))).to.equal("ownership");
    expect(failureReasonOf(lost)).to.equal("ownership");
    expect(failureReasonOf(timedOut)).to.equal("timeout");
    expect(failureReasonOf(new moleculer.Errors.RequestTimeoutError({ action: "sync.appendFanOuts", nodeID: "engine-2" }))).to.equal("timeout");
    expect(failureReasonOf(new moleculer.Errors.ServiceNotAvailableError({ action: "sync.appendFanOuts", nodeID: "engine-2" }))).to.equal("unreachable");
    expect(failureReasonOf(refused)).to.equal("unreachable");
    expect(failureReasonOf(new Error("something else"))).to.equal("error");
    expect(failureReasonOf("not even an error")).to.equal("error");
  });

  it("counts a failure even when the logger throws", async () => {
    const before = await failuresCounted("fanout_sweep", "error");
    const throwing = {
      warn: () => {
        throw new Error("log sink gone");
      },
    };
    expect(() => backgroundFailed("fanout_sweep", new Error("boom"), throwing)).to.not.throw();
    expect(await failuresCounted("fanout_sweep", "error")).to.equal(before + 1);
  });

  it("retries a failing task with growing pauses until it succeeds, counting each failure", async () => {
    const before = await failuresCounted("startup_recovery", "ownership");
    const triedAt: number[] = [];
    const retry = retryInBackground(
      "startup_recovery",
      async () => {
        triedAt.push(performance.now());
        if (triedAt.length < 4) throw new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_ELSEWHERE", shard: "1" });
      },
      quiet,
      undefined,
      { firstDelayMs: 20, maxDelayMs: 60 },
    );
    expect(await retry.firstTry).to.equal(false);
    expect(await retry.done).to.equal(true);
    expect(triedAt).to.have.length(4);
    const pauses = triedAt.slice(1).map((at, index) => at - triedAt[index]);
    // 20, 40, then capped at 60 ms (timers fire late, never early).
    expect(pauses[0]).to.be.at.least(19);
    expect(pauses[1]).to.be.at.least(39);
    expect(pauses[2]).to.be.at.least(59).and.below(60 * 1.9);
    expect(await failuresCounted("startup_recovery", "ownership")).to.equal(before + 3);
  });

  it("waits before its first try when the task has just failed elsewhere", async () => {
    const startedAt = performance.now();
    let triedAt = 0;
    const retry = retryInBackground("fanout_sweep", async () => void (triedAt = performance.now()), quiet, undefined, { firstDelayMs: 30, maxDelayMs: 30, waitFirst: true });
    expect(await retry.done).to.equal(true);
    expect(triedAt - startedAt).to.be.at.least(29);
  });

  it("stops retrying when stopped, answering that the task never succeeded", async () => {
    let tries = 0;
    const retry = retryInBackground(
      "agent_deletion",
      async () => {
        tries += 1;
        throw new Error("store down");
      },
      quiet,
      undefined,
      { firstDelayMs: 60_000, maxDelayMs: 60_000 },
    );
    expect(await retry.firstTry).to.equal(false);
    await retry.stop();
    expect(await retry.done).to.equal(false);
    expect(tries).to.equal(1);
  });

  it("keeps the process serving through a rejection nothing handled, logging and counting it", async () => {
    const logged: unknown[] = [];
    const before = await failuresCounted("unhandled_rejection", "timeout");
    // Mocha's own listener would fail the test (and re-emit the event): the handler stands alone, as in main.ts.
    const others = process.listeners("unhandledRejection");
    process.removeAllListeners("unhandledRejection");
    const remove = keepServingThroughUnhandledRejections({ warn: () => {}, error: (...args: unknown[]) => void logged.push(args) });
    try {
      // A promise rejected with nothing attached: Node reports it once the microtasks ran.
      void Promise.reject(Object.assign(new Error("query timed out"), { name: "OperationTimedOutError" }));
      await new Promise((resolve) => setTimeout(resolve, 10));
    } finally {
      remove();
      for (const listener of others) process.on("unhandledRejection", listener);
    }
    expect(await failuresCounted("unhandled_rejection", "timeout")).to.equal(before + 1);
    expect(logged).to.have.length(1);
  });
});
