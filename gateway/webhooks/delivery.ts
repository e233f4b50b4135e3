// One signed webhook POST with the 5-second answer limit.
import { Agent, request } from "undici";
import { SignatureHeaders, signWebhookBody } from "./signing.js";
import { guardedLookup } from "./ssrf-guard.js";

export const webhookTimeoutMs = 5000;

export type DeliveryOutcome = { ok: true; status: number } | { ok: false; reason: string };

export class WebhookClient {
  private readonly dispatcher: Agent;

  constructor(allowPrivateNetworks: boolean) {
    this.dispatcher = new Agent({
      connect: { lookup: guardedLookup(allowPrivateNetworks) as never, timeout: webhookTimeoutMs },
      headersTimeout: webhookTimeoutMs,
      bodyTimeout: webhookTimeoutMs,
      keepAliveTimeout: 30_000,
    });
  }

  /** POSTs the body signed with the key; 2xx within the time limit is success. */
  async post(url: string, secretKey: string, body: string): Promise<DeliveryOutcome> {
    const timestamp = Math.floor(Date.now() / 1000);
    try {
      const response = await request(url, {
        method: "POST",
        dispatcher: this.dispatcher,
        headers: {
          "content-type": "application/json",
          [SignatureHeaders.timestamp]: String(timestamp),
          [SignatureHeaders.signature]: signWebhookBody(secretKey, timestamp, body),
        },
        body,
        signal: AbortSignal.timeout(webhookTimeoutMs),
      });
      await response.body.dump();
      if (response.statusCode >= 200 && response.statusCode < 300) return { ok: true, status: response.statusCode };
      return { ok: false, reason: `answered HTTP ${response.statusCode}` };
    } catch (err) {
      const error = err as { code?: string; cause?: { code?: string }; message?: string };
      return { ok: false, reason: error.cause?.code ?? error.code ?? error.message ?? "request failed" };
    }
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}
