// The queue every provider driver sits behind, with drivers that answer as told: retries and their
// window, Retry-After, the cap on requests in flight, the bounded queue, and routing by platform.
import { expect } from "chai";
import type { PushTokenRecord } from "../store/store.js";
import { pushFailed, pushRetries, pushSent } from "../../shared/metrics.js";
import { ProviderPushNotifier, ProviderQueue, type AttemptResult, type ProviderDriver } from "./provider-push-notifier.js";
import type { PushNotification, PushNotifier } from "./push-notifier.js";

const token = (userId: number, platform = 1): PushTokenRecord => ({ userId, deviceId: `d${userId}`, token: `t${userId}`, platform, isSandbox: false, updatedAt: 1 });
const alert: PushNotification = { silent: false, badge: 1, title: "t", body: "b" };
const quiet = { warn: () => undefined };

/** A driver that answers each attempt with the next scripted result (the last one repeats), and can hold answers. */
class ScriptedDriver implements ProviderDriver {
  readonly provider = "apns";
  attempts: { token: PushTokenRecord; at: number }[] = [];
  inFlight = 0;
  mostInFlight = 0;
  private held: (() => void)[] = [];
  holding = false;

  constructor(
    private readonly script: AttemptResult[],
    readonly platform = 1,
  ) {}

  async attempt(token: PushTokenRecord): Promise<AttemptResult> {
    this.attempts.push({ token, at: Date.now() });
    this.inFlight++;
    this.mostInFlight = Math.max(this.mostInFlight, this.inFlight);
    if (this.holding) await new Promise<void>((resolve) => this.held.push(resolve));
    this.inFlight--;
    return this.script[Math.min(this.attempts.length - 1, this.script.length - 1)];
  }

  release(): void {
    this.holding = false;
    for (const resolve of this.held.splice(0)) resolve();
  }

  async close(): Promise<void> {}
}

const counted = (series: { value: number }) => series.value;

describe("a provider's queue", () => {
  it("retries passing trouble until the provider accepts, counting each retry", async () => {
    const driver = new ScriptedDriver([
      { outcome: "retry", reason: "provider_error" },
      { outcome: "retry", reason: "rate_limited" },
      { outcome: "sent" },
    ]);
    const sentBefore = counted(pushSent.bind({ provider: "apns" }));
    const retriesBefore = counted(pushRetries.bind({ provider: "apns", reason: "rate_limited" }));
    const queue = new ProviderQueue(driver, { concurrency: 4, queueLimit: 10, retryWindowMs: 10_000 }, quiet, () => 0);
    expect(await queue.deliver(token(1), alert)).to.equal("sent");
    expect(driver.attempts).to.have.length(3);
    // Backoff doubles from 250 ms (halved by the jitter drawn here): about 125 ms, then 250 ms.
    expect(driver.attempts[2].at - driver.attempts[0].at).to.be.at.least(350);
    expect(counted(pushSent.bind({ provider: "apns" })) - sentBefore).to.equal(1);
    expect(counted(pushRetries.bind({ provider: "apns", reason: "rate_limited" })) - retriesBefore).to.equal(1);
    expect(queue.depth).to.equal(0);
  });

  it("gives up once the next retry would end after the window, counting the last reason", async () => {
    const driver = new ScriptedDriver([{ outcome: "retry", reason: "timeout" }]);
    const before = counted(pushFailed.bind({ provider: "apns", reason: "timeout" }));
    const queue = new ProviderQueue(driver, { concurrency: 4, queueLimit: 10, retryWindowMs: 600 }, quiet, () => 0);
    expect(await queue.deliver(token(1), alert)).to.equal("failed");
    // 125 ms, 250 ms, then 500 ms would pass the 600 ms window.
    expect(driver.attempts).to.have.length(3);
    expect(counted(pushFailed.bind({ provider: "apns", reason: "timeout" })) - before).to.equal(1);
  });

  it("waits at least as long as the provider's Retry-After", async () => {
    const driver = new ScriptedDriver([{ outcome: "retry", reason: "rate_limited", retryAfterMs: 700 }, { outcome: "sent" }]);
    const queue = new ProviderQueue(driver, { concurrency: 4, queueLimit: 10, retryWindowMs: 10_000 }, quiet, () => 0);
    expect(await queue.deliver(token(1), alert)).to.equal("sent");
    expect(driver.attempts[1].at - driver.attempts[0].at).to.be.at.least(690);
  });

  it("answers a rejected token and a final refusal at once, without retrying", async () => {
    const rejecting = new ProviderQueue(new ScriptedDriver([{ outcome: "token-rejected", reason: "unregistered" }]), { concurrency: 1, queueLimit: 1, retryWindowMs: 10_000 }, quiet);
    expect(await rejecting.deliver(token(1), alert)).to.equal("token-rejected");
    const refusing = new ScriptedDriver([{ outcome: "failed", reason: "bad_request" }]);
    expect(await new ProviderQueue(refusing, { concurrency: 1, queueLimit: 1, retryWindowMs: 10_000 }, quiet).deliver(token(1), alert)).to.equal("failed");
    expect(refusing.attempts).to.have.length(1);
  });

  it("keeps at most `concurrency` requests in flight, and drops what comes beyond a full queue", async () => {
    const driver = new ScriptedDriver([{ outcome: "sent" }]);
    driver.holding = true;
    const before = counted(pushFailed.bind({ provider: "apns", reason: "queue_full" }));
    const queue = new ProviderQueue(driver, { concurrency: 2, queueLimit: 3, retryWindowMs: 10_000 }, quiet);
    const deliveries = Array.from({ length: 6 }, (_, i) => queue.deliver(token(i), alert));
    // Two in flight, three waiting; the sixth found the queue full.
    expect(await deliveries[5]).to.equal("failed");
    expect(queue.depth).to.equal(3);
    expect(counted(pushFailed.bind({ provider: "apns", reason: "queue_full" })) - before).to.equal(1);
    driver.release();
    expect(await Promise.all(deliveries.slice(0, 5))).to.deep.equal(["sent", "sent", "sent", "sent", "sent"]);
    expect(driver.mostInFlight).to.equal(2);
  });

  it("a driver that throws fails that notification only", async () => {
    const driver: ProviderDriver = {
      provider: "fcm",
      platform: 2,
      attempt: async () => {
        throw new Error("broken");
      },
      close: async () => undefined,
    };
    const warnings: string[] = [];
    const queue = new ProviderQueue(driver, { concurrency: 1, queueLimit: 1, retryWindowMs: 10_000 }, { warn: (line) => warnings.push(line) });
    expect(await queue.deliver(token(1, 2), alert)).to.equal("failed");
    expect(warnings.join("\n")).to.include("driver_error").and.include("broken");
  });
});

describe("the provider push notifier", () => {
  it("sends each token through its platform's queue, the others to the fallback, and reports the rejected tokens", async () => {
    const apns = new ScriptedDriver([{ outcome: "token-rejected", reason: "unregistered" }], 1);
    const viaFallback: PushTokenRecord[] = [];
    const fallback: PushNotifier = {
      send: async (tokens) => {
        viaFallback.push(...tokens);
        return { rejected: [] };
      },
    };
    const notifier = new ProviderPushNotifier([new ProviderQueue(apns, { concurrency: 4, queueLimit: 10, retryWindowMs: 0 }, quiet)], fallback);
    const report = await notifier.send([token(1, 1), token(2, 2)], alert);
    expect(apns.attempts.map((attempt) => attempt.token.userId)).to.deep.equal([1]);
    expect(viaFallback.map((t) => t.userId)).to.deep.equal([2]);
    expect(report.rejected.map((t) => t.userId)).to.deep.equal([1]);
  });

  it("counts tokens no driver serves, when there is no fallback", async () => {
    const before = counted(pushFailed.bind({ provider: "fcm", reason: "no_driver" }));
    const report = await new ProviderPushNotifier([], undefined).send([token(3, 2)], alert);
    expect(report.rejected).to.deep.equal([]);
    expect(counted(pushFailed.bind({ provider: "fcm", reason: "no_driver" })) - before).to.equal(1);
  });
});
