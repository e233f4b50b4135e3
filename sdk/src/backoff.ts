// Reconnection delays. When a server restarts, every client it held loses its connection at the
// same moment; retrying on a fixed schedule would bring them all back at once, again and again.
// Delays grow exponentially up to a ceiling and half of each is random ("equal jitter"): the
// clients spread out, yet none retries immediately after a failure.

export interface BackoffPolicy {
  /** Ceiling of the first retry's delay. */
  initialMs: number;
  /** No delay exceeds this. */
  maxMs: number;
  /** Growth of the ceiling per failed attempt. */
  multiplier: number;
}

export const defaultBackoff: BackoffPolicy = { initialMs: 500, maxMs: 30_000, multiplier: 2 };

/** The delay before retry number `attempt` (0 for the first): between half and all of its ceiling. */
export function backoffDelay(attempt: number, policy: BackoffPolicy = defaultBackoff, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxMs, policy.initialMs * policy.multiplier ** Math.max(0, attempt));
  return ceiling / 2 + (random() * ceiling) / 2;
}
