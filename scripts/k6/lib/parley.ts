// Parley's public API as k6 scenarios use it: Connect unary calls in JSON, sign-in with the codes
// the sidecar relays, the gateway's JSON frames over k6's WebSocket, and the 64-bit ids the API
// writes as decimal strings (k6's JavaScript has no exact integers above 2^53).
import http, { type RefinedResponse, type ResponseType } from "k6/http";
import { sleep } from "k6";
import { randomBytes } from "k6/crypto";
import { Counter, Trend } from "k6/metrics";
import { clearInterval, setInterval, setTimeout } from "k6/timers";
import { WebSocket } from "k6/websockets";

export const baseUrl = __ENV.BASE_URL || "http://127.0.0.1:8080";
export const sidecarUrl = __ENV.SIDECAR_URL;
export const runId = __ENV.RUN_ID || String(Date.now());

/** Acknowledged messages that never arrived where they should: every scenario's threshold is 0. */
export const messagesLost = new Counter("parley_messages_lost");
/** A message that arrived twice on one socket, or an sn seen twice or skipped. */
export const updatesDuplicated = new Counter("parley_updates_duplicated");
export const snGaps = new Counter("parley_sn_gaps");
export const sendToPush = new Trend("parley_send_to_push_ms", true);
/** Iterations an error ended early: their remaining checks never ran, so `checks` alone would not see them. */
export const iterationErrors = new Counter("parley_iteration_errors");

export interface Session {
  userId: number;
  email: string;
  accessToken: string;
  refreshToken: string;
}

export class RpcError extends Error {
  constructor(
    readonly method: string,
    readonly status: number,
    readonly code: string,
    readonly errorName: string,
  ) {
    super(`${method}: ${status} ${code} ${errorName}`);
  }
}

type Json = Record<string, unknown>;

function headers(token?: string): Record<string, string> {
  return token ? { "Content-Type": "application/json", Authorization: `Bearer ${token}` } : { "Content-Type": "application/json" };
}

function errorOf(method: string, response: RefinedResponse<ResponseType | undefined>): RpcError {
  let code = "unknown";
  let errorName = "";
  try {
    const body = JSON.parse(String(response.body)) as { code?: string; details?: { debug?: { errorName?: string } }[] };
    code = body.code ?? code;
    errorName = body.details?.[0]?.debug?.errorName ?? "";
  } catch {
    // Not a Connect error body (a proxy's page, a reset connection): the status says enough.
  }
  return new RpcError(method, response.status, code, errorName);
}

/** One unary call, e.g. rpc("MessageService/SendMessage", {...}, token); throws RpcError on an error. */
export function rpc<T = Json>(method: string, body: Json, token?: string): T {
  const response = http.post(`${baseUrl}/api.v1.${method}`, JSON.stringify(body), { headers: headers(token), tags: { name: method } });
  if (response.status !== 200) throw errorOf(method, response);
  return response.json() as T;
}

/** The same call without blocking the VU's event loop, so WebSocket frames are timed as they arrive. */
export async function rpcAsync<T = Json>(method: string, body: Json, token?: string): Promise<T> {
  const response = await http.asyncRequest("POST", `${baseUrl}/api.v1.${method}`, JSON.stringify(body), { headers: headers(token), tags: { name: method } });
  if (response.status !== 200) throw errorOf(method, response);
  return response.json() as T;
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

export function uuid(): string {
  const h = hex(randomBytes(16));
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

let identityCounter = 0;
/** An email no other VU, iteration or run uses. */
export function freshEmail(label: string): string {
  identityCounter += 1;
  return `k6.${label}.${runId}.${__VU}.${identityCounter}@example.com`;
}

/** The code the server wrote for this identity, by way of the sidecar (it may take a moment to appear). */
export function codeFor(identityValue: string, purpose = "login"): string {
  for (let attempt = 0; attempt < 50; attempt++) {
    const response = http.get(`${sidecarUrl}/code?identity=${encodeURIComponent(identityValue)}&purpose=${purpose}`, { tags: { name: "sidecar" }, responseCallback: http.expectedStatuses(200, 404) });
    if (response.status === 200) return (response.json() as { code: string }).code;
    sleep(0.1);
  }
  throw new Error(`no ${purpose} code for ${identityValue} in CODE_FILE after 5 s: is the server running with CODE_DELIVERY=file:$CODE_FILE?`);
}

export function device(): Json {
  return { deviceId: uuid(), deviceType: "DEVICE_TYPE_CLI", deviceName: "k6", deviceModel: "k6", osVersion: "linux", appVersion: "1.0.0" };
}

/** Signs in with an email code, creating the account: RequestVerifyCode, the code, VerifyCode. */
export function signIn(label = "user", email = freshEmail(label)): Session {
  const { verifyToken } = rpc<{ verifyToken: string }>("AuthService/RequestVerifyCode", { identityType: "IDENTITY_TYPE_EMAIL", identityValue: email });
  const signed = rpc<{ userId: number; accessToken: string; refreshToken: string }>("AuthService/VerifyCode", { verifyToken, code: codeFor(email), deviceInfo: device() });
  return { userId: signed.userId, email, accessToken: signed.accessToken, refreshToken: signed.refreshToken };
}

/** The decimal digits of millions × 10^6 + units, exact when each part is below 2^53. */
function decimalOf(millions: number, units: number): string {
  const allMillions = millions + Math.floor(units / 1e6);
  const rest = units % 1e6;
  return allMillions > 0 ? `${allMillions}${String(rest).padStart(6, "0")}` : String(rest);
}

/** The PRIVATE conversation id of two users: (larger << 32) | smaller, as the API writes it. */
export function privateConversationId(a: number, b: number): string {
  const [larger, smaller] = a > b ? [a, b] : [b, a];
  // larger * 2^32 = larger * 4294 * 10^6 + larger * 967296, each product exact below 2^53.
  return decimalOf(larger * 4294, larger * 967296 + smaller);
}

/** Makes two users friends; answers their PRIVATE conversation's id. */
export function befriend(a: Session, b: Session): string {
  const { requestId } = rpc<{ requestId: string }>("ContactService/SendFriendRequest", { targetUserId: b.userId, message: "k6" }, a.accessToken);
  rpc("ContactService/AcceptFriendRequest", { requestId }, b.accessToken);
  return privateConversationId(a.userId, b.userId);
}

export interface Agent {
  userId: number;
  token: string;
  secretKey: string;
  /** The PRIVATE conversation between the agent and its creator. */
  conversationId: string;
}

export function createAgent(owner: Session, label: string): Agent {
  identityCounter += 1;
  // Usernames: 5..32 characters of letters, digits and underscores.
  const username = `k6_${runId}_${__VU}_${identityCounter}`.slice(0, 32);
  const created = rpc<{ profile: { user: { userId: number } }; token: string; secretKey: string }>("AgentService/CreateAgent", { username, name: `k6 ${label}` }, owner.accessToken);
  const userId = created.profile.user.userId;
  return { userId, token: created.token, secretKey: created.secretKey, conversationId: privateConversationId(owner.userId, userId) };
}

let clientMessageIds = Date.now() * 1000;
/** A clientMessageId this VU has not used: unique per sender, as idempotency wants. */
export function nextClientMessageId(): string {
  clientMessageIds += 1;
  return String(clientMessageIds);
}

export const textBody = (text: string): Json => ({ type: "MESSAGE_TYPE_TEXT", text: { text } });
export const streamStartBody = (): Json => ({ type: "MESSAGE_TYPE_STREAM", stream: { contentType: "text/plain" } });

export interface MessageEnvelope {
  messageId: string;
  conversationId: string;
  senderId: number;
  clientMessageId?: string;
  body?: { type?: string; text?: { text: string }; stream?: { phase?: string; seq?: number; delta?: string; accumulatedText?: string; errorMessage?: string } };
}

export interface SnUpdate {
  sn: number;
  messageEnvelope?: MessageEnvelope;
}

/** What one pushed ServerFrame update carries, flattened. */
export interface Pushed {
  sn?: number;
  envelope?: MessageEnvelope;
}

interface ServerFrame {
  requestId?: string;
  type?: string;
  authResponse?: { success?: boolean; userId?: number; error?: { errorName?: string } };
  update?: { snUpdate?: SnUpdate; nonSnUpdate?: { messageEnvelope?: MessageEnvelope } };
  error?: { error?: { errorName?: string }; fatal?: boolean };
}

/**
 * One authenticated gateway connection: calls `onPush` for each update and keeps the connection
 * alive with heartbeats. Sns are checked as they arrive: each is the previous plus one (a
 * duplicate or a skipped sn is counted), starting after `afterSn` when given.
 */
export class Gateway {
  readonly ready: Promise<void>;
  readonly closed: Promise<void>;
  lastSn: number | undefined;
  private readonly socket: WebSocket;
  private heartbeat: ReturnType<typeof setInterval> | undefined;

  constructor(token: string, onPush: (pushed: Pushed) => void, options: { afterSn?: number; heartbeatMs?: number } = {}) {
    this.lastSn = options.afterSn;
    openGateways.add(this);
    this.socket = new WebSocket(`${baseUrl.replace(/^http/, "ws")}/ws`);
    let resolveReady: () => void = () => {};
    let rejectReady: (err: Error) => void = () => {};
    this.ready = new Promise((resolve, reject) => ([resolveReady, rejectReady] = [resolve, reject]));
    let resolveClosed: () => void = () => {};
    this.closed = new Promise((resolve) => (resolveClosed = resolve));
    this.socket.onopen = () => {
      this.socket.send(JSON.stringify({ requestId: "1", type: "CLIENT_FRAME_TYPE_AUTH_REQUEST", authRequest: { token } }));
      this.heartbeat = setInterval(() => this.socket.send(JSON.stringify({ requestId: "2", type: "CLIENT_FRAME_TYPE_HEARTBEAT_PING", heartbeatPing: {} })), options.heartbeatMs ?? 20_000);
    };
    this.socket.onmessage = (event) => {
      if (!event) return;
      const frame = JSON.parse(String(event.data)) as ServerFrame;
      if (frame.authResponse) {
        if (frame.authResponse.success) resolveReady();
        else rejectReady(new Error(`gateway authentication refused: ${frame.authResponse.error?.errorName ?? "?"}`));
      } else if (frame.update?.snUpdate) {
        this.noteSn(frame.update.snUpdate.sn);
        onPush({ sn: frame.update.snUpdate.sn, envelope: frame.update.snUpdate.messageEnvelope });
      } else if (frame.update?.nonSnUpdate) {
        onPush({ envelope: frame.update.nonSnUpdate.messageEnvelope });
      } else if (frame.error?.fatal) {
        rejectReady(new Error(`gateway error: ${frame.error.error?.errorName ?? "?"}`));
      }
    };
    this.socket.onerror = () => rejectReady(new Error("the gateway connection failed"));
    this.socket.onclose = () => {
      openGateways.delete(this);
      if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
      rejectReady(new Error("the gateway closed the connection before authentication"));
      resolveClosed();
    };
  }

  /** Counts an sn that is not the next one: duplicates and gaps both break GetDifference's promise. */
  noteSn(sn: number): void {
    if (this.lastSn !== undefined) {
      if (sn <= this.lastSn) updatesDuplicated.add(1);
      else if (sn > this.lastSn + 1) snGaps.add(sn - this.lastSn - 1);
    }
    if (this.lastSn === undefined || sn > this.lastSn) this.lastSn = sn;
  }

  /** Moves the sn check past what the client took by GetDifference, without counting what came both ways. */
  skipTo(sn: number): void {
    if (this.lastSn === undefined || sn > this.lastSn) this.lastSn = sn;
  }

  close(): Promise<void> {
    this.socket.close();
    return this.closed;
  }
}

/** This VU's connections still open: an iteration cut short closes them, or it would last until the server's idle close. */
const openGateways = new Set<Gateway>();

/**
 * Runs one iteration. An error that ends it early is counted in parley_iteration_errors (every
 * scenario's threshold is 0) and logged, and the connections it left open are closed.
 */
export async function guarded(iteration: () => Promise<void> | void): Promise<void> {
  iterationErrors.add(0);
  try {
    await iteration();
  } catch (err) {
    iterationErrors.add(1);
    console.error(`iteration ${__ITER} of VU ${__VU} failed: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    await Promise.all([...openGateways].map((gateway) => gateway.close()));
  }
}

/** Resolves after `ms` without blocking the VU's event loop. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Waits until `done()` holds or `timeoutMs` passes, looking every 20 ms; answers whether it held. */
export async function waitUntil(done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!done() && Date.now() < deadline) await pause(20);
  return done();
}

/**
 * The text messages one socket should receive, by clientMessageId: each arrival is timed from its
 * send (send→push latency), a second arrival counts as a duplicate, and what never came is lost.
 */
export class ExpectedMessages {
  private readonly sentAt = new Map<string, number>();
  private readonly arrived = new Set<string>();

  expect(clientMessageId: string, sentAtMs: number): void {
    this.sentAt.set(clientMessageId, sentAtMs);
  }

  /** Forgets a message whose send failed: it was never acknowledged, so it may not arrive. */
  cancel(clientMessageId: string): void {
    this.sentAt.delete(clientMessageId);
  }

  /** Feed it every push of the receiving socket. */
  note(pushed: Pushed): void {
    const envelope = pushed.envelope;
    const clientMessageId = envelope?.clientMessageId;
    if (!clientMessageId || envelope.body?.text === undefined) return;
    const sentAt = this.sentAt.get(clientMessageId);
    if (sentAt === undefined) return;
    if (this.arrived.has(clientMessageId)) {
      updatesDuplicated.add(1);
      return;
    }
    this.arrived.add(clientMessageId);
    sendToPush.add(Date.now() - sentAt);
  }

  outstanding(): number {
    return this.sentAt.size - this.arrived.size;
  }

  /** Waits up to `timeoutMs` for what is outstanding, then counts the rest as lost; answers that count. */
  async settle(timeoutMs: number): Promise<number> {
    await waitUntil(() => this.outstanding() === 0, timeoutMs);
    const lost = this.outstanding();
    messagesLost.add(lost);
    return lost;
  }
}

/** Sends a text message and tells the receiver's tracker to expect it; false when the send failed. */
export async function sendText(sender: Session, conversationId: string, text: string, receivers: ExpectedMessages[]): Promise<boolean> {
  const clientMessageId = nextClientMessageId();
  const sentAt = Date.now();
  for (const receiver of receivers) receiver.expect(clientMessageId, sentAt);
  try {
    await rpcAsync("MessageService/SendMessage", { conversationId, clientMessageId, body: textBody(text) }, sender.accessToken);
    return true;
  } catch {
    for (const receiver of receivers) receiver.cancel(clientMessageId);
    return false;
  }
}

/** The thresholds every messaging scenario holds: no iteration cut short, nothing lost, duplicated or skipped. */
export const deliveryThresholds = {
  parley_iteration_errors: ["count==0"],
  parley_messages_lost: ["count==0"],
  parley_updates_duplicated: ["count==0"],
  parley_sn_gaps: ["count==0"],
};

/** Makes the delivery counters appear in the summary (and their thresholds count) even when nothing went wrong. */
export function zeroDeliveryCounters(): void {
  messagesLost.add(0);
  updatesDuplicated.add(0);
  snGaps.add(0);
}

/**
 * Everything after `afterSn` by GetDifference, page by page, as a client catches up after a dropped
 * connection; every sn must follow the previous one (a gap or a repeat is counted).
 */
export function getDifference(session: Session, afterSn: number): SnUpdate[] {
  const updates: SnUpdate[] = [];
  let sn = afterSn;
  for (;;) {
    const page = rpc<{ updates?: SnUpdate[]; sn?: number; hasMore?: boolean; updateTooLong?: boolean }>("SyncService/GetDifference", { sn }, session.accessToken);
    if (page.updateTooLong) throw new Error(`GetDifference from ${afterSn}: too long a gap for a difference`);
    for (const update of page.updates ?? []) {
      if (update.sn <= sn) updatesDuplicated.add(1);
      else if (update.sn > sn + 1) snGaps.add(update.sn - sn - 1);
      sn = Math.max(sn, update.sn);
      updates.push(update);
    }
    if (!page.hasMore) return updates;
  }
}

/** The latest sn the server holds for the session's user. */
export function currentSn(session: Session): number {
  return rpc<{ state?: { latestSn?: number } }>("SyncService/GetCurrentState", {}, session.accessToken).state?.latestSn ?? 0;
}

/** The latency figures every scenario's summary prints (k6's default leaves out p99). */
export const summaryTrendStats = ["avg", "med", "p(90)", "p(95)", "p(99)", "max"];

/** A whole number from the environment (a scenario's size), or its default. */
export function envNumber(name: string, fallback: number): number {
  const text = __ENV[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number; got ${JSON.stringify(text)}`);
  return value;
}
