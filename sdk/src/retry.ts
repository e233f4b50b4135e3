// Calls the server answered UNAVAILABLE are tried again after the delay the answer names: every
// such answer carries `retryAfterMs` in its ErrorDetail. Those answers come while a key's owner
// moves (an engine restarted, a node left) and last a few hundred milliseconds to a few seconds;
// an application that had to catch each one would show its user errors for what the client can
// ride out.
//
// A call is sent again only when that cannot apply it twice: the answer's reason says it was never
// applied (the key's owner refused it, or no engine took it), or the call changes nothing a second
// time (reads, SendMessage with its clientMessageId, MarkAsRead up to a position). Anything else
// answered "it may or may not have taken effect" reaches the application as it is.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { errorDetailOf } from "./errors.js";

export interface RetryPolicy {
  /** Sends of one call at most, the first included. */
  maxAttempts: number;
  /** Ceiling of one wait, whatever the server asks. */
  maxDelayMs: number;
}

export const defaultRetry: RetryPolicy = { maxAttempts: 5, maxDelayMs: 5_000 };

/** Reasons of an UNAVAILABLE answer given before the call was applied anywhere. */
const neverApplied = new Set(["OWNERSHIP_ELSEWHERE", "OWNERSHIP_LOST", "NO_ENGINE"]);

/** Methods a second send of which changes nothing the first did not. */
function isIdempotent(method: string): boolean {
  return /^(Get|List|Search|Resolve|BatchGet)/.test(method) || method === "SendMessage" || method === "MarkAsRead";
}

/**
 * How long the server asks to wait before trying `err`'s call again, in milliseconds: an
 * UNAVAILABLE answer's `retryAfterMs`, or a rate limit's `retryAfterSeconds`; undefined when the
 * answer names no delay (do not retry it as it is).
 */
export function retryDelayOf(err: unknown): number | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  const metadata = errorDetailOf(err)?.metadata ?? {};
  const ms = err.code === Code.Unavailable ? Number(metadata.retryAfterMs) : Number(metadata.retryAfterSeconds) * 1000;
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

/** Sends a unary call again, after the delay the server names, while it answers UNAVAILABLE and a resend is safe. */
export function retryInterceptor(policy: RetryPolicy = defaultRetry): Interceptor {
  return (next) => async (req) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await next(req);
      } catch (err) {
        if (req.stream || attempt >= policy.maxAttempts || !(err instanceof ConnectError) || err.code !== Code.Unavailable) throw err;
        const delay = retryDelayOf(err);
        const reason = errorDetailOf(err)?.metadata.reason ?? "";
        if (delay === undefined || !(neverApplied.has(reason) || isIdempotent(req.method.name))) throw err;
        await pause(Math.min(delay, policy.maxDelayMs), req.signal);
        if (req.signal.aborted) throw err;
      }
    }
  };
}
