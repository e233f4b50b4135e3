// Stand-ins for Apple's and Google's push services, so the push drivers run end to end in the
// tests and nothing ever reaches api.push.apple.com or fcm.googleapis.com. Each is a local HTTP/2
// TLS server (certificate from scripts/test-tls.sh, trusted via NODE_EXTRA_CA_CERTS) that holds a
// driver to the providers' documented contract rather than to what the driver happens to send:
// - APNs provider API with token-based auth ("Sending notification requests to APNs", "Establishing
//   a token-based connection to APNs", "Handling notification responses from APNs"); one fake is
//   one host, so production and sandbox are two fakes.
// - FCM HTTP v1 messages:send, plus Google's OAuth 2.0 token endpoint for service accounts (the
//   JWT bearer grant, RFC 7523), both on one fake since the service account's token_uri names it.
// A request that breaks the contract gets the provider's own error; scripted answers (answerNext,
// answerFor) only replace the answer to a request that was otherwise valid.
//
// Credentials are made at run time, so no key is ever committed:
//   const apnsKey = makeApnsCredentials(dir);            // AuthKey_<keyId>.p8 plus its public half
//   const apns = await startFakeApns({ ...apnsKey, topic: "com.example.app" });
// The service account's token_uri has to name the fake, which has to know the account's public key,
// project and e-mail first; so the account's identity is made before either, then written out:
//   const account = generateServiceAccountKeys();
//   const fcm = await startFakeFcm(account);             // or { ...account, accessTokenTtlSeconds }
//   const { file } = makeFcmServiceAccount(dir, fcm.tokenUri, account);
import { generateKeyPairSync, randomBytes, randomInt, randomUUID, verify, type KeyObject } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import {
  createSecureServer,
  type Http2SecureServer,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type ServerHttp2Session,
} from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { join } from "node:path";
import { testTlsDir } from "./https-receiver.js";

// ---------------------------------------------------------------------------------------------
// Credentials

export interface ApnsCredentials {
  /** <dir>/AuthKey_<keyId>.p8, the file Apple lets a developer download once. */
  keyFile: string;
  /** PKCS#8 PEM of an EC P-256 private key, as in that file. */
  keyPem: string;
  publicKey: KeyObject;
  keyId: string;
  teamId: string;
}

export function makeApnsCredentials(dir: string): ApnsCredentials {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const keyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  const keyId = randomUppercaseAlnum(10);
  const keyFile = join(dir, `AuthKey_${keyId}.p8`);
  writeFileSync(keyFile, keyPem, { mode: 0o600 });
  return { keyFile, keyPem, publicKey, keyId, teamId: randomUppercaseAlnum(10) };
}

/** A service account before it is written out: what startFakeFcm needs, plus what the file holds. */
export interface ServiceAccountKeys {
  /** PKCS#8 PEM of an RSA 2048 private key, as in Google's JSON key files. */
  privateKeyPem: string;
  publicKey: KeyObject;
  privateKeyId: string;
  projectId: string;
  clientEmail: string;
  clientId: string;
}

export function generateServiceAccountKeys(): ServiceAccountKeys {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const projectId = `parley-test-${randomLowercaseAlnum(6)}`;
  return {
    privateKeyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    publicKey,
    privateKeyId: randomBytes(20).toString("hex"),
    projectId,
    clientEmail: `firebase-adminsdk-${randomLowercaseAlnum(5)}@${projectId}.iam.gserviceaccount.com`,
    clientId: String(randomInt(1, 10)) + Array.from({ length: 20 }, () => randomInt(0, 10)).join(""),
  };
}

export interface FcmServiceAccount {
  /** <dir>/service-account.json */
  file: string;
  json: Record<string, string>;
  publicKey: KeyObject;
  projectId: string;
  clientEmail: string;
}

/** Writes a key file shaped exactly like the one the Firebase console downloads, with token_uri set to `tokenUri`. */
export function makeFcmServiceAccount(dir: string, tokenUri: string, keys: ServiceAccountKeys = generateServiceAccountKeys()): FcmServiceAccount {
  const json: Record<string, string> = {
    type: "service_account",
    project_id: keys.projectId,
    private_key_id: keys.privateKeyId,
    private_key: keys.privateKeyPem,
    client_email: keys.clientEmail,
    client_id: keys.clientId,
    auth_uri: "https://accounts.google.com/o/oauth2/auth",
    token_uri: tokenUri,
    auth_provider_x509_cert_url: "https://www.googleapis.com/oauth2/v1/certs",
    client_x509_cert_url: `https://www.googleapis.com/robot/v1/metadata/x509/${encodeURIComponent(keys.clientEmail)}`,
    universe_domain: "googleapis.com",
  };
  const file = join(dir, "service-account.json");
  writeFileSync(file, `${JSON.stringify(json, null, 2)}\n`, { mode: 0o600 });
  return { file, json, publicKey: keys.publicKey, projectId: keys.projectId, clientEmail: keys.clientEmail };
}

// ---------------------------------------------------------------------------------------------
// What both fakes share

/** Controls common to both fakes. */
interface FakeProviderControls {
  /** https://localhost:<port> */
  url: string;
  /** Wait this long before each answer (latency, or an outage with a client timeout shorter than it). */
  delayMs: number;
  /** Holds every answer (arrived requests included) until release(). */
  hold(): void;
  release(): void;
  /** Requests that have arrived and are not answered yet (held or delayed). */
  readonly inFlight: number;
  /** HTTP/2 sessions opened by clients since start (an HTTP/1.1 connection counts as one). */
  readonly sessionsOpened: number;
  /** Drops every open connection, as a provider does when it restarts, and keeps listening. */
  disconnectAll(): void;
  /** Forgets answerNext and answerFor. */
  clearAnswers(): void;
  close(): Promise<void>;
}

/** A request once answered; `delivered` is false when the client had gone before the answer. */
interface Arrival {
  headers: Record<string, string>;
  body: string;
  status: number;
  at: number;
  sessionId: number;
  delivered: boolean;
}

type AnyRequest = Http2ServerRequest | IncomingMessage;
type AnyResponse = Http2ServerResponse | ServerResponse;

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The plumbing both fakes stand on: TLS server, connection ids, delay and hold, scripted-answer queue. */
class ProviderServer<Scripted> {
  readonly server: Http2SecureServer;
  url = "";
  delayMs = 0;
  inFlight = 0;
  sessionsOpened = 0;
  private readonly connectionIds = new WeakMap<object, number>();
  private readonly sessions = new Set<ServerHttp2Session>();
  private readonly sockets = new Set<Socket>();
  private held: { promise: Promise<void>; release: () => void } | undefined;
  private readonly scriptedNext: { remaining: number; answer: Scripted }[] = [];
  readonly scriptedFor = new Map<string, Scripted>();
  private readonly waiters = new Set<() => void>();

  constructor(allowHTTP1: boolean, handle: (request: AnyRequest, response: AnyResponse, body: Buffer) => Promise<void>) {
    const dir = testTlsDir();
    this.server = createSecureServer({ key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")), allowHTTP1 });
    this.server.on("session", (session: ServerHttp2Session) => {
      this.connectionIds.set(session, ++this.sessionsOpened);
      this.sessions.add(session);
      session.once("close", () => this.sessions.delete(session));
      // A client hanging up mid-stream is ordinary for a provider, not a reason to crash the tests.
      session.on("error", () => {});
    });
    this.server.on("connection", (socket: Socket) => {
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
    });
    this.server.on("request", (request: AnyRequest, response: AnyResponse) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => void handle(request, response, Buffer.concat(chunks)));
      request.on("error", () => {});
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", () => resolve()));
    this.url = `https://localhost:${(this.server.address() as AddressInfo).port}`;
  }

  sessionIdOf(request: AnyRequest): number {
    // A stream whose session is already gone still came on some connection: count it as its own.
    const connection: object = ("stream" in request ? request.stream.session : request.socket) ?? request;
    let id = this.connectionIds.get(connection);
    if (id === undefined) {
      // An HTTP/1.1 connection: no "session" event announced it.
      id = ++this.sessionsOpened;
      this.connectionIds.set(connection, id);
    }
    return id;
  }

  answerNext(count: number, answer: Scripted): void {
    if (!Number.isInteger(count) || count < 1) throw new Error(`answerNext needs a positive count, got ${count}`);
    this.scriptedNext.push({ remaining: count, answer });
  }

  /** The scripted answer for a valid request to `key`: answerFor first, then the answerNext queue in order. */
  takeScripted(key: string | undefined): Scripted | undefined {
    if (key !== undefined && this.scriptedFor.has(key)) return this.scriptedFor.get(key);
    const next = this.scriptedNext[0];
    if (!next) return undefined;
    if (--next.remaining === 0) this.scriptedNext.shift();
    return next.answer;
  }

  clearAnswers(): void {
    this.scriptedNext.length = 0;
    this.scriptedFor.clear();
  }

  hold(): void {
    if (this.held) return;
    let release = () => {};
    const promise = new Promise<void>((resolve) => (release = resolve));
    this.held = { promise, release };
  }

  release(): void {
    const held = this.held;
    this.held = undefined;
    held?.release();
  }

  /** Waits out delayMs and any hold, writes the answer if the client is still there, and says whether it was. */
  async answer(request: AnyRequest, response: AnyResponse, answer: Answer): Promise<boolean> {
    this.inFlight++;
    try {
      if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
      while (this.held) await this.held.promise;
      if (response.destroyed || ("stream" in request && (request.stream.destroyed || request.stream.closed))) return false;
      try {
        response.writeHead(answer.status, answer.headers);
        response.end(answer.body);
        return true;
      } catch {
        return false;
      }
    } finally {
      this.inFlight--;
    }
  }

  wake(): void {
    for (const wake of this.waiters) wake();
  }

  async waitFor(done: () => boolean, describeShortfall: () => string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(describeShortfall());
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, 100));
        this.waiters.add(wake);
      });
    }
  }

  disconnectAll(): void {
    for (const session of this.sessions) session.destroy();
    for (const socket of this.sockets) socket.destroy();
  }

  async close(): Promise<void> {
    // Held answers go out (to destroyed streams) so no handler is left pending forever.
    this.release();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      // Every socket, including those still in their TLS handshake, or close() waits on them.
      this.disconnectAll();
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Fake APNs

export interface FakeApnsOptions {
  publicKey: KeyObject;
  keyId: string;
  teamId: string;
  /** The app's bundle ID; a push type that needs a suffixed topic (voip: "<topic>.voip") gets it added. */
  topic: string;
}

export interface ApnsArrival extends Arrival {
  /** From /3/device/<deviceToken>; "" when the path was not one. */
  deviceToken: string;
  /** The parsed body; undefined when it was not JSON. */
  payload: unknown;
  reason?: string;
  /** The apns-id it answered with (the request's when valid, else a fresh one). */
  apnsId: string;
}

export interface ApnsScriptedAnswer {
  status: number;
  /** Defaults by status: 400 BadDeviceToken, 403 InvalidProviderToken, 410 Unregistered, 413 PayloadTooLarge, 429 TooManyRequests, 500 InternalServerError, 503 ServiceUnavailable. */
  reason?: string;
  retryAfterSeconds?: number;
}

export interface FakeApns extends FakeProviderControls {
  received: ApnsArrival[];
  /** The 200 answers that reached the client. */
  readonly accepted: ApnsArrival[];
  /** Every distinct bearer token presented, valid or not: one per driver means it reuses its JWT. */
  jwtsSeen: Set<string>;
  /** The next `count` valid requests get `answer` (queued after earlier answerNext calls). */
  answerNext(count: number, answer: ApnsScriptedAnswer): void;
  /** Every valid request for `deviceToken` gets `answer`, until clearAnswers(); takes precedence over answerNext. */
  answerFor(deviceToken: string, answer: ApnsScriptedAnswer): void;
  /** Resolves with the first `count` accepted once that many were. */
  waitForAccepted(count: number, timeoutMs?: number): Promise<ApnsArrival[]>;
}

const APNS_PUSH_TYPES = new Set(["alert", "background", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk"]);
// Apple's docs: these push types go to the bundle ID with a suffix; mdm goes to the MDM topic, which
// is what a test configures as `topic` for it.
const APNS_TOPIC_SUFFIXES: Record<string, string> = {
  voip: ".voip",
  complication: ".complication",
  fileprovider: ".pushkit.fileprovider",
  liveactivity: ".push-type.liveactivity",
  pushtotalk: ".voip-ptt",
};
const APNS_DEFAULT_REASONS: Record<number, string> = {
  400: "BadDeviceToken",
  403: "InvalidProviderToken",
  405: "MethodNotAllowed",
  410: "Unregistered",
  413: "PayloadTooLarge",
  429: "TooManyRequests",
  500: "InternalServerError",
  503: "ServiceUnavailable",
};
const PROVIDER_TOKEN_LIFETIME_S = 3600;
// A clock a little ahead is tolerated; an iat in milliseconds (about 1000 times now) is not.
const CLOCK_SKEW_S = 60;

export async function startFakeApns(options: FakeApnsOptions): Promise<FakeApns> {
  const details = options.publicKey.asymmetricKeyDetails;
  if (options.publicKey.asymmetricKeyType !== "ec" || details?.namedCurve !== "prime256v1") throw new Error("startFakeApns needs the public half of an EC P-256 key");
  const received: ApnsArrival[] = [];
  const jwtsSeen = new Set<string>();

  const host: ProviderServer<ApnsScriptedAnswer> = new ProviderServer(false, async (request, response, body) => {
    const headers = flattenHeaders(request.headers);
    const path = request.url ?? "";
    const deviceToken = /^\/3\/device\/([^/?]+)$/.exec(path)?.[1] ?? "";
    const requestedId = headers["apns-id"];
    const apnsId = requestedId !== undefined && UUID.test(requestedId) ? requestedId.toLowerCase() : randomUUID();
    const text = body.toString("utf8");
    const payload = parseJson(text);
    const verdict = judgeApns(request.method ?? "", path, deviceToken, headers, body, payload) ?? answerOf(host.takeScripted(deviceToken));
    const responseHeaders: Record<string, string> = { "apns-id": apnsId };
    let responseBody = "";
    if (verdict.status !== 200) {
      const reason = verdict.reason ?? APNS_DEFAULT_REASONS[verdict.status] ?? "InternalServerError";
      verdict.reason = reason;
      responseHeaders["content-type"] = "application/json";
      responseBody = JSON.stringify(verdict.status === 410 ? { reason, timestamp: Date.now() } : { reason });
    }
    if (verdict.retryAfterSeconds !== undefined) responseHeaders["retry-after"] = String(verdict.retryAfterSeconds);
    const at = Date.now();
    const sessionId = host.sessionIdOf(request);
    const delivered = await host.answer(request, response, { status: verdict.status, headers: responseHeaders, body: responseBody });
    received.push({ deviceToken, headers, body: text, payload, status: verdict.status, ...(verdict.reason ? { reason: verdict.reason } : {}), apnsId, at, sessionId, delivered });
    host.wake();
  });

  function answerOf(scripted: ApnsScriptedAnswer | undefined): ApnsScriptedAnswer {
    return scripted ? { ...scripted } : { status: 200 };
  }

  /** The error a valid APNs would give this request, or undefined when it would accept it. */
  function judgeApns(method: string, path: string, deviceToken: string, headers: Record<string, string>, body: Buffer, payload: unknown): ApnsScriptedAnswer | undefined {
    const fail = (status: number, reason: string) => ({ status, reason });
    if (method !== "POST") return fail(405, "MethodNotAllowed");
    if (!deviceToken) return fail(404, "BadPath");
    const authProblem = checkProviderToken(headers["authorization"]);
    if (authProblem) return fail(403, authProblem);
    if (headers["apns-id"] !== undefined && !UUID.test(headers["apns-id"])) return fail(400, "BadMessageId");
    const pushType = headers["apns-push-type"];
    if (pushType === undefined || !APNS_PUSH_TYPES.has(pushType)) return fail(400, "InvalidPushType");
    const topic = headers["apns-topic"];
    if (topic === undefined) return fail(400, "MissingTopic");
    if (topic !== options.topic + (APNS_TOPIC_SUFFIXES[pushType] ?? "")) return fail(400, "TopicDisallowed");
    // Absent means 10, which background pushes may not use.
    const priority = headers["apns-priority"] ?? "10";
    if (!["10", "5", "1"].includes(priority)) return fail(400, "BadPriority");
    if (pushType === "background" && priority !== "5") return fail(400, "BadPriority");
    if (headers["apns-expiration"] !== undefined && !/^\d+$/.test(headers["apns-expiration"])) return fail(400, "BadExpirationDate");
    if (headers["apns-collapse-id"] !== undefined && Buffer.byteLength(headers["apns-collapse-id"]) > 64) return fail(400, "BadCollapseId");
    if (!/^[0-9a-fA-F]+$/.test(deviceToken) || deviceToken.length % 2 !== 0) return fail(400, "BadDeviceToken");
    if (body.length === 0) return fail(400, "PayloadEmpty");
    if (body.length > (pushType === "voip" ? 5120 : 4096)) return fail(413, "PayloadTooLarge");
    if (!isObject(payload) || !isObject(payload.aps)) return fail(400, "BadPayload");
    if (pushType === "background") {
      const aps = payload.aps;
      if (aps["content-available"] !== 1 || "alert" in aps || "sound" in aps || "badge" in aps) return fail(400, "BadPayload");
    }
    return undefined;
  }

  /** Why the provider token is refused (Apple's reason), or undefined when it is good. */
  function checkProviderToken(authorization: string | undefined): string | undefined {
    if (authorization === undefined) return "MissingProviderToken";
    const match = /^bearer (\S+)$/i.exec(authorization.trim());
    if (!match) return "InvalidProviderToken";
    const token = match[1];
    jwtsSeen.add(token);
    const jwt = decodeJwt(token);
    if (!jwt || jwt.header.alg !== "ES256" || jwt.header.kid !== options.keyId) return "InvalidProviderToken";
    if (!verifySignature("ES256", jwt, options.publicKey)) return "InvalidProviderToken";
    const { iss, iat } = jwt.claims;
    if (iss !== options.teamId || typeof iat !== "number" || !Number.isInteger(iat)) return "InvalidProviderToken";
    const now = Math.floor(Date.now() / 1000);
    if (iat > now + CLOCK_SKEW_S) return "InvalidProviderToken";
    if (iat < now - PROVIDER_TOKEN_LIFETIME_S) return "ExpiredProviderToken";
    return undefined;
  }

  await host.listen();
  return {
    get url() {
      return host.url;
    },
    received,
    get accepted() {
      return received.filter((arrival) => arrival.status === 200 && arrival.delivered);
    },
    jwtsSeen,
    get delayMs() {
      return host.delayMs;
    },
    set delayMs(ms: number) {
      host.delayMs = ms;
    },
    get inFlight() {
      return host.inFlight;
    },
    get sessionsOpened() {
      return host.sessionsOpened;
    },
    hold: () => host.hold(),
    release: () => host.release(),
    answerNext: (count, answer) => host.answerNext(count, answer),
    answerFor: (deviceToken, answer) => void host.scriptedFor.set(deviceToken, answer),
    clearAnswers: () => host.clearAnswers(),
    disconnectAll: () => host.disconnectAll(),
    async waitForAccepted(count, timeoutMs = 10_000) {
      const accepted = () => received.filter((arrival) => arrival.status === 200 && arrival.delivered);
      await host.waitFor(
        () => accepted().length >= count,
        () => `fake APNs: expected ${count} accepted notifications within ${timeoutMs} ms, got ${accepted().length} (${describeArrivals(received.map((a) => `${a.status}${a.reason ? ` ${a.reason}` : ""}`), host.inFlight)})`,
        timeoutMs,
      );
      return accepted().slice(0, count);
    },
    close: () => host.close(),
  };
}

// ---------------------------------------------------------------------------------------------
// Fake FCM (with Google's OAuth 2.0 token endpoint)

export interface FakeFcmOptions {
  publicKey: KeyObject;
  clientEmail: string;
  projectId: string;
  /** When given, an assertion whose header names a kid must name this one, as Google checks. */
  privateKeyId?: string;
  /** expires_in of the access tokens it issues; default 3600. */
  accessTokenTtlSeconds?: number;
}

export type FcmErrorCode = "UNREGISTERED" | "INVALID_ARGUMENT" | "QUOTA_EXCEEDED" | "UNAVAILABLE" | "INTERNAL" | "SENDER_ID_MISMATCH" | "THIRD_PARTY_AUTH_ERROR";

export interface FcmScriptedAnswer {
  status: number;
  /** Defaults by status: 400 INVALID_ARGUMENT, 401 THIRD_PARTY_AUTH_ERROR, 403 SENDER_ID_MISMATCH, 404 UNREGISTERED, 429 QUOTA_EXCEEDED, 500 INTERNAL, 503 UNAVAILABLE. */
  fcmError?: FcmErrorCode;
  /** Adds the google.rpc.BadRequest violation on message.token that FCM sends for a malformed token. */
  tokenField?: boolean;
  retryAfterSeconds?: number;
}

export interface FcmArrival extends Arrival {
  /** message.token, when there was one. */
  token?: string;
  /** The parsed message; undefined when the body had none. */
  message?: Record<string, unknown>;
  /** validate_only requests are dry runs: never in `accepted`. */
  validateOnly: boolean;
  fcmError?: string;
  /** The message name it answered with, on 200. */
  name?: string;
}

export interface IssuedAccessToken {
  token: string;
  /** Milliseconds since the epoch. */
  expiresAt: number;
}

export interface FakeFcm extends FakeProviderControls {
  /** `${url}/token`, the service account's token_uri. */
  tokenUri: string;
  /** Requests to messages:send, answered. */
  received: FcmArrival[];
  /** The 200 answers to real (not validate_only) sends that reached the client. */
  readonly accepted: FcmArrival[];
  /** Requests to the token endpoint, granted or not. */
  readonly tokenRequests: number;
  issuedTokens: IssuedAccessToken[];
  /** Makes every access token issued so far expired, as if its hour had passed. */
  expireAccessTokens(): void;
  answerNext(count: number, answer: FcmScriptedAnswer): void;
  /** Every valid request for registration token `token` gets `answer`, until clearAnswers(); takes precedence over answerNext. */
  answerFor(token: string, answer: FcmScriptedAnswer): void;
  waitForAccepted(count: number, timeoutMs?: number): Promise<FcmArrival[]>;
}

const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const FIREBASE_MESSAGING_SCOPE = "https://www.googleapis.com/auth/firebase.messaging";
const GOOGLE_STATUS_NAMES: Record<number, string> = {
  400: "INVALID_ARGUMENT",
  401: "UNAUTHENTICATED",
  403: "PERMISSION_DENIED",
  404: "NOT_FOUND",
  409: "ALREADY_EXISTS",
  429: "RESOURCE_EXHAUSTED",
  500: "INTERNAL",
  503: "UNAVAILABLE",
  504: "DEADLINE_EXCEEDED",
};
const FCM_DEFAULT_ERRORS: Record<number, FcmErrorCode> = {
  400: "INVALID_ARGUMENT",
  401: "THIRD_PARTY_AUTH_ERROR",
  403: "SENDER_ID_MISMATCH",
  404: "UNREGISTERED",
  429: "QUOTA_EXCEEDED",
  500: "INTERNAL",
  503: "UNAVAILABLE",
};
const FCM_ERROR_MESSAGES: Record<FcmErrorCode, string> = {
  UNREGISTERED: "Requested entity was not found.",
  INVALID_ARGUMENT: "Request contains an invalid argument.",
  QUOTA_EXCEEDED: "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute' of service 'fcm.googleapis.com'.",
  UNAVAILABLE: "The service is currently unavailable.",
  INTERNAL: "Internal error encountered.",
  SENDER_ID_MISMATCH: "SenderId mismatch",
  THIRD_PARTY_AUTH_ERROR: "Auth error from APNS or Web Push Service",
};
const UNAUTHENTICATED_MESSAGE =
  "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";
const INVALID_TOKEN_VIOLATION = { "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [{ field: "message.token", description: "Invalid registration token" }] };
const SHORT_LIVED_JWT = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.";
const FCM_MAX_PAYLOAD_BYTES = 4096;

// Fields of the v1 Message and the configs the drivers use; an unknown name is a driver bug that
// FCM rejects ('Unknown name "x": Cannot find field.'). Google's JSON accepts either spelling.
const REQUEST_FIELDS = ["message", "validate_only"];
const MESSAGE_FIELDS = ["name", "data", "notification", "android", "webpush", "apns", "fcm_options", "token", "topic", "condition"];
const NOTIFICATION_FIELDS = ["title", "body", "image"];
const ANDROID_FIELDS = ["collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options", "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"];
const APNS_CONFIG_FIELDS = ["headers", "payload", "fcm_options", "live_activity_token"];

/** A validation failure: the message, and the BadRequest field when FCM names one. */
class InvalidMessage extends Error {
  constructor(
    message: string,
    readonly field?: { field: string; description: string },
  ) {
    super(message);
  }
}

export async function startFakeFcm(options: FakeFcmOptions): Promise<FakeFcm> {
  if (options.publicKey.asymmetricKeyType !== "rsa") throw new Error("startFakeFcm needs the public half of the service account's RSA key");
  const ttlSeconds = options.accessTokenTtlSeconds ?? 3600;
  const received: FcmArrival[] = [];
  const issuedTokens: IssuedAccessToken[] = [];
  let tokenRequests = 0;
  const sendPath = `/v1/projects/${options.projectId}/messages:send`;

  const host: ProviderServer<FcmScriptedAnswer> = new ProviderServer(true, async (request, response, body) => {
    const path = request.url ?? "";
    if (path === "/token") {
      tokenRequests++;
      await host.answer(request, response, tokenAnswer(request.method ?? "", flattenHeaders(request.headers), body.toString("utf8")));
      return;
    }
    const headers = flattenHeaders(request.headers);
    const text = body.toString("utf8");
    const parsed = parseJson(text);
    const message = isObject(parsed) && isObject(parsed.message) ? parsed.message : undefined;
    const token = typeof message?.token === "string" ? message.token : undefined;
    const validateOnly = isObject(parsed) && (parsed.validate_only === true || parsed.validateOnly === true);
    let answer: Answer;
    let fcmError: string | undefined;
    let name: string | undefined;
    const refusal = judgeSend(request.method ?? "", path, headers, parsed);
    if (refusal) {
      answer = refusal.answer;
      fcmError = refusal.fcmError;
    } else {
      const scripted = host.takeScripted(token);
      if (scripted && scripted.status !== 200) {
        fcmError = scripted.fcmError ?? FCM_DEFAULT_ERRORS[scripted.status] ?? "INTERNAL";
        const extra = scripted.tokenField ? [INVALID_TOKEN_VIOLATION] : [];
        const errorMessage = fcmError === "INVALID_ARGUMENT" && scripted.tokenField ? "The registration token is not a valid FCM registration token" : FCM_ERROR_MESSAGES[fcmError as FcmErrorCode];
        answer = googleError(scripted.status, errorMessage, fcmError, extra);
      } else {
        name = `projects/${options.projectId}/messages/${validateOnly ? "fake_message_id" : `0:${Date.now()}${randomInt(100000, 999999)}%${randomBytes(8).toString("hex")}`}`;
        answer = jsonAnswer(200, { name });
      }
      if (scripted?.retryAfterSeconds !== undefined) answer.headers["retry-after"] = String(scripted.retryAfterSeconds);
    }
    const at = Date.now();
    const sessionId = host.sessionIdOf(request);
    const delivered = await host.answer(request, response, answer);
    received.push({
      ...(token !== undefined ? { token } : {}),
      ...(message ? { message } : {}),
      validateOnly,
      headers,
      body: text,
      status: answer.status,
      ...(fcmError ? { fcmError } : {}),
      ...(name ? { name } : {}),
      at,
      sessionId,
      delivered,
    });
    host.wake();
  });

  /** Google's token endpoint: the JWT bearer grant of a service account. */
  function tokenAnswer(method: string, headers: Record<string, string>, body: string): Answer {
    const oauthError = (error: string, description?: string) => jsonAnswer(400, { error, ...(description ? { error_description: description } : {}) });
    if (method !== "POST") return jsonAnswer(405, { error: "invalid_request", error_description: `${method} is not POST` });
    if (!(headers["content-type"] ?? "").toLowerCase().startsWith("application/x-www-form-urlencoded")) {
      return oauthError("invalid_request", "Content-Type must be application/x-www-form-urlencoded");
    }
    const form = new URLSearchParams(body);
    const grantType = form.get("grant_type");
    if (grantType !== JWT_BEARER_GRANT) return oauthError("unsupported_grant_type", `Invalid grant_type: ${grantType ?? ""}`);
    const assertion = form.get("assertion");
    if (!assertion) return oauthError("invalid_request", "Missing required parameter: assertion");
    const jwt = decodeJwt(assertion);
    if (!jwt || jwt.header.alg !== "RS256") return oauthError("invalid_grant", "Invalid JWT: the assertion is not an RS256 JWT.");
    if (options.privateKeyId !== undefined && jwt.header.kid !== undefined && jwt.header.kid !== options.privateKeyId) return oauthError("invalid_grant", "Invalid JWT Signature.");
    if (!verifySignature("RS256", jwt, options.publicKey)) return oauthError("invalid_grant", "Invalid JWT Signature.");
    const { iss, scope, aud, iat, exp } = jwt.claims;
    if (iss !== options.clientEmail) return oauthError("invalid_grant", "Invalid grant: account not found");
    if (aud !== host.url + "/token") return oauthError("invalid_grant", "Invalid JWT: Failed audience check.");
    if (typeof scope !== "string" || !scope.split(" ").includes(FIREBASE_MESSAGING_SCOPE)) return oauthError("invalid_grant", "Invalid OAuth scope or ID token audience provided.");
    const now = Math.floor(Date.now() / 1000);
    if (typeof iat !== "number" || typeof exp !== "number" || !Number.isInteger(iat) || !Number.isInteger(exp)) return oauthError("invalid_grant", SHORT_LIVED_JWT);
    if (exp <= iat || exp - iat > 3600 || exp <= now || iat > now + CLOCK_SKEW_S) return oauthError("invalid_grant", SHORT_LIVED_JWT);
    const issued = { token: `ya29.${randomBytes(48).toString("base64url")}`, expiresAt: Date.now() + ttlSeconds * 1000 };
    issuedTokens.push(issued);
    return jsonAnswer(200, { access_token: issued.token, expires_in: ttlSeconds, token_type: "Bearer" });
  }

  /** The error FCM would give this send, or undefined when it would accept it. */
  function judgeSend(method: string, path: string, headers: Record<string, string>, parsed: unknown): { answer: Answer; fcmError?: string } | undefined {
    const project = /^\/v1\/projects\/([^/]+)\/messages:send$/.exec(path)?.[1];
    if (project === undefined || method !== "POST") return { answer: googleError(404, `Method or path not found: ${method} ${path}`) };
    const bearer = /^bearer (\S+)$/i.exec((headers["authorization"] ?? "").trim())?.[1];
    const issued = issuedTokens.find((candidate) => candidate.token === bearer);
    if (!issued || issued.expiresAt <= Date.now()) {
      const answer = googleError(401, UNAUTHENTICATED_MESSAGE);
      answer.headers["www-authenticate"] = 'Bearer realm="https://accounts.google.com/"';
      return { answer };
    }
    if (path !== sendPath) {
      return { answer: googleError(403, `Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/${project}' (or it may not exist).`) };
    }
    try {
      validateSendRequest(parsed);
      return undefined;
    } catch (error) {
      if (!(error instanceof InvalidMessage)) throw error;
      const extra = error.field ? [{ "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [error.field] }] : [];
      return { answer: googleError(400, error.message, "INVALID_ARGUMENT", extra), fcmError: "INVALID_ARGUMENT" };
    }
  }

  await host.listen();
  return {
    get url() {
      return host.url;
    },
    get tokenUri() {
      return `${host.url}/token`;
    },
    received,
    get accepted() {
      return received.filter((arrival) => arrival.status === 200 && arrival.delivered && !arrival.validateOnly);
    },
    get tokenRequests() {
      return tokenRequests;
    },
    issuedTokens,
    expireAccessTokens() {
      for (const issued of issuedTokens) issued.expiresAt = Math.min(issued.expiresAt, Date.now());
    },
    get delayMs() {
      return host.delayMs;
    },
    set delayMs(ms: number) {
      host.delayMs = ms;
    },
    get inFlight() {
      return host.inFlight;
    },
    get sessionsOpened() {
      return host.sessionsOpened;
    },
    hold: () => host.hold(),
    release: () => host.release(),
    answerNext: (count, answer) => host.answerNext(count, answer),
    answerFor: (token, answer) => void host.scriptedFor.set(token, answer),
    clearAnswers: () => host.clearAnswers(),
    disconnectAll: () => host.disconnectAll(),
    async waitForAccepted(count, timeoutMs = 10_000) {
      const accepted = () => received.filter((arrival) => arrival.status === 200 && arrival.delivered && !arrival.validateOnly);
      await host.waitFor(
        () => accepted().length >= count,
        () => `fake FCM: expected ${count} accepted messages within ${timeoutMs} ms, got ${accepted().length} (${describeArrivals(received.map((a) => `${a.status}${a.fcmError ? ` ${a.fcmError}` : ""}`), host.inFlight)}; ${tokenRequests} token requests)`,
        timeoutMs,
      );
      return accepted().slice(0, count);
    },
    close: () => host.close(),
  };
}

/** Throws InvalidMessage where FCM v1 would answer 400 INVALID_ARGUMENT. */
function validateSendRequest(parsed: unknown): void {
  if (!isObject(parsed)) throw new InvalidMessage("Invalid JSON payload received. Expected a JSON object.");
  rejectUnknownFields(parsed, REQUEST_FIELDS, "");
  const message = parsed.message;
  if (!isObject(message)) throw new InvalidMessage("Request is missing required field: message.");
  rejectUnknownFields(message, MESSAGE_FIELDS, "message.");
  const targets = ["token", "topic", "condition"].filter((target) => message[target] !== undefined);
  if (targets.length !== 1) throw new InvalidMessage(`Exactly one of message.token, message.topic or message.condition must be set; got ${targets.length}.`);
  if (targets[0] !== "token") throw new InvalidMessage(`This fake delivers to registration tokens only, not message.${targets[0]}.`);
  const token = message.token;
  // Registration tokens are printable ASCII without spaces; anything else cannot name a device.
  if (typeof token !== "string" || !/^[\x21-\x7e]+$/.test(token)) {
    throw new InvalidMessage("The registration token is not a valid FCM registration token", INVALID_TOKEN_VIOLATION.fieldViolations[0]);
  }
  if (message.data !== undefined) checkStringMap(message.data, "message.data", true);
  if (message.notification !== undefined) {
    if (!isObject(message.notification)) throw invalidValue("message.notification", message.notification);
    rejectUnknownFields(message.notification, NOTIFICATION_FIELDS, "message.notification.");
    for (const key of NOTIFICATION_FIELDS) {
      const value = message.notification[key];
      if (value !== undefined && typeof value !== "string") throw invalidValue(`message.notification.${key}`, value, "TYPE_STRING");
    }
  }
  if (message.android !== undefined) {
    const android = message.android;
    if (!isObject(android)) throw invalidValue("message.android", android);
    rejectUnknownFields(android, ANDROID_FIELDS, "message.android.");
    if (android.priority !== undefined && !["normal", "high", "NORMAL", "HIGH"].includes(android.priority as string)) throw invalidValue("message.android.priority", android.priority, "TYPE_ENUM");
    if (android.ttl !== undefined && (typeof android.ttl !== "string" || !/^\d+(\.\d{1,9})?s$/.test(android.ttl))) throw invalidValue("message.android.ttl", android.ttl, "google.protobuf.Duration");
    const collapseKey = android.collapse_key ?? android.collapseKey;
    if (collapseKey !== undefined && typeof collapseKey !== "string") throw invalidValue("message.android.collapse_key", collapseKey, "TYPE_STRING");
    if (android.notification !== undefined && !isObject(android.notification)) throw invalidValue("message.android.notification", android.notification);
    if (android.data !== undefined) checkStringMap(android.data, "message.android.data", false);
  }
  if (message.apns !== undefined) {
    const apns = message.apns;
    if (!isObject(apns)) throw invalidValue("message.apns", apns);
    rejectUnknownFields(apns, APNS_CONFIG_FIELDS, "message.apns.");
    if (apns.headers !== undefined) checkStringMap(apns.headers, "message.apns.headers", false);
    if (apns.payload !== undefined && (!isObject(apns.payload) || !isObject(apns.payload.aps))) {
      throw new InvalidMessage("Invalid APNs payload: message.apns.payload must be an object with an aps dictionary.");
    }
  }
  const { token: _token, ...payload } = message;
  if (Buffer.byteLength(JSON.stringify(payload)) > FCM_MAX_PAYLOAD_BYTES) throw new InvalidMessage(`Message is too big: over ${FCM_MAX_PAYLOAD_BYTES} bytes.`);
}

/** FCM's reserved data keys (documented under "data"): a message using one is refused. */
function isReservedDataKey(key: string): boolean {
  return ["from", "notification", "message_type"].includes(key) || key.startsWith("google") || key.startsWith("gcm");
}

function checkStringMap(value: unknown, field: string, reservedKeys: boolean): void {
  if (!isObject(value)) throw invalidValue(field, value);
  Object.entries(value).forEach(([key, entry], index) => {
    if (typeof entry !== "string") throw invalidValue(`${field}[${index}].value`, entry, "TYPE_STRING");
    if (reservedKeys && isReservedDataKey(key)) throw new InvalidMessage(`Invalid data payload key: ${key}`, { field: `${field}[${index}].key`, description: `Invalid data payload key: ${key}` });
  });
}

function invalidValue(field: string, value: unknown, type = "TYPE_MESSAGE"): InvalidMessage {
  const description = `Invalid value at '${field}' (${type}), ${JSON.stringify(value)}`;
  return new InvalidMessage(`Invalid JSON payload received. ${description}`, { field, description });
}

function rejectUnknownFields(object: Record<string, unknown>, known: readonly string[], prefix: string): void {
  for (const key of Object.keys(object)) {
    if (known.includes(key) || known.includes(snakeCase(key))) continue;
    const description = `Invalid JSON payload received. Unknown name "${key}" at '${prefix.slice(0, -1) || "request"}': Cannot find field.`;
    throw new InvalidMessage(description, { field: `${prefix}${key}`, description });
  }
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/** Google's error envelope (google.rpc.Status); FCM adds its FcmError detail. */
function googleError(status: number, message: string, fcmError?: string, extraDetails: object[] = []): Answer {
  const details = [...(fcmError ? [{ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode: fcmError }] : []), ...extraDetails];
  return jsonAnswer(status, { error: { code: status, message, status: GOOGLE_STATUS_NAMES[status] ?? "UNKNOWN", ...(details.length > 0 ? { details } : {}) } });
}

function jsonAnswer(status: number, body: object): Answer {
  return { status, headers: { "content-type": "application/json; charset=UTF-8" }, body: JSON.stringify(body) };
}

// ---------------------------------------------------------------------------------------------
// JWTs and small helpers

interface DecodedJwt {
  header: Record<string, unknown>;
  claims: Record<string, unknown>;
  signingInput: string;
  signature: Buffer;
}

function decodeJwt(token: string): DecodedJwt | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || parts.some((part) => !/^[A-Za-z0-9_-]+$/.test(part))) return undefined;
  const header = parseJson(Buffer.from(parts[0], "base64url").toString("utf8"));
  const claims = parseJson(Buffer.from(parts[1], "base64url").toString("utf8"));
  if (!isObject(header) || !isObject(claims)) return undefined;
  return { header, claims, signingInput: `${parts[0]}.${parts[1]}`, signature: Buffer.from(parts[2], "base64url") };
}

function verifySignature(alg: "ES256" | "RS256", jwt: DecodedJwt, publicKey: KeyObject): boolean {
  // JWS carries ES256 signatures as r||s (64 bytes), not the DER node:crypto defaults to.
  if (alg === "ES256" && jwt.signature.length !== 64) return false;
  try {
    const key = alg === "ES256" ? { key: publicKey, dsaEncoding: "ieee-p1363" as const } : publicKey;
    return verify("sha256", Buffer.from(jwt.signingInput), key, jwt.signature);
  } catch {
    return false;
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function flattenHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  return flat;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describeArrivals(outcomes: string[], inFlight: number): string {
  const counts = new Map<string, number>();
  for (const outcome of outcomes) counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
  const summary = [...counts].map(([outcome, count]) => `${count}× ${outcome}`).join(", ");
  return `${outcomes.length} answered${summary ? `: ${summary}` : ""}; ${inFlight} still unanswered`;
}

function randomUppercaseAlnum(length: number): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  return Array.from({ length }, () => alphabet[randomInt(alphabet.length)]).join("");
}

function randomLowercaseAlnum(length: number): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from({ length }, () => alphabet[randomInt(alphabet.length)]).join("");
}

// ---------------------------------------------------------------------------------------------
// All of it at once

export interface PushProviders {
  production: FakeApns;
  sandbox: FakeApns;
  fcm: FakeFcm;
  /** The settings that point a server at these providers (PUSH_NOTIFIER, APNS_*, FCM_*); the CA is the caller's to trust. */
  env: Record<string, string>;
  close(): Promise<void>;
}

/** A local APNs (production and sandbox hosts) and FCM, with fresh credentials written into `dir`. */
export async function startPushProviders(dir: string, topic: string): Promise<PushProviders> {
  const apnsKey = makeApnsCredentials(dir);
  const account = generateServiceAccountKeys();
  const [production, sandbox, fcm] = await Promise.all([startFakeApns({ ...apnsKey, topic }), startFakeApns({ ...apnsKey, topic }), startFakeFcm(account)]);
  const { file } = makeFcmServiceAccount(dir, fcm.tokenUri, account);
  return {
    production,
    sandbox,
    fcm,
    env: {
      PUSH_NOTIFIER: "apns,fcm",
      APNS_KEY_FILE: apnsKey.keyFile,
      APNS_KEY_ID: apnsKey.keyId,
      APNS_TEAM_ID: apnsKey.teamId,
      APNS_TOPIC: topic,
      APNS_PRODUCTION_URL: production.url,
      APNS_SANDBOX_URL: sandbox.url,
      FCM_SERVICE_ACCOUNT_FILE: file,
      FCM_URL: fcm.url,
    },
    close: async () => void (await Promise.all([production.close(), sandbox.close(), fcm.close()])),
  };
}
