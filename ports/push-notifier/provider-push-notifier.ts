// What every provider driver shares: a bounded queue per provider and node, a cap on requests in
// flight, retries of passing trouble (429, 5xx, timeouts, lost connections) with backoff and
// jitter inside a bounded window, and the per-provider metrics. A driver only says how one
// request to one device went (AttemptResult); the routing by the token's platform is here too.
import type { PushTokenRecord } from "../store/store.js";
import { pushFailed, pushQueueDepth, pushRequestDuration, pushRetries, pushSent } from "../../shared/metrics.js";
import type { PushNotification, PushNotifier, PushReport } from "./push-notifier.js";

export type ProviderName = "apns" | "fcm";

/** How one request to one device went, as the provider answered it. */
export type AttemptResult =
  | { outcome: "sent" }
  /** The token will never reach a device again (unregistered, malformed, another app's): remove it. */
  | { outcome: "token-rejected"; reason: string }
  /** Passing trouble: worth trying again, after retryAfterMs when the provider said. */
  | { outcome: "retry"; reason: string; retryAfterMs?: number }
  /** A final answer that is not the token's fault (a payload or credential the provider refused). */
  | { outcome: "failed"; reason: string };

export interface ProviderDriver {
  readonly provider: ProviderName;
  /** PushPlatform value of the tokens it serves. */
  readonly platform: number;
  attempt(token: PushTokenRecord, notification: PushNotification): Promise<AttemptResult>;
  close(): Promise<void>;
}

export interface ProviderPolicy {
  concurrency: number;
  queueLimit: number;
  retryWindowMs: number;
}

export type Delivery = "sent" | "token-rejected" | "failed";

/** Backoff of the n-th retry (from 1), before jitter; the provider's Retry-After wins when longer. */
const backoffBaseMs = 250;
const backoffCapMs = 8_000;
/** At most one warning per provider and reason in this time, with the count it stands for. */
const warningIntervalMs = 10_000;

interface Job {
  token: PushTokenRecord;
  notification: PushNotification;
  deadline: number;
  retries: number;
  done: (delivery: Delivery) => void;
}

interface Logger {
  warn(message: string): void;
}

/** One provider's queue on this node. */
export class ProviderQueue {
  private readonly waiting: Job[] = [];
  private inFlight = 0;
  private backingOff = 0;
  private readonly stopSampling: () => void;
  private readonly warned = new Map<string, { at: number; suppressed: number }>();
  private readonly durations;
  private readonly sent;

  constructor(
    private readonly driver: ProviderDriver,
    private readonly policy: ProviderPolicy,
    private readonly log: Logger,
    private readonly random: () => number = Math.random,
  ) {
    this.durations = pushRequestDuration.bind({ provider: driver.provider });
    this.sent = pushSent.bind({ provider: driver.provider });
    this.stopSampling = pushQueueDepth.sample({ provider: driver.provider }, () => this.depth);
  }

  get platform(): number {
    return this.driver.platform;
  }

  /** Notifications accepted and not yet answered or given up, in flight excluded. */
  get depth(): number {
    return this.waiting.length + this.backingOff;
  }

  deliver(token: PushTokenRecord, notification: PushNotification): Promise<Delivery> {
    if (this.depth >= this.policy.queueLimit) {
      this.fail(token, "queue_full", `queue of ${this.policy.queueLimit} is full`);
      return Promise.resolve("failed");
    }
    return new Promise((done) => {
      this.waiting.push({ token, notification, deadline: Date.now() + this.policy.retryWindowMs, retries: 0, done });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.stopSampling();
    await this.driver.close();
  }

  private pump(): void {
    while (this.inFlight < this.policy.concurrency && this.waiting.length > 0) {
      const job = this.waiting.shift()!;
      this.inFlight++;
      void this.run(job).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async run(job: Job): Promise<void> {
    const startedAt = performance.now();
    let result: AttemptResult;
    try {
      result = await this.driver.attempt(job.token, job.notification);
    } catch (err) {
      // A driver answers every provider response; a throw is a bug or a broken credential file.
      result = { outcome: "failed", reason: "driver_error" };
      this.warn("driver_error", `${err instanceof Error ? err.message : String(err)}`);
    }
    this.durations.observe((performance.now() - startedAt) / 1000);
    switch (result.outcome) {
      case "sent":
        this.sent.inc();
        job.done("sent");
        return;
      case "token-rejected":
        pushFailed.bind({ provider: this.driver.provider, reason: result.reason }).inc();
        job.done("token-rejected");
        return;
      case "failed":
        this.fail(job.token, result.reason, "refused by the provider");
        job.done("failed");
        return;
      case "retry": {
        job.retries++;
        const backoff = Math.min(backoffCapMs, backoffBaseMs * 2 ** (job.retries - 1)) * (0.5 + this.random() / 2);
        const delay = Math.max(backoff, result.retryAfterMs ?? 0);
        if (Date.now() + delay > job.deadline) {
          this.fail(job.token, result.reason, `given up after ${job.retries} attempts`);
          job.done("failed");
          return;
        }
        pushRetries.bind({ provider: this.driver.provider, reason: result.reason }).inc();
        this.backingOff++;
        // The slot is given back while the job waits, so one slow device does not hold others up.
        setTimeout(() => {
          this.backingOff--;
          this.waiting.unshift(job);
          this.pump();
        }, delay).unref();
      }
    }
  }

  private fail(token: PushTokenRecord, reason: string, detail: string): void {
    pushFailed.bind({ provider: this.driver.provider, reason }).inc();
    this.warn(reason, `user ${token.userId} device ${token.deviceId}: ${detail}`);
  }

  /** A provider outage fails thousands of notifications a second: one line per reason per interval says it. */
  private warn(reason: string, detail: string): void {
    const now = Date.now();
    const last = this.warned.get(reason);
    if (last && now - last.at < warningIntervalMs) {
      last.suppressed++;
      return;
    }
    const more = last && last.suppressed > 0 ? ` (and ${last.suppressed} more since the last warning)` : "";
    this.warned.set(reason, { at: now, suppressed: 0 });
    this.log.warn(`${this.driver.provider} push failed (${reason}): ${detail}${more}`);
  }
}

/** Sends each token through its platform's provider queue; tokens of a platform with no provider go to `fallback` when there is one. */
export class ProviderPushNotifier implements PushNotifier {
  private readonly queues = new Map<number, ProviderQueue>();

  constructor(
    queues: readonly ProviderQueue[],
    private readonly fallback: PushNotifier | undefined,
  ) {
    for (const queue of queues) this.queues.set(queue.platform, queue);
  }

  async send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<PushReport> {
    const rejected: PushTokenRecord[] = [];
    const unserved = tokens.filter((token) => !this.queues.has(token.platform));
    const [fallbackReport] = await Promise.all([
      unserved.length === 0 ? undefined : this.sendUnserved(unserved, notification),
      ...tokens
        .filter((token) => this.queues.has(token.platform))
        .map(async (token) => {
          if ((await this.queues.get(token.platform)!.deliver(token, notification)) === "token-rejected") rejected.push(token);
        }),
    ]);
    return { rejected: [...rejected, ...(fallbackReport?.rejected ?? [])] };
  }

  async close(): Promise<void> {
    await Promise.all([...this.queues.values()].map((queue) => queue.close()));
  }

  private async sendUnserved(tokens: PushTokenRecord[], notification: PushNotification): Promise<PushReport> {
    if (this.fallback) return this.fallback.send(tokens, notification);
    for (const token of tokens) pushFailed.bind({ provider: token.platform === 1 ? "apns" : "fcm", reason: "no_driver" }).inc();
    return { rejected: [] };
  }
}
