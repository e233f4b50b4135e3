// The dispatcher's scheduling with a recording poster in place of HTTPS, over the real SQLite
// queue: how many requests are in flight, for whom, and when it looks at the queue.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { openSqliteStore } from "../ports/store/sqlite/sqlite-store.js";
import type { Store } from "../ports/store/store.js";
import type { DeliveryOutcome } from "./delivery.js";
import { WebhookDispatcher, type DispatcherOptions, type DispatcherPolicy, type WebhookPoster } from "./dispatcher.js";
import { deliveryLocks } from "./fleet.js";
import { MemoryEphemeralState } from "../ports/ephemeral/memory-ephemeral-state.js";
import { AdjustableClock } from "../shared/clock.js";

// The SQLite queue answers synchronously, so once a timer fires every step in reach has run.
const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
const quiet = { info: () => {}, warn: () => {}, error: () => {} };

/** Holds every request open until the test answers it. */
class HeldPoster implements WebhookPoster {
  readonly open: { url: string; body: string; answer: (outcome: DeliveryOutcome) => void }[] = [];
  readonly sent: string[] = [];
  mostInFlight = 0;

  post(url: string, _secretKey: string, body: string, signal?: AbortSignal): Promise<DeliveryOutcome> {
    this.sent.push(body);
    return new Promise((resolve) => {
      signal?.addEventListener("abort", () => resolve({ ok: false, reason: "cancelled", aborted: true }));
      const entry = {
        url,
        body,
        answer: (outcome: DeliveryOutcome) => {
          this.open.splice(this.open.indexOf(entry), 1);
          resolve(outcome);
        },
      };
      this.open.push(entry);
      this.mostInFlight = Math.max(this.mostInFlight, this.open.length);
    });
  }

  async close(): Promise<void> {}

  answer(body: string): void {
    const entry = this.open.find((e) => e.body === body);
    if (!entry) throw new Error(`no open request for ${body}`);
    entry.answer({ ok: true, status: 200 });
  }
}

describe("WebhookDispatcher", () => {
  let dir: string;
  let store: Store;
  let dispatcher: WebhookDispatcher | undefined;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-dispatcher-"));
    store = await openSqliteStore(dir);
  });
  afterEach(async () => {
    await dispatcher?.stop();
    dispatcher = undefined;
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Agents that are not in WEBHOOK mode, and the hand-backs the dispatcher made. */
  let notWebhook: Set<number>;
  let handedBack: number[];
  /** The agent's queue as the dispatcher left it when it handed the agent back. */
  let queuedAtHandBack: string[][];
  let handBack: (agentUserId: number) => Promise<void>;
  beforeEach(() => {
    notWebhook = new Set();
    handedBack = [];
    queuedAtHandBack = [];
    handBack = async (agentUserId) => {
      handedBack.push(agentUserId);
      queuedAtHandBack.push((await store.webhookJobs.pending(agentUserId)).map((job) => job.body));
      await store.webhookJobs.clearAgent(agentUserId);
    };
  });

  const start = (poster: WebhookPoster, policy: Partial<DispatcherPolicy>, fleet: Partial<Pick<DispatcherOptions, "slice" | "claim">> = {}) => {
    dispatcher = new WebhookDispatcher(
      {
        ...fleet,
        queue: store.webhookJobs,
        resolveTarget: async (agentUserId) => (notWebhook.has(agentUserId) ? undefined : { url: `https://agent-${agentUserId}.example/hook`, secretKey: "key" }),
        handBack: (agentUserId) => handBack(agentUserId),
        now: () => 1000,
        allowPrivateNetworks: false,
        policy,
        poster,
      },
      quiet,
    );
    dispatcher.start();
    return dispatcher;
  };

  it("keeps at most `concurrency` requests in flight, one per agent, and each agent's jobs in order", async () => {
    for (const [agent, body] of [[1, "1a"], [2, "2a"], [3, "3a"], [1, "1b"]] as const) await store.webhookJobs.enqueue(agent, body, 1000);
    const poster = new HeldPoster();
    start(poster, { concurrency: 2, pollIntervalMs: 5 });
    await settle();
    expect(poster.open.map((e) => e.body)).to.deep.equal(["1a", "2a"]);
    poster.answer("1a");
    await settle();
    // A freed slot goes to the oldest due head: agent 3's job, queued before agent 1's second.
    expect(poster.open.map((e) => e.body)).to.deep.equal(["2a", "3a"]);
    poster.answer("2a");
    await settle();
    expect(poster.open.map((e) => e.body)).to.deep.equal(["3a", "1b"]);
    poster.answer("3a");
    poster.answer("1b");
    await settle();
    expect(poster.sent).to.deep.equal(["1a", "2a", "3a", "1b"]);
    expect(poster.mostInFlight).to.equal(2);
    expect(await store.webhookJobs.due(Number.MAX_SAFE_INTEGER, [], 10)).to.deep.equal([]);
  });

  it("serves only its slice of the agents, and an agent another node holds the delivery lock of only once that lock is free", async () => {
    for (const [agent, body] of [[1, "1a"], [2, "2a"], [3, "3a"]] as const) await store.webhookJobs.enqueue(agent, body, 1000);
    const ephemeral = new MemoryEphemeralState(new AdjustableClock());
    const claim = deliveryLocks(ephemeral, 60_000);
    // Another node is delivering to agent 1 (it holds the lock).
    const releaseElsewhere = (await claim(1))!;
    const poster = new HeldPoster();
    start(poster, { pollIntervalMs: 20 }, { slice: () => (agentUserId) => agentUserId !== 3, claim });
    await settle();
    expect(poster.open.map((e) => e.body)).to.deep.equal(["2a"]);
    await releaseElsewhere();
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(poster.open.map((e) => e.body).sort()).to.deep.equal(["1a", "2a"]);
    // The lock is held while its delivery runs, and released after it.
    expect(await claim(1)).to.equal(undefined);
    poster.answer("1a");
    poster.answer("2a");
    await settle();
    expect(await claim(1)).to.not.equal(undefined);
    expect(poster.sent).to.not.include("3a");
    await ephemeral.close();
  });

  it("looks at the queue when woken, without waiting for the next poll", async () => {
    const poster = new HeldPoster();
    const running = start(poster, { pollIntervalMs: 3_600_000 });
    await settle();
    await store.webhookJobs.enqueue(1, "queued later", 1000);
    await settle();
    expect(poster.sent).to.deep.equal([]);
    running.wake();
    await settle();
    expect(poster.sent).to.deep.equal(["queued later"]);
    poster.answer("queued later");
  });

  it("sends nothing for an agent no longer in WEBHOOK mode and hands it back to its inbox instead of dropping its jobs", async () => {
    notWebhook.add(1);
    for (const [agent, body] of [[1, "1a"], [2, "2a"], [1, "1b"]] as const) await store.webhookJobs.enqueue(agent, body, 1000);
    const poster = new HeldPoster();
    start(poster, { pollIntervalMs: 5 });
    await settle();
    expect(poster.sent).to.deep.equal(["2a"]);
    expect(handedBack).to.deep.equal([1]);
    // The dispatcher itself dropped nothing: the inbox got the whole queue to take back.
    expect(queuedAtHandBack).to.deep.equal([["1a", "1b"]]);
    expect(await store.webhookJobs.pending(1)).to.deep.equal([]);
    poster.answer("2a");
  });

  it("keeps the job, with no attempt counted, when the hand-back fails, and retries it later", async () => {
    notWebhook.add(1);
    await store.webhookJobs.enqueue(1, "1a", 1000);
    let calls = 0;
    const inner = handBack;
    handBack = async (agentUserId) => {
      if (++calls === 1) throw new Error("inbox unavailable");
      await inner(agentUserId);
    };
    let now = 1000;
    dispatcher = new WebhookDispatcher(
      { queue: store.webhookJobs, resolveTarget: async () => undefined, handBack: (id) => handBack(id), now: () => now, allowPrivateNetworks: false, policy: { pollIntervalMs: 5, retryBaseMs: 500 }, poster: new HeldPoster() },
      quiet,
    );
    dispatcher.start();
    await settle();
    // One try, not a spin: the job waits for its new time.
    expect(calls).to.equal(1);
    expect((await store.webhookJobs.pending(1)).map((job) => [job.body, job.attempts, job.nextAttemptAt])).to.deep.equal([["1a", 0, 1500]]);
    now = 1500;
    await settle();
    expect(calls).to.equal(2);
    expect(handedBack).to.deep.equal([1]);
    expect(await store.webhookJobs.pending(1)).to.deep.equal([]);
  });
});
