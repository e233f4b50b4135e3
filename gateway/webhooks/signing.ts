// Webhook signatures (operator contract): X-Service-Signature is "sha256=" + lowercase hex of
// HMAC-SHA256(secretKey, timestamp + "." + rawBody); X-Service-Timestamp is Unix seconds.
import { createHmac, timingSafeEqual } from "node:crypto";

export const SignatureHeaders = { timestamp: "x-service-timestamp", signature: "x-service-signature" } as const;

/** Receivers should refuse requests older than this, to stop replays. */
export const maxSignatureAgeSeconds = 5 * 60;

export function signWebhookBody(secretKey: string, timestamp: number, rawBody: string): string {
  return "sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${rawBody}`).digest("hex");
}

/** Whether a received request is authentic and fresh, compared in constant time. */
export function verifyWebhookSignature(secretKey: string, timestampHeader: string, signatureHeader: string, rawBody: string, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
  const timestamp = Number(timestampHeader);
  if (!Number.isInteger(timestamp) || Math.abs(nowSeconds - timestamp) > maxSignatureAgeSeconds) return false;
  const expected = Buffer.from(signWebhookBody(secretKey, timestamp, rawBody));
  const actual = Buffer.from(signatureHeader);
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}
