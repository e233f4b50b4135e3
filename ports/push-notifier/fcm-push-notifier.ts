// Firebase Cloud Messaging, HTTP v1 API: a service account signs a JWT assertion, Google's token
// endpoint trades it for an OAuth 2.0 access token, and that token is reused until shortly before
// it expires. One message per device token, with an Android block and an APNs block (an iOS app
// registered through FCM gets its alert, badge and collapse id from the latter).
import type { KeyObject } from "node:crypto";
import { SignJWT } from "jose";
import { request } from "undici";
import type { FcmSettings } from "../../shared/config.js";
import type { PushTokenRecord } from "../store/store.js";
import { Http2Origin, OriginUnreachable } from "./http2-origin.js";
import { privateKeyFrom, readCredential } from "./provider-credentials.js";
import { apnsHeaders, apsOf } from "./apns-push-notifier.js";
import { collapseKey, retryAfterMs, type ProviderConnections } from "./provider-payloads.js";
import type { AttemptResult, ProviderDriver } from "./provider-push-notifier.js";
import type { PushNotification } from "./push-notifier.js";

const fcmScope = "https://www.googleapis.com/auth/firebase.messaging";
/** An access token is renewed this long before Google said it expires, so no request carries a dying one. */
const accessTokenMarginMs = 5 * 60_000;

export interface ServiceAccount {
  projectId: string;
  clientEmail: string;
  privateKeyId: string | undefined;
  privateKey: KeyObject;
  tokenUri: string;
}

/** The service account of FCM_SERVICE_ACCOUNT_FILE or FCM_SERVICE_ACCOUNT, every field it needs checked. */
export function loadServiceAccount(settings: FcmSettings): ServiceAccount {
  const { text, origin } = readCredential(settings.serviceAccount, "FCM_SERVICE_ACCOUNT");
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`${origin} is not JSON (a Google service account key file): ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const field = (name: string): string => {
    const value = parsed?.[name];
    if (typeof value !== "string" || value === "") throw new Error(`${origin} has no ${name}: it must be a Google service account key file`);
    return value;
  };
  if (field("type") !== "service_account") throw new Error(`${origin} is of type ${JSON.stringify(parsed.type)}, not service_account`);
  const tokenUri = field("token_uri");
  if (!/^https:\/\//.test(tokenUri)) throw new Error(`${origin}: token_uri must be an https:// URL; got ${JSON.stringify(tokenUri)}`);
  return {
    projectId: settings.projectId ?? field("project_id"),
    clientEmail: field("client_email"),
    privateKeyId: typeof parsed.private_key_id === "string" ? parsed.private_key_id : undefined,
    privateKey: privateKeyFrom(field("private_key"), `${origin} (private_key)`, { type: "rsa", what: "the service account's RSA key" }),
    tokenUri,
  };
}

/** Trouble getting an access token: worth a retry unless Google refused the assertion itself. */
class AccessTokenTrouble extends Error {
  constructor(
    readonly retryable: boolean,
    message: string,
  ) {
    super(message);
  }
}

/** Google's OAuth 2.0 access token for the service account, fetched once and shared until it is due. */
export class GoogleAccessToken {
  private current: { token: Promise<string>; renewAt: number } | undefined;

  /** `now` schedules renewals; the assertion itself carries the real time, which Google checks. */
  constructor(
    private readonly account: ServiceAccount,
    private readonly timeoutMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  token(): Promise<string> {
    if (!this.current || this.now() >= this.current.renewAt) {
      const current = { token: Promise.resolve(""), renewAt: Number.POSITIVE_INFINITY };
      current.token = this.exchange().then(({ accessToken, lifetimeMs }) => {
        // Renewed a margin early, or at half its life when it lives shorter than twice the margin.
        current.renewAt = this.now() + Math.max(lifetimeMs - accessTokenMarginMs, lifetimeMs / 2);
        return accessToken;
      });
      // A failed exchange is not kept: the next request tries again.
      current.token.catch(() => {
        if (this.current === current) this.current = undefined;
      });
      this.current = current;
    }
    return this.current.token;
  }

  /** After a 401: the token was revoked or the clocks disagree; the next request gets a new one. */
  forget(token: Promise<string>): void {
    if (this.current?.token === token) this.current = undefined;
  }

  private async exchange(): Promise<{ accessToken: string; lifetimeMs: number }> {
    const issuedAt = Math.floor(Date.now() / 1000);
    const assertion = await new SignJWT({ scope: fcmScope })
      .setProtectedHeader({ alg: "RS256", typ: "JWT", ...(this.account.privateKeyId ? { kid: this.account.privateKeyId } : {}) })
      .setIssuer(this.account.clientEmail)
      .setAudience(this.account.tokenUri)
      .setIssuedAt(issuedAt)
      .setExpirationTime(issuedAt + 3600)
      .sign(this.account.privateKey);
    let status: number;
    let text: string;
    try {
      const answer = await request(this.account.tokenUri, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion }).toString(),
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      status = answer.statusCode;
      text = await answer.body.text();
    } catch (err) {
      throw new AccessTokenTrouble(true, `token endpoint ${this.account.tokenUri} unreachable: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (status !== 200) throw new AccessTokenTrouble(status >= 500 || status === 429, `token endpoint answered ${status}: ${text.slice(0, 200)}`);
    let body: { access_token?: unknown; expires_in?: unknown };
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      throw new AccessTokenTrouble(true, "token endpoint answered something other than JSON");
    }
    if (typeof body.access_token !== "string" || typeof body.expires_in !== "number") throw new AccessTokenTrouble(true, "token endpoint answered no access_token");
    return { accessToken: body.access_token, lifetimeMs: body.expires_in * 1000 };
  }
}

/** The FCM v1 message for one device: data as strings (FCM's rule), with Android and APNs blocks. */
export function fcmMessage(token: string, notification: PushNotification, ttlSeconds: number, nowMs: number): Record<string, unknown> {
  const { message, silent } = notification;
  const collapse = collapseKey(notification);
  const data: Record<string, string> = {
    ...(message ? { conversationId: message.conversationId, messageId: message.messageId, senderId: String(message.senderId) } : {}),
    ...(notification.badge === undefined ? {} : { badge: String(notification.badge) }),
  };
  return {
    token,
    ...(Object.keys(data).length > 0 ? { data } : {}),
    ...(silent ? {} : { notification: { title: notification.title ?? "", body: notification.body ?? "" } }),
    android: {
      priority: silent ? "normal" : "high",
      ttl: `${ttlSeconds}s`,
      ...(collapse ? { collapse_key: collapse } : {}),
      ...(silent ? {} : { notification: { ...(collapse ? { tag: collapse } : {}), ...(notification.badge === undefined ? {} : { notification_count: notification.badge }) } }),
    },
    // FCM builds the alert from `notification`; the APNs block adds the rest of what a direct APNs push carries.
    apns: { headers: apnsHeaders(notification, ttlSeconds, nowMs), payload: { aps: withoutAlert(apsOf(notification)) } },
  };
}

function withoutAlert(aps: Record<string, unknown>): Record<string, unknown> {
  const { alert: _alert, ...rest } = aps;
  return rest;
}

interface GoogleError {
  status?: string;
  details?: { "@type"?: string; errorCode?: string; fieldViolations?: { field?: string }[] }[];
}

export class FcmDriver implements ProviderDriver {
  readonly provider = "fcm";
  readonly platform = 2;
  private readonly account: ServiceAccount;
  private readonly accessToken: GoogleAccessToken;
  private readonly origin: Http2Origin;

  constructor(
    settings: FcmSettings,
    private readonly connections: ProviderConnections,
  ) {
    this.account = loadServiceAccount(settings);
    this.accessToken = new GoogleAccessToken(this.account, connections.requestTimeoutMs);
    this.origin = new Http2Origin(settings.url, connections.perHost, connections.requestTimeoutMs);
  }

  async attempt(token: PushTokenRecord, notification: PushNotification): Promise<AttemptResult> {
    const accessToken = this.accessToken.token();
    let bearer: string;
    try {
      bearer = await accessToken;
    } catch (err) {
      if (err instanceof AccessTokenTrouble) return err.retryable ? { outcome: "retry", reason: "auth" } : { outcome: "failed", reason: "auth" };
      throw err;
    }
    const body = JSON.stringify({ message: fcmMessage(token.token, notification, this.connections.ttlSeconds, Date.now()) });
    try {
      const answer = await this.origin.post(`/v1/projects/${encodeURIComponent(this.account.projectId)}/messages:send`, { authorization: `Bearer ${bearer}`, "content-type": "application/json" }, body);
      if (answer.status === 200) return { outcome: "sent" };
      const result = judge(answer.status, googleErrorOf(answer.body), retryAfterMs(answer.headers["retry-after"]));
      if (answer.status === 401 && result.outcome === "retry") this.accessToken.forget(accessToken);
      return result;
    } catch (err) {
      if (err instanceof OriginUnreachable) return { outcome: "retry", reason: err.kind };
      throw err;
    }
  }

  async close(): Promise<void> {
    await this.origin.close();
  }
}

/** FCM's answers ("FCM error codes" of the v1 API), as what to do next. */
function judge(status: number, error: GoogleError | undefined, retryAfter: number | undefined): AttemptResult {
  if (status === 200) return { outcome: "sent" };
  const details = error?.details ?? [];
  const code = details.find((detail) => detail["@type"]?.endsWith("google.firebase.fcm.v1.FcmError"))?.errorCode;
  const tokenIsTheProblem = details.some((detail) => detail.fieldViolations?.some((violation) => violation.field === "message.token"));
  if (code === "UNREGISTERED" || (status === 404 && code === undefined)) return { outcome: "token-rejected", reason: "unregistered" };
  if (status === 400 && (code === "INVALID_ARGUMENT" || code === undefined) && tokenIsTheProblem) return { outcome: "token-rejected", reason: "bad_token" };
  if (status === 429 || code === "QUOTA_EXCEEDED") return { outcome: "retry", reason: "rate_limited", retryAfterMs: retryAfter };
  if (status >= 500 || code === "UNAVAILABLE" || code === "INTERNAL") return { outcome: "retry", reason: "provider_error", retryAfterMs: retryAfter };
  // A 401 without THIRD_PARTY_AUTH_ERROR is our access token (revoked, or the clocks disagree): a new one may do.
  if (status === 401 && code !== "THIRD_PARTY_AUTH_ERROR") return { outcome: "retry", reason: "auth" };
  if (status === 401 || status === 403) return { outcome: "failed", reason: "auth" };
  return { outcome: "failed", reason: "bad_request" };
}

function googleErrorOf(body: string): GoogleError | undefined {
  try {
    const parsed = JSON.parse(body) as { error?: GoogleError };
    return typeof parsed.error === "object" && parsed.error !== null ? parsed.error : undefined;
  } catch {
    return undefined;
  }
}
