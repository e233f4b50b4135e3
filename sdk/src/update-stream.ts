// The WebSocket client of the gateway (/ws): authenticates with the session's token, pings on the
// server's heartbeat schedule, notices a dead connection, reconnects with backoff, and hands the
// application its update stream in order with nothing lost or repeated (update-sequencer.ts).
//
// A connection counts as dead when a ping goes unanswered for heartbeatTimeoutMs: a network that
// silently stops carrying packets leaves the socket open on both ends, and without this check
// the client would wait for TCP's own timeouts, many minutes. The server closes a connection it
// has not heard from in 90 s and asks clients to ping every 30 s.
//
// The gateway closes with 4003 when the session is revoked and refuses an authentication with a
// revoked or unknown token: neither is retried. An expired access token is refreshed once and
// the connection tried again at once. Every other end (network, server restart 1001, slow
// consumer 4008, idle 4009) is followed by a reconnection after a backoff delay.
import { create, fromBinary, fromJson, toBinary, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import WebSocket from "ws";
import type { ParleyClient } from "./client.js";
import { backoffDelay, defaultBackoff, type BackoffPolicy } from "./backoff.js";
import { ErrorCodes, GatewayError, SessionEndedError } from "./errors.js";
import type { DeviceInputSchema } from "../../shared/gen/api/v1/common_pb.js";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema, type ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import type { ErrorDetail } from "../../shared/gen/shared/v1/error_pb.js";
import { UpdateSequencer, type UpdateHandlers } from "./update-sequencer.js";

export type UpdateStreamState = "connecting" | "live" | "waiting" | "closed";

export interface UpdateStreamOptions extends UpdateHandlers {
  /** Supplies the token and, for users, GetCurrentState and GetDifference. */
  client: ParleyClient;
  /** The WebSocket URL; by default GetClientConfig's gateway.wsUrl. */
  url?: string;
  /**
   * "user" (default): missed entries are read with GetDifference. "agent": the gateway replays
   * on connect what the agent's heartbeats have not confirmed, so entries may repeat (dropped
   * here) and an sn may skip (entries older than the server retains).
   */
  identity?: "user" | "agent";
  /**
   * The last sn the application handled (persist `lastSn` to resume there). Unset: a user's stream
   * starts at GetCurrentState's latest sn, an agent's at 0.
   */
  initialSn?: number;
  /** Protobuf binary (default) or JSON frames. */
  wire?: "binary" | "json";
  /** Ping period; the gateway expects one every 30 s (the default) and drops a connection silent for 90 s. */
  heartbeatIntervalMs?: number;
  /** A ping unanswered this long marks the connection dead (default 10 s). */
  heartbeatTimeoutMs?: number;
  /** Opening and authenticating must finish within this (default 10 s). */
  connectTimeoutMs?: number;
  backoff?: Partial<BackoffPolicy>;
  /** Sent with the authentication request. */
  device?: MessageInitShape<typeof DeviceInputSchema>;
  onStateChange?(state: UpdateStreamState): void;
}

/** Why the stream stopped for good: closed by the application, or a refusal that retrying cannot cure. */
export type UpdateStreamEnd = { reason: "closed" } | { reason: "failed"; error: unknown };

function toBuffer(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  return Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
}

function isTokenRefusal(detail: ErrorDetail | undefined): boolean {
  return detail?.errorCode === ErrorCodes.tokenExpired || detail?.errorCode === ErrorCodes.invalidToken;
}

const revokedCloseCode = 4003;

export class UpdateStream {
  private readonly backoff: BackoffPolicy;
  private readonly heartbeatIntervalMs: number;
  private readonly heartbeatTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private sequencer: UpdateSequencer | undefined;
  private url: string | undefined;
  private socket: WebSocket | undefined;
  /** The sequencer's tag of the authenticated connection; undefined until authenticated. */
  private epoch: number | undefined;
  private attempt = 0;
  private nextRequestId = 1n;
  private authRequestId = 0n;
  private authRefusal: { detail: ErrorDetail | undefined; token: string } | undefined;
  private refreshedForAuth = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private connectTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private pongTimer: NodeJS.Timeout | undefined;
  private current: UpdateStreamState = "connecting";
  private caughtUp = false;
  private end: UpdateStreamEnd | undefined;
  private readyWaiters: { resolve: () => void; reject: (err: unknown) => void }[] = [];
  private endWaiters: ((end: UpdateStreamEnd) => void)[] = [];

  /** Starts connecting at once. */
  constructor(private readonly options: UpdateStreamOptions) {
    this.backoff = { ...defaultBackoff, ...options.backoff };
    this.heartbeatIntervalMs = options.heartbeatIntervalMs ?? 30_000;
    this.heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? 10_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    void this.connect();
  }

  get state(): UpdateStreamState {
    return this.current;
  }

  /** The last sn delivered to the application: persist it to resume there (initialSn). */
  get lastSn(): number {
    return this.sequencer?.lastSn ?? this.options.initialSn ?? 0;
  }

  /** Resolves once authenticated and caught up the first time; rejects if the stream fails before. */
  ready(): Promise<void> {
    if (this.caughtUp) return Promise.resolve();
    if (this.end) return Promise.reject(this.end.reason === "failed" ? this.end.error : new Error("the update stream was closed"));
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Resolves once the stream has stopped for good (its socket closed, no handler running). */
  ended(): Promise<UpdateStreamEnd> {
    if (this.end && this.current === "closed") return Promise.resolve(this.end);
    return new Promise((resolve) => this.endWaiters.push(resolve));
  }

  /**
   * Closes the connection and stops reconnecting; resolves once no handler runs any more, so a
   * handler must not await it (it would wait for itself).
   */
  async close(): Promise<void> {
    await this.stop({ reason: "closed" });
  }

  private setState(state: UpdateStreamState): void {
    if (this.current === state) return;
    this.current = state;
    this.options.onStateChange?.(state);
  }

  private report(err: unknown): void {
    this.options.onError?.(err);
  }

  private async connect(): Promise<void> {
    this.reconnectTimer = undefined;
    if (this.end) return;
    this.setState("connecting");
    let token: string | undefined;
    try {
      this.sequencer ??= await this.createSequencer();
      this.url ??= this.options.url ?? (await this.gatewayUrl());
      token = await this.options.client.session.accessToken();
    } catch (err) {
      // A refused credential stays refused (the client already tried to refresh it); anything
      // else (the server unreachable, restarting) is worth another attempt.
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) await this.stop({ reason: "failed", error: err });
      else {
        this.report(err);
        this.scheduleReconnect();
      }
      return;
    }
    if (this.end) return;
    if (token === undefined) {
      await this.stop({ reason: "failed", error: new Error("the client holds no token: sign in first") });
      return;
    }
    try {
      this.open(this.url, token);
    } catch (err) {
      await this.stop({ reason: "failed", error: err });
    }
  }

  private async createSequencer(): Promise<UpdateSequencer> {
    const { client } = this.options;
    const agent = this.options.identity === "agent";
    const initialSn = this.options.initialSn ?? (agent ? 0 : ((await client.sync.getCurrentState({})).state?.latestSn ?? 0));
    return new UpdateSequencer({
      initialSn,
      difference: agent ? undefined : (sn) => client.sync.getDifference({ sn }),
      handlers: this.options,
      onCatchUpFailed: (err) => {
        this.report(err);
        // Order cannot be promised on this connection any more: the next one catches up afresh.
        this.socket?.terminate();
      },
    });
  }

  private async gatewayUrl(): Promise<string> {
    const configured = (await this.options.client.auth.getClientConfig({})).gateway?.wsUrl;
    return configured || this.options.client.baseUrl.replace(/^http/, "ws").replace(/\/$/, "") + "/ws";
  }

  private open(url: string, token: string): void {
    const socket = new WebSocket(url);
    this.socket = socket;
    this.authRefusal = undefined;
    this.connectTimer = setTimeout(() => {
      this.report(new Error(`the gateway did not accept the connection within ${this.connectTimeoutMs} ms`));
      socket.terminate();
    }, this.connectTimeoutMs);
    socket.on("open", () => {
      this.authRequestId = this.nextRequestId++;
      this.send(socket, {
        requestId: this.authRequestId,
        type: ClientFrameType.AUTH_REQUEST,
        payload: { case: "authRequest", value: { token, deviceInfo: this.options.device } },
      });
    });
    socket.on("message", (data, isBinary) => {
      if (socket !== this.socket) return;
      let frame: ServerFrame;
      try {
        const bytes = toBuffer(data);
        frame = isBinary ? fromBinary(ServerFrameSchema, bytes) : fromJson(ServerFrameSchema, JSON.parse(bytes.toString("utf8")), { ignoreUnknownFields: true });
      } catch (err) {
        this.report(err);
        return;
      }
      this.received(socket, frame, token);
    });
    socket.on("error", (err) => this.report(err));
    socket.on("close", (code) => void this.closed(socket, code));
  }

  private send(socket: WebSocket, frame: MessageInitShape<typeof ClientFrameSchema>): void {
    const message = create(ClientFrameSchema, frame);
    socket.send((this.options.wire ?? "binary") === "binary" ? toBinary(ClientFrameSchema, message) : JSON.stringify(toJson(ClientFrameSchema, message)));
  }

  private received(socket: WebSocket, frame: ServerFrame, token: string): void {
    const payload = frame.payload;
    switch (payload.case) {
      case "authResponse": {
        if (frame.requestId !== this.authRequestId) return;
        if (!payload.value.success) {
          this.authRefusal = { detail: payload.value.error, token };
          socket.close();
          return;
        }
        this.authenticated(socket);
        return;
      }
      case "update":
        if (this.epoch !== undefined) this.sequencer!.pushed(this.epoch, payload.value);
        return;
      case "heartbeatPong":
        clearTimeout(this.pongTimer);
        this.pongTimer = undefined;
        return;
      case "error":
        this.report(new GatewayError("the gateway reported an error", payload.value.error, payload.value.fatal));
        return;
    }
  }

  private authenticated(socket: WebSocket): void {
    clearTimeout(this.connectTimer);
    this.attempt = 0;
    this.refreshedForAuth = false;
    const epoch = this.sequencer!.connected();
    this.epoch = epoch;
    this.heartbeatTimer = setInterval(() => this.ping(socket), this.heartbeatIntervalMs);
    this.setState("live");
    void this.sequencer!.idle().then(() => {
      if (this.epoch !== epoch || this.caughtUp) return;
      this.caughtUp = true;
      for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
    });
  }

  private ping(socket: WebSocket): void {
    // An unanswered ping is still being timed; a second timer would only restart the wait.
    if (this.pongTimer) return;
    this.send(socket, { requestId: this.nextRequestId++, type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
    this.pongTimer = setTimeout(() => {
      this.report(new Error(`no heartbeat answer within ${this.heartbeatTimeoutMs} ms: the connection is dead`));
      socket.terminate();
    }, this.heartbeatTimeoutMs);
  }

  private clearConnectionTimers(): void {
    clearTimeout(this.connectTimer);
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.pongTimer);
    this.connectTimer = this.heartbeatTimer = this.pongTimer = undefined;
  }

  private async closed(socket: WebSocket, code: number): Promise<void> {
    if (socket !== this.socket) return;
    this.socket = undefined;
    this.epoch = undefined;
    this.clearConnectionTimers();
    this.sequencer?.disconnected();
    if (this.end) return;
    const refusal = this.authRefusal;
    if (refusal) {
      await this.retryAfterRefusal(refusal.detail, refusal.token);
      return;
    }
    if (code === revokedCloseCode) {
      await this.stop({ reason: "failed", error: new GatewayError("the session was revoked") });
      return;
    }
    this.scheduleReconnect();
  }

  private async retryAfterRefusal(detail: ErrorDetail | undefined, token: string): Promise<void> {
    const refusal = new GatewayError("the gateway refused the authentication", detail, true);
    const { session } = this.options.client;
    if (!isTokenRefusal(detail) || !session.canRefresh || this.refreshedForAuth) {
      await this.stop({ reason: "failed", error: refusal });
      return;
    }
    this.refreshedForAuth = true;
    try {
      await session.refresh(token);
    } catch (err) {
      if (err instanceof SessionEndedError) await this.stop({ reason: "failed", error: err });
      else {
        this.report(err);
        this.scheduleReconnect();
      }
      return;
    }
    await this.connect();
  }

  private scheduleReconnect(): void {
    if (this.end) return;
    this.setState("waiting");
    const delay = backoffDelay(this.attempt, this.backoff);
    this.attempt += 1;
    this.reconnectTimer = setTimeout(() => void this.connect(), delay);
  }

  private async stop(end: UpdateStreamEnd): Promise<void> {
    if (this.end) return;
    this.end = end;
    clearTimeout(this.reconnectTimer);
    this.clearConnectionTimers();
    const socket = this.socket;
    this.socket = undefined;
    this.epoch = undefined;
    this.sequencer?.disconnected();
    if (socket && socket.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((resolve) => {
        // A peer that never answers the close frame must not hold close() up.
        const cutoff = setTimeout(() => socket.terminate(), 2000);
        socket.once("close", () => {
          clearTimeout(cutoff);
          resolve();
        });
        socket.close(1000);
      });
    }
    await this.sequencer?.idle();
    if (end.reason === "failed") this.report(end.error);
    this.setState("closed");
    const error = end.reason === "failed" ? end.error : new Error("the update stream was closed");
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(error);
    for (const resolve of this.endWaiters.splice(0)) resolve(end);
  }
}
