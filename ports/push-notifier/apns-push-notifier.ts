// Apple Push Notification service: the HTTP/2 provider API with token-based authentication (an
// ES256 JWT signed with the team's .p8 key). Each token is sent to the production or the sandbox
// host as its device registered it (isSandbox); answers are read as Apple documents them.
import type { KeyObject } from "node:crypto";
import { SignJWT } from "jose";
import type { ApnsSettings } from "../../shared/config.js";
import type { PushTokenRecord } from "../store/store.js";
import { Http2Origin, OriginUnreachable } from "./http2-origin.js";
import { privateKeyFrom, readCredential } from "./provider-credentials.js";
import type { AttemptResult, ProviderDriver } from "./provider-push-notifier.js";
import type { PushNotification } from "./push-notifier.js";
import { collapseKey, expiresAt, retryAfterMs, type ProviderConnections } from "./provider-payloads.js";

/**
 * Apple refuses a provider token older than an hour and one renewed more often than every 20
 * minutes (TooManyProviderTokenUpdates): renewed at 50 minutes, inside both.
 */
export const apnsTokenRenewalMs = 50 * 60_000;
const apnsTokenMinimumAgeMs = 20 * 60_000;

/** The provider token (JWT) every request carries, signed once and reused until it is due. */
export class ApnsProviderToken {
  private current: { jwt: Promise<string>; signedAt: number } | undefined;

  constructor(
    private readonly key: KeyObject,
    private readonly keyId: string,
    private readonly teamId: string,
    private readonly now: () => number = Date.now,
  ) {}

  jwt(): Promise<string> {
    const now = this.now();
    if (!this.current || now - this.current.signedAt >= apnsTokenRenewalMs) {
      const jwt = new SignJWT({})
        .setProtectedHeader({ alg: "ES256", kid: this.keyId })
        .setIssuer(this.teamId)
        .setIssuedAt(Math.floor(now / 1000))
        .sign(this.key);
      this.current = { jwt, signedAt: now };
      // A failed signature is not kept: the next request signs again.
      jwt.catch(() => {
        if (this.current?.jwt === jwt) this.current = undefined;
      });
    }
    return this.current.jwt;
  }

  /** After ExpiredProviderToken: renews unless the token is too young for Apple to take a new one. */
  renewAfterExpiry(): boolean {
    if (!this.current || this.now() - this.current.signedAt < apnsTokenMinimumAgeMs) return false;
    this.current = undefined;
    return true;
  }
}

/** The .p8 key of APNS_KEY_FILE or APNS_KEY, checked to be the P-256 key Apple issues. */
export function loadApnsKey(settings: ApnsSettings): KeyObject {
  const { text, origin } = readCredential(settings.key, "APNS_KEY");
  return privateKeyFrom(text, origin, { type: "ec", curve: "prime256v1", what: "the P-256 signing key (.p8) Apple issued" });
}

/**
 * A silent notification that sets the badge (ClearBadge's badge 0) is an alert without alert or
 * sound, as Apple asks (a badge change is a user-visible effect, which background pushes may not
 * have); one with nothing to show wakes the app in the background.
 */
export function apnsPushType(notification: PushNotification): "alert" | "background" {
  return notification.silent && notification.badge === undefined ? "background" : "alert";
}

/** The aps dictionary: an alert with sound and thread, a bare badge, or content-available alone. */
export function apsOf(notification: PushNotification): Record<string, unknown> {
  const badge = notification.badge === undefined ? {} : { badge: notification.badge };
  if (notification.silent) return apnsPushType(notification) === "background" ? { "content-available": 1 } : badge;
  const { message } = notification;
  return {
    alert: { title: notification.title ?? "", body: notification.body ?? "" },
    ...badge,
    sound: "default",
    ...(message ? { "thread-id": message.conversationId } : {}),
  };
}

/** The JSON body of a notification; the message's ids are custom keys beside aps, as strings. */
export function apnsPayload(notification: PushNotification): Record<string, unknown> {
  if (notification.silent) return { aps: apsOf(notification) };
  const { message } = notification;
  return {
    aps: apsOf(notification),
    ...(message ? { conversationId: message.conversationId, messageId: message.messageId, senderId: String(message.senderId) } : {}),
  };
}

/** The apns-* headers, also sent inside an FCM message's APNs block. */
export function apnsHeaders(notification: PushNotification, ttlSeconds: number, nowMs: number): Record<string, string> {
  const collapse = collapseKey(notification);
  return {
    "apns-push-type": apnsPushType(notification),
    // Silent pushes go at priority 5 (power-friendly; Apple refuses 10 for background ones).
    "apns-priority": notification.silent ? "5" : "10",
    "apns-expiration": String(expiresAt(ttlSeconds, nowMs)),
    ...(collapse ? { "apns-collapse-id": collapse } : {}),
  };
}

export class ApnsDriver implements ProviderDriver {
  readonly provider = "apns";
  readonly platform = 1;
  private readonly production: Http2Origin;
  private readonly sandbox: Http2Origin;
  private readonly providerToken: ApnsProviderToken;

  constructor(
    private readonly settings: ApnsSettings,
    private readonly connections: ProviderConnections,
  ) {
    this.providerToken = new ApnsProviderToken(loadApnsKey(settings), settings.keyId, settings.teamId);
    this.production = new Http2Origin(settings.productionUrl, connections.perHost, connections.requestTimeoutMs);
    this.sandbox = new Http2Origin(settings.sandboxUrl, connections.perHost, connections.requestTimeoutMs);
  }

  async attempt(token: PushTokenRecord, notification: PushNotification): Promise<AttemptResult> {
    const host = token.isSandbox ? this.sandbox : this.production;
    const jwt = await this.providerToken.jwt();
    const headers = {
      authorization: `bearer ${jwt}`,
      "content-type": "application/json",
      "apns-topic": this.settings.topic,
      ...apnsHeaders(notification, this.connections.ttlSeconds, Date.now()),
    };
    try {
      const answer = await host.post(`/3/device/${encodeURIComponent(token.token)}`, headers, JSON.stringify(apnsPayload(notification)));
      if (answer.status === 200) return { outcome: "sent" };
      return this.judge(answer.status, reasonOf(answer.body), retryAfterMs(answer.headers["retry-after"]));
    } catch (err) {
      if (err instanceof OriginUnreachable) return { outcome: "retry", reason: err.kind };
      throw err;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.production.close(), this.sandbox.close()]);
  }

  /** Apple's answers ("Handling notification responses from APNs"), as what to do next. */
  private judge(status: number, reason: string | undefined, retryAfter: number | undefined): AttemptResult {
    if (status === 200) return { outcome: "sent" };
    if (status === 410) return { outcome: "token-rejected", reason: "unregistered" };
    if (status === 400 && (reason === "BadDeviceToken" || reason === "DeviceTokenNotForTopic")) return { outcome: "token-rejected", reason: "bad_token" };
    if (status === 429) return { outcome: "retry", reason: "rate_limited", retryAfterMs: retryAfter };
    if (status >= 500) return { outcome: "retry", reason: "provider_error", retryAfterMs: retryAfter };
    if (status === 403 && reason === "ExpiredProviderToken" && this.providerToken.renewAfterExpiry()) return { outcome: "retry", reason: "auth" };
    if (status === 403) return { outcome: "failed", reason: "auth" };
    return { outcome: "failed", reason: "bad_request" };
  }
}

function reasonOf(body: string): string | undefined {
  if (body === "") return undefined;
  try {
    const parsed = JSON.parse(body) as { reason?: unknown };
    return typeof parsed.reason === "string" ? parsed.reason : undefined;
  } catch {
    return undefined;
  }
}
