// Webhook signatures (operator contract): X-Service-Signature is "sha256=" + lowercase hex of
// HMAC-SHA256(secretKey, timestamp + "." + rawBody); X-Service-Timestamp is Unix seconds.
import { createHmac } from "node:crypto";

export const SignatureHeaders = { timestamp: "x-service-timestamp", signature: "x-service-signature" } as const;

export function signWebhookBody(secretKey: string, timestamp: number, rawBody: string): string {
  return "sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${rawBody}`).digest("hex");
}
