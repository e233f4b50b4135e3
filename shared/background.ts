// Work a process does on its own, outside any request: the recovery pass at start, sweeps, lease
// renewals, retries, queue loops, heartbeats. Nobody waits for it to answer, so an error there
// has nobody to go to: thrown out, it ended the whole process (an engine restarted after a crash
// met a lease another node still held during its recovery pass and exited, its recovery undone).
// The rule (docs/OPERATIONS.md): no error of such work ends a process; it is logged with the
// task's name, counted in parley_background_failures_total{task, reason}, and the work is tried
// again (its own timer, or retryInBackground) or left to whoever owns it now.
import moleculer from "moleculer";
import { parleyErrorParts } from "./errors.js";
import { backgroundFailures } from "./metrics.js";
import type { CounterSeries } from "./metric-series.js";

/** The background tasks, each a label value of parley_background_failures_total (the complete set: docs/METRICS.md). */
export const backgroundTasks = [
  /** The pass at start that finishes the fan-outs and system messages a crash cut short (server.ts). */
  "startup_recovery",
  /** The periodic sweep finishing fan-outs cut short (engine/messages/conversation-actor.ts). */
  "fanout_sweep",
  /** Ending streamed messages nobody continued (engine/messages/conversation-actor.ts). */
  "stream_sweep",
  /** Removing expired upload sessions (engine/media/media-service.ts). */
  "upload_sweep",
  /** Renewing this engine's ownership leases (engine/ownership.ts). */
  "ownership_renewal",
  /** Giving up the shards placed on another engine after a membership change (engine/ownership.ts). */
  "ownership_rebalance",
  /** Renewing this engine's fan-out id slot (engine/delivery/fan-out-ids.ts). */
  "fanout_id_renewal",
  /** What follows an agent's deletion: leaving its groups, telling its contacts (engine/agents/agent-service.ts). */
  "agent_deletion",
  /** Creating the webhook topic on the update log at start, until Kafka is reachable (server.ts). */
  "webhook_topic",
  /** Telling the webhook fleet that an agent's queue grew (a record on the update log). */
  "webhook_announce",
  /** Reading the webhook queue and settling deliveries (webhooks/dispatcher.ts). */
  "webhook_queue",
  /** Joining the webhook fleet's consumer group (webhooks/fleet.ts). */
  "webhook_fleet",
  /** The gateway's presence heartbeat (gateway/gateway-service.ts). */
  "presence_heartbeat",
  /** A rejected promise nothing handled, caught by the process's last line of defence (main.ts). */
  "unhandled_rejection",
] as const;

export type BackgroundTask = (typeof backgroundTasks)[number];

/** Why a background task failed, the other label of parley_background_failures_total. */
export const failureReasons = [
  /** A lease refused or lost: another node owns the key now (its work is that node's). */
  "ownership",
  /** A store query, a call to a peer or a broker request that ran out of time. */
  "timeout",
  /** A peer, a node or a backing service that could not be reached. */
  "unreachable",
  /** Anything else. */
  "error",
] as const;

export type FailureReason = (typeof failureReasons)[number];

const networkCodes = new Set(["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "EPIPE", "ECONNABORTED"]);

/** The reason label of an error, from what its kind says (errors of any driver; unknown ones are "error"). */
export function failureReasonOf(err: unknown): FailureReason {
  const parts = parleyErrorParts(err);
  if (parts?.metadata.reason === "OWNERSHIP_ELSEWHERE" || parts?.metadata.reason === "OWNERSHIP_LOST") return "ownership";
  const { name, code } = (typeof err === "object" && err !== null ? err : {}) as { name?: unknown; code?: unknown };
  if (name === "OwnershipLostError") return "ownership";
  if (err instanceof moleculer.Errors.RequestTimeoutError || name === "OperationTimedOutError" || name === "TimeoutError" || code === "ETIMEDOUT") return "timeout";
  if (
    err instanceof moleculer.Errors.ServiceNotAvailableError ||
    err instanceof moleculer.Errors.ServiceNotFoundError ||
    err instanceof moleculer.Errors.RequestRejectedError ||
    name === "NoHostAvailableError" ||
    name === "NetworkError" ||
    (typeof code === "string" && networkCodes.has(code))
  ) {
    return "unreachable";
  }
  return "error";
}

// Bound once: counting a failure must not itself fail or allocate a label key.
const series = new Map<string, CounterSeries>();
for (const task of backgroundTasks) for (const reason of failureReasons) series.set(`${task}/${reason}`, backgroundFailures.bind({ task, reason }));

export interface BackgroundLogger {
  warn(...args: unknown[]): void;
}

/** Logs and counts a failure of a background task; never throws. `what` says what was being done, for the log line. */
export function backgroundFailed(task: BackgroundTask, err: unknown, logger: BackgroundLogger, what: string = task.replace(/_/g, " ")): void {
  const reason = failureReasonOf(err);
  series.get(`${task}/${reason}`)!.inc();
  try {
    logger.warn(`${what} failed (${reason}): ${err instanceof Error ? err.message : String(err)}`);
  } catch {
    // A logger that throws must not turn a counted failure into an uncaught one.
  }
}

/** Runs a background task once; a failure is logged and counted (backgroundFailed), never thrown. Answers whether it succeeded. */
export async function runInBackground(task: BackgroundTask, run: () => Promise<unknown>, logger: BackgroundLogger, what?: string): Promise<boolean> {
  try {
    await run();
    return true;
  } catch (err) {
    backgroundFailed(task, err, logger, what);
    return false;
  }
}

export interface RetryPolicy {
  /** Wait before the first retry; each later one waits twice as long as the one before. */
  firstDelayMs: number;
  /** The longest wait between two tries. */
  maxDelayMs: number;
  /** The first try waits firstDelayMs too: the task has just failed elsewhere. */
  waitFirst?: boolean;
}

export const defaultRetryPolicy: RetryPolicy = { firstDelayMs: 1_000, maxDelayMs: 30_000 };

/** A task retried in the background until it succeeds or is stopped. */
export interface BackgroundRetry {
  /** Resolves with whether the first try succeeded, once it ended. */
  readonly firstTry: Promise<boolean>;
  /** Resolves true once a try succeeded, false once stopped before that. */
  readonly done: Promise<boolean>;
  /** Stops retrying (a try under way still runs to its end); resolves once no try runs. */
  stop(): Promise<void>;
}

/**
 * Tries the task now and, while it fails, again after 1, 2, 4… times `firstDelayMs` (at most
 * `maxDelayMs`); every failure is logged and counted. The waits keep the process alive only as
 * long as the task has something to do (the timers are unref'd).
 */
export function retryInBackground(task: BackgroundTask, run: () => Promise<unknown>, logger: BackgroundLogger, what?: string, policy: RetryPolicy = defaultRetryPolicy): BackgroundRetry {
  let stopped = false;
  let wake = () => {};
  let firstTried = (_succeeded: boolean) => {};
  const firstTry = new Promise<boolean>((resolve) => (firstTried = resolve));
  const done = (async () => {
    const waited = policy.waitFirst ? 1 : 0;
    for (let attempt = 0; !stopped; attempt++) {
      if (attempt + waited > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(policy.maxDelayMs, policy.firstDelayMs * 2 ** (attempt + waited - 1)));
          timer.unref();
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        if (stopped) return false;
      }
      const succeeded = await runInBackground(task, run, logger, what);
      if (attempt === 0) firstTried(succeeded);
      if (succeeded) return true;
    }
    return false;
  })();
  return {
    firstTry,
    done,
    async stop() {
      stopped = true;
      wake();
      await done;
    },
  };
}

/**
 * The process's last line of defence, installed once the node serves (main.ts): a rejected
 * promise nothing handled is logged with its stack and counted as task `unhandled_rejection`, and
 * the process keeps serving. Answers the call that removes it. See docs/OPERATIONS.md for why
 * rejections, and not synchronous exceptions nor failures during start-up, are treated so.
 */
export function keepServingThroughUnhandledRejections(logger: BackgroundLogger & { error(...args: unknown[]): void }): () => void {
  const onRejection = (reason: unknown) => {
    backgroundFailed("unhandled_rejection", reason, logger, "a promise nothing awaited");
    try {
      logger.error("unhandled rejection: a bug, its path must catch its own errors", reason);
    } catch {
      // Logging must not turn it into an uncaught exception.
    }
  };
  process.on("unhandledRejection", onRejection);
  return () => void process.off("unhandledRejection", onRejection);
}
