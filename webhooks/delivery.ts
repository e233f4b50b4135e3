// One signed webhook POST with the answer limit (5 seconds unless a test shortens it).
import { Agent, request } from "undici";
import { signatureHeaders } from "./signing.js";
import { guardedLookup, privateLiteralHost } from "./ssrf-guard.js";

export const webhookTimeoutMs = 5000;

/**
 * A failure says what went wrong as far as it is known: the status of a non-2xx answer, no answer
 * within the limit (timedOut), a private address refused by the SSRF guard (blocked), a request
 * cancelled by shutdown (aborted); none of them for a network error.
 */
export type DeliveryOutcome = { ok: true; status: number } | { ok: false; reason: string; status?: number; timedOut?: boolean; blocked?: boolean; aborted?: boolean };

export interface WebhookClientOptions {
  allowPrivateNetworks: boolean;
  /** The whole request (connect, TLS, answer headers and body) must finish within this. */
  timeoutMs?: number;
}

export class WebhookClient {
  private readonly dispatcher: Agent;
  private readonly timeoutMs: number;
  private readonly allowPrivateNetworks: boolean;

  constructor({ allowPrivateNetworks, timeoutMs }: WebhookClientOptions) {
    this.timeoutMs = timeoutMs ?? webhookTimeoutMs;
    this.allowPrivateNetworks = allowPrivateNetworks;
    this.dispatcher = new Agent({
      connect: { lookup: guardedLookup(allowPrivateNetworks) as never, timeout: this.timeoutMs },
      headersTimeout: this.timeoutMs,
      bodyTimeout: this.timeoutMs,
      keepAliveTimeout: 30_000,
    });
  }

  /**
   * POSTs the body signed with the key; 2xx within the time limit is success. Redirects are not
   * followed (a 3xx is a failure), so a receiver cannot bounce the request past the SSRF guard.
   * `signal` cancels the request (shutdown); the outcome then says `aborted`.
   */
  async post(url: string, secretKey: string, body: string, signal?: AbortSignal): Promise<DeliveryOutcome> {
    // Real time, not the engine clock: receivers compare the timestamp with their own clocks.
    const timestamp = Math.floor(Date.now() / 1000);
    // A host written as an IP address is never looked up, so the guarded lookup cannot see it.
    if (!this.allowPrivateNetworks && privateLiteralHost(url)) return { ok: false, reason: "EPRIVATE", blocked: true };
    const timeout = AbortSignal.timeout(this.timeoutMs);
    try {
      const response = await request(url, {
        method: "POST",
        dispatcher: this.dispatcher,
        headers: {
          "content-type": "application/json",
          ...signatureHeaders(secretKey, timestamp, body),
        },
        body,
        signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
      });
      await response.body.dump();
      if (response.statusCode >= 200 && response.statusCode < 300) return { ok: true, status: response.statusCode };
      return { ok: false, reason: `answered HTTP ${response.statusCode}`, status: response.statusCode };
    } catch (err) {
      if (signal?.aborted) return { ok: false, reason: "cancelled", aborted: true };
      if (timeout.aborted) return { ok: false, reason: `no answer within ${this.timeoutMs} ms`, timedOut: true };
      const error = err as { code?: string; cause?: { code?: string }; message?: string };
      const code = error.cause?.code ?? error.code;
      // The guarded lookup refuses a host name that resolves to a private address with EPRIVATE.
      if (code === "EPRIVATE") return { ok: false, reason: code, blocked: true };
      return { ok: false, reason: code ?? error.message ?? "request failed" };
    }
  }

  async close(): Promise<void> {
    await this.dispatcher.destroy();
  }
}
