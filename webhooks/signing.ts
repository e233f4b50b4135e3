// Webhook signatures (operator contract): X-Service-Signature is "sha256=" + lowercase hex of
// HMAC-SHA256(secretKey, timestamp + "." + rawBody); X-Service-Timestamp is Unix seconds.
// The same two values also go as X-Nexus-Signature and X-Nexus-Timestamp, the names the upstream
// SDKs (nexus-x, nexus-openclaw) read, so agents built on them verify our requests unchanged.
import { createHmac } from "node:crypto";

export const SignatureHeaders = { timestamp: "x-service-timestamp", signature: "x-service-signature" } as const;
export const UpstreamSignatureHeaders = { timestamp: "x-nexus-timestamp", signature: "x-nexus-signature" } as const;

export function signWebhookBody(secretKey: string, timestamp: number, rawBody: string): string {
  return "sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${rawBody}`).digest("hex");
}

/** Both header sets of one signed request, carrying the same timestamp and signature. */
export function signatureHeaders(secretKey: string, timestamp: number, rawBody: string): Record<string, string> {
  const signature = signWebhookBody(secretKey, timestamp, rawBody);
  return {
    [SignatureHeaders.timestamp]: String(timestamp),
    [SignatureHeaders.signature]: signature,
    [UpstreamSignatureHeaders.timestamp]: String(timestamp),
    [UpstreamSignatureHeaders.signature]: signature,
  };
}
