// Drains the durable webhook queue. Each agent's jobs go out one at a time in queue order (the
// head of an agent's queue blocks the rest until it is delivered or abandoned), while up to
// `concurrency` agents are served at once, so a slow or dead endpoint holds one slot, never the
// others. A failed attempt (non-2xx, timeout, refused connection) is retried after 1, 2, 4… times
// `retryBaseMs`; after `maxRetries` retries the job is dropped and logged: the entry stays in the
// agent's stream, so nothing more durable than a log line is kept for it. The agent's target
// (URL, key, mode) is read at send time, so a new key or URL applies to queued jobs too. A job of
// an agent no longer in WEBHOOK mode is not sent and not dropped here: the agent is handed back
// to its inbox, which drops the queue and rewinds the delivered position over it in the agent's
// mailbox (a mode change normally did that already; this covers a crash in between). Dropping it
// here could race an append still routed the old way and skip entries for good.
//
// The queue is looked at when the engine announces new jobs (a record on the webhooks topic, see
// fleet.ts), when a retry falls due, when a delivery finishes, and every `pollIntervalMs` as a
// safety net. Times in
// the queue are engine-clock times, so tests that move the clock move retries with it.
import type { ServiceSchema } from "moleculer";
import {
  type AgentSlice,
  type QueuedWebhook,
  type WebhookQueue,
  type WebhookTargetResolver,
} from "../shared/agent-delivery.js";
import { WebhookClient, webhookTimeoutMs, type DeliveryOutcome } from "./delivery.js";
import type { WebhookFleetMember } from "./fleet.js";
import { webhookUrlProblem } from "./ssrf-guard.js";
import { webhookAgents, webhookAttempts, webhookDeliveryDelay, webhookRequestDuration, webhookSlots } from "../shared/metrics.js";
import type { CounterSeries } from "../shared/metric-series.js";
import { backgroundFailed, retryInBackground, type BackgroundRetry } from "../shared/background.js";
import { callAction } from "../shared/actions.js";

export interface DispatcherPolicy {
  /** Deliveries in flight at once, across agents (one per agent at a time). */
  concurrency: number;
  /** Retries after a failed first attempt; the job is dropped when the last one fails. */
  maxRetries: number;
  /** Wait before the first retry; each later retry waits twice as long as the one before. */
  retryBaseMs: number;
  /** Answer limit of one request. */
  timeoutMs: number;
  /** How often the queue is looked at without being woken. */
  pollIntervalMs: number;
}

export const defaultDispatcherPolicy: DispatcherPolicy = {
  concurrency: 32,
  maxRetries: 3,
  retryBaseMs: 1000,
  timeoutMs: webhookTimeoutMs,
  pollIntervalMs: 1000,
};

const failureClasses = ["3xx", "4xx", "5xx", "timeout", "network", "refused"] as const;
type FailureClass = (typeof failureClasses)[number];
const failedAttempts = (result: "retried" | "dead") =>
  Object.fromEntries(failureClasses.map((statusClass) => [statusClass, webhookAttempts.bind({ result, status_class: statusClass })])) as Record<FailureClass, CounterSeries>;
const countedAttempts = {
  delivered: webhookAttempts.bind({ result: "delivered", status_class: "2xx" }),
  retried: failedAttempts("retried"),
  dead: failedAttempts("dead"),
  cancelled: webhookAttempts.bind({ result: "cancelled", status_class: "cancelled" }),
};
const requestDelivered = webhookRequestDuration.bind({ result: "delivered" });
const requestFailed = webhookRequestDuration.bind({ result: "failed" });

/** What kind of failure an attempt met, for the attempts counter. */
function failureClassOf(outcome: Extract<DeliveryOutcome, { ok: false }>): FailureClass {
  if (outcome.status !== undefined) return outcome.status >= 500 ? "5xx" : outcome.status >= 400 ? "4xx" : "3xx";
  if (outcome.timedOut) return "timeout";
  if (outcome.blocked) return "refused";
  return "network";
}

/** Sends one request; WebhookClient in production. */
export interface WebhookPoster {
  post(url: string, secretKey: string, body: string, signal?: AbortSignal): Promise<DeliveryOutcome>;
  close(): Promise<void>;
}

interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string, err?: unknown): void;
}

export interface DispatcherOptions {
  queue: WebhookQueue;
  resolveTarget: WebhookTargetResolver;
  /** Unix milliseconds of the engine clock. */
  now: () => number;
  allowPrivateNetworks: boolean;
  policy?: Partial<DispatcherPolicy>;
  /** Replaces the HTTPS client (tests). */
  poster?: WebhookPoster;
  /** The agents this node serves, when the fleet splits them (fleet.ts); every agent when absent. */
  slice?: () => AgentSlice;
  /**
   * Takes the agent's delivery lock across the fleet for one delivery (fleet.ts), answering its
   * release, or undefined when another node holds it; no lock when absent (one dispatcher).
   */
  claim?: (agentUserId: number) => Promise<(() => Promise<void>) | undefined>;
}

/**
 * Hands an agent with queued jobs that is not in WEBHOOK mode back to its inbox
 * ("sync.deliveryModeChanged"), which drops the queue and rewinds its delivered position.
 */
export type HandBack = (agentUserId: number) => Promise<void>;

export class WebhookDispatcher {
  private readonly policy: DispatcherPolicy;
  private readonly poster: WebhookPoster;
  /** Agents with a delivery in flight. */
  private readonly busy = new Set<number>();
  private readonly deliveries = new Set<Promise<void>>();
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  private readonly shutdown = new AbortController();
  private poller: NodeJS.Timeout | undefined;
  private pumping: Promise<void> | undefined;
  private wanted = false;
  private running = false;
  private unsample: (() => void)[] = [];

  constructor(
    private readonly options: DispatcherOptions & { handBack: HandBack },
    private readonly logger: Logger,
  ) {
    this.policy = { ...defaultDispatcherPolicy, ...options.policy };
    this.poster = options.poster ?? new WebhookClient({ allowPrivateNetworks: options.allowPrivateNetworks, timeoutMs: this.policy.timeoutMs });
  }

  start(): void {
    this.running = true;
    this.unsample = [
      webhookAgents.sample({ state: "delivering" }, () => this.busy.size),
      webhookAgents.sample({ state: "awaiting_retry" }, () => this.retryTimers.size),
      webhookSlots.sample({}, () => this.policy.concurrency),
    ];
    this.poller = setInterval(() => this.wake(), this.policy.pollIntervalMs);
    this.poller.unref();
    // Jobs left from before a restart are due (or fall due) without any new wake-up.
    this.wake();
  }

  /** Jobs were queued for these agents by another process: their queues are looked at now. */
  announced(agentUserIds: readonly number[]): void {
    this.options.queue.announced(agentUserIds);
    this.wake();
  }

  /** Looks at the queue soon; calls while a look is under way fold into one more look. */
  wake(): void {
    if (!this.running) return;
    this.wanted = true;
    if (this.pumping) return;
    this.pumping = (async () => {
      try {
        while (this.wanted && this.running) {
          this.wanted = false;
          await this.fill();
        }
      } catch (err) {
        // The poller tries again; a queue that cannot be read must not stop the process.
        backgroundFailed("webhook_queue", err, this.logger, "reading the webhook queue");
      } finally {
        this.pumping = undefined;
      }
    })();
  }

  /** Starts the due head job of every agent that has none in flight, up to the free slots. */
  private async fill(): Promise<void> {
    const room = this.policy.concurrency - this.busy.size;
    if (room <= 0) return;
    const jobs = await this.options.queue.due(this.options.now(), [...this.busy], room, this.options.slice?.());
    for (const job of jobs) {
      if (!this.running || this.busy.has(job.agentUserId)) continue;
      this.busy.add(job.agentUserId);
      let release: (() => Promise<void>) | undefined;
      let lockedElsewhere = false;
      const delivery: Promise<void> = (async () => {
        if (this.options.claim) {
          release = await this.options.claim(job.agentUserId);
          // Another node delivers to this agent right now (a rebalance moving it): it goes on
          // there, and this node looks again at its next poll, not at once.
          lockedElsewhere = !release;
          if (lockedElsewhere) return;
        }
        await this.deliver(job);
      })()
        // The job stays queued as it was: the next look at the queue takes it again.
        .catch((err: unknown) => backgroundFailed("webhook_queue", err, this.logger, `settling webhook job ${job.jobId} of agent ${job.agentUserId}`))
        .finally(async () => {
          await release?.().catch((err: unknown) => backgroundFailed("webhook_queue", err, this.logger, `releasing the delivery lock of agent ${job.agentUserId}`));
          this.busy.delete(job.agentUserId);
          this.deliveries.delete(delivery);
          if (!lockedElsewhere) this.wake();
        });
      this.deliveries.add(delivery);
    }
  }

  private async deliver(job: QueuedWebhook): Promise<void> {
    const { queue } = this.options;
    const target = await this.options.resolveTarget(job.agentUserId);
    if (!target) {
      try {
        await this.options.handBack(job.agentUserId);
        this.logger.info(`handed the webhook queue of agent ${job.agentUserId} back to its inbox: it is no longer in webhook mode`);
      } catch (err) {
        this.logger.error(`could not hand the webhook queue of agent ${job.agentUserId} back to its inbox`, err);
      }
      // Normally the job is gone now. If it is not (the hand-back failed, or the agent went back
      // to WEBHOOK mode meanwhile) it waits one retry step instead of spinning; not the endpoint's
      // failure, so no attempt is counted.
      await queue.reschedule(job, job.attempts, this.options.now() + this.policy.retryBaseMs);
      return;
    }
    const problem = webhookUrlProblem(target.url);
    const outcome: DeliveryOutcome = problem ? { ok: false, reason: problem, blocked: true } : await this.timedPost(target.url, target.secretKey, job.body);
    if (outcome.ok) {
      await queue.remove(job);
      countedAttempts.delivered.inc();
      webhookDeliveryDelay.observe(Math.max(0, this.options.now() - job.queuedAt) / 1000);
      return;
    }
    // Cut off by shutdown: not the endpoint's failure, so the job stays as it was for the next start.
    if (outcome.aborted) {
      countedAttempts.cancelled.inc();
      return;
    }
    const failureClass = failureClassOf(outcome);
    const attempts = job.attempts + 1;
    if (attempts > this.policy.maxRetries) {
      await queue.remove(job);
      countedAttempts.dead[failureClass].inc();
      this.logger.warn(`webhook delivery ${job.jobId} to agent ${job.agentUserId} abandoned after ${attempts} attempts; last failure: ${outcome.reason}`);
      return;
    }
    const delay = this.policy.retryBaseMs * 2 ** (attempts - 1);
    await queue.reschedule(job, attempts, this.options.now() + delay);
    countedAttempts.retried[failureClass].inc();
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.wake();
    }, delay);
    timer.unref();
    this.retryTimers.add(timer);
  }

  /** Posts the job's body, timing the request; a request cut off by shutdown says nothing of the endpoint and is not timed. */
  private async timedPost(url: string, secretKey: string, body: string): Promise<DeliveryOutcome> {
    const startedAt = performance.now();
    const outcome = await this.poster.post(url, secretKey, body, this.shutdown.signal);
    if (outcome.ok) requestDelivered.observeSince(startedAt);
    else if (!outcome.aborted) requestFailed.observeSince(startedAt);
    return outcome;
  }

  /** Resolves once no delivery to an agent `leaving` names is in flight (its agents move to another node). */
  async settle(leaving: (agentUserId: number) => boolean): Promise<void> {
    while ([...this.busy].some(leaving)) await Promise.race([...this.deliveries]);
  }

  /** Stops taking jobs, cancels requests in flight (their jobs stay queued) and waits for them. */
  async stop(): Promise<void> {
    this.running = false;
    for (const unsample of this.unsample.splice(0)) unsample();
    clearInterval(this.poller);
    for (const timer of this.retryTimers) clearTimeout(timer);
    this.retryTimers.clear();
    this.shutdown.abort();
    await this.pumping;
    await Promise.allSettled([...this.deliveries]);
    await this.poster.close();
  }
}

/** The Moleculer service of the webhooks role: the dispatcher of this node's share of the agents. */
export function webhookDispatcherService(options: DispatcherOptions & { fleet: WebhookFleetMember }): ServiceSchema {
  let dispatcher: WebhookDispatcher;
  let joining: BackgroundRetry | undefined;
  const { fleet } = options;
  return {
    name: "webhookDispatcher",
    created() {
      const logger = this.logger;
      const handBack: HandBack = async (agentUserId) => {
        await callAction(this.broker, "sync.deliveryModeChanged", { userId: agentUserId });
      };
      dispatcher = new WebhookDispatcher({ ...options, slice: () => fleet.slice, handBack }, {
        info: (message) => logger.info(message),
        warn: (message) => logger.warn(message),
        error: (message, err) => logger.error(message, err),
      });
    },
    async started() {
      dispatcher.start();
      // Until it joins, this node serves no agent (its slice is empty) but stays up: the join is
      // tried again until the log answers. A first join that succeeds is done before start ends.
      joining = retryInBackground("webhook_fleet", () => fleet.join(dispatcher, (err) => this.logger.warn(`webhook fleet: ${String(err)}`)), this.logger, "joining the webhook fleet");
      await joining.firstTry;
    },
    async stopped() {
      // Requests in flight are cut off first (their jobs stay queued, no attempt counted), so
      // leaving the group hands the agents over at once.
      await dispatcher.stop();
      await joining?.stop();
      await fleet.leave();
    },
  };
}
