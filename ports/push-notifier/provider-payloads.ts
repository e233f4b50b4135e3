// What the APNs and FCM drivers put alike into a request: the collapse key, the expiry, and how a
// Retry-After header reads.
import type { PushNotification } from "./push-notifier.js";

/** How a driver reaches its provider (PUSH_* settings). */
export interface ProviderConnections {
  perHost: number;
  requestTimeoutMs: number;
  ttlSeconds: number;
}

/**
 * One per conversation, so a phone shows the newest alert of a conversation in place of the older
 * ones (apns-collapse-id, FCM collapse_key and tag); a silent push collapses with nothing.
 */
export function collapseKey(notification: PushNotification): string | undefined {
  return notification.message && !notification.silent ? `conversation-${notification.message.conversationId}` : undefined;
}

/** APNs expiration in Unix seconds; 0 asks the provider to try once and keep nothing. */
export function expiresAt(ttlSeconds: number, nowMs: number): number {
  return ttlSeconds === 0 ? 0 : Math.floor(nowMs / 1000) + ttlSeconds;
}

/** Retry-After in seconds (the form both providers use), as milliseconds; undefined when absent or unreadable. */
export function retryAfterMs(header: string | string[] | undefined): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value.trim()) * 1000;
}
