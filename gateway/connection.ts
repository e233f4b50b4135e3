// The rules of one gateway connection: authenticate first, answer heartbeats, carry pushes, and
// protect the server from a reader that cannot keep up.
import { create } from "@bufbuild/protobuf";
import { ClientFrameType, ServerFrameSchema, ServerFrameType, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { ErrorDetailSchema, type ErrorDetail } from "../shared/gen/shared/v1/error_pb.js";
import { Errors, parleyErrorParts, withRetryDelay, type CatalogueEntry } from "../shared/errors.js";
import type { AgentFeed, FeedSink } from "./agent-feed.js";
import { decodeClientFrame, encodeServerFrame, type FrameForm, type PushFrame } from "./frame-codec.js";
import type { GatewaySocket, SocketHandlers } from "./socket.js";
import { gatewayConnectionCloses, gatewayPushBytes, gatewayPushFrames } from "../shared/metrics.js";
import type { CounterSeries } from "../shared/metric-series.js";

export interface Identity {
  kind: "user" | "agent";
  userId: number;
  deviceId: string;
}

export interface ConnectionPolicy {
  authTimeoutMs: number;
  idleTimeoutMs: number;
  /** Unsent bytes a connection may hold before it is dropped as a slow consumer. */
  maxBufferedBytes: number;
}

export const CloseCodes = {
  normal: 1000,
  goingAway: 1001,
  internalError: 1011,
  authFailed: 4001,
  protocolViolation: 4002,
  revoked: 4003,
  slowConsumer: 4008,
  idle: 4009,
} as const;

/** How long a slow consumer's close handshake may take before the socket is dropped. */
const slowConsumerGraceMs = 2000;

/** The close counter's series by close code, named after CloseCodes' keys (slowConsumer: slow_consumer). */
const closesByCode = new Map<number, CounterSeries>(
  Object.entries(CloseCodes).map(([name, code]) => [code, gatewayConnectionCloses.bind({ reason: name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`) })]),
);
const closedByPeer = gatewayConnectionCloses.bind({ reason: "peer" });

export function errorDetail(entry: CatalogueEntry, metadata: Record<string, string> = {}): ErrorDetail {
  return create(ErrorDetailSchema, { errorCode: entry.errorCode, errorName: entry.errorName, metadata: withRetryDelay(entry, metadata) });
}

export interface ConnectionHooks {
  authenticate(token: string): Promise<Identity>;
  /** Makes the authenticated connection reachable by pushes; the success answer waits for it (a refusal fails the authentication). */
  register(connection: Connection): Promise<void>;
  /** After the success answer went out. */
  onAuthenticated(connection: Connection): void;
  onClosed(connection: Connection): void;
}

export class Connection implements SocketHandlers, FeedSink {
  identity: Identity | undefined;
  /** On an agent's connection: orders its sequenced pushes after the replay of its backlog. */
  private feed: AgentFeed | undefined;
  private form: FrameForm | undefined;
  private authenticating = false;
  private closed = false;
  private authTimer: NodeJS.Timeout | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly socket: GatewaySocket,
    private readonly policy: ConnectionPolicy,
    private readonly hooks: ConnectionHooks,
  ) {
    this.authTimer = setTimeout(() => this.fail(Errors.gatewayAuthTimeout, CloseCodes.authFailed), policy.authTimeoutMs);
    this.resetIdleTimer();
  }

  private resetIdleTimer(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.fail(Errors.gatewayIdleTimeout, CloseCodes.idle), this.policy.idleTimeoutMs);
  }

  onMessage(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void {
    if (this.closed) return;
    this.resetIdleTimer();
    // Any frame from an authenticated agent, even a bad one, shows its end was alive after the
    // writes that completed before it: the agent's feed takes them as delivered (see agent-feed.ts).
    if (this.identity) this.feed?.agentHeard();
    const decoded = decodeClientFrame(data, isBinary);
    this.form ??= decoded.form;
    if (!decoded.ok) {
      if (!this.identity) this.fail(Errors.gatewayAuthRequired, CloseCodes.protocolViolation);
      else this.sendError(0n, errorDetail(Errors.gatewayBadFrame, { reason: decoded.reason }), false);
      return;
    }
    const { frame } = decoded;
    if (!this.identity) {
      if (this.authenticating) return; // frames racing the auth answer are dropped, not misread
      if (frame.type !== ClientFrameType.AUTH_REQUEST || frame.payload.case !== "authRequest") {
        this.fail(Errors.gatewayAuthRequired, CloseCodes.protocolViolation, frame.requestId);
        return;
      }
      void this.authenticate(frame.requestId, frame.payload.value.token);
      return;
    }
    if (frame.type === ClientFrameType.HEARTBEAT_PING && frame.payload.case === "heartbeatPing") {
      this.send(create(ServerFrameSchema, {
        requestId: frame.requestId,
        type: ServerFrameType.HEARTBEAT_PONG,
        payload: { case: "heartbeatPong", value: { serverTime: BigInt(Date.now()) } },
      }));
      return;
    }
    this.sendError(frame.requestId, errorDetail(Errors.gatewayBadFrame, { reason: "only heartbeats are expected after authentication" }), false);
  }

  onPong(): void {
    if (this.closed || !this.identity) return;
    // A pong is a frame from the agent like any other: the writes completed before it arrived.
    this.feed?.agentHeard();
  }

  private async authenticate(requestId: bigint, token: string): Promise<void> {
    this.authenticating = true;
    try {
      const identity = await this.hooks.authenticate(token);
      if (this.closed) return;
      this.identity = identity;
      await this.hooks.register(this);
      if (this.closed) return;
      clearTimeout(this.authTimer);
      this.send(create(ServerFrameSchema, {
        requestId,
        type: ServerFrameType.AUTH_RESPONSE,
        payload: { case: "authResponse", value: { success: true, userId: identity.userId } },
      }));
      this.hooks.onAuthenticated(this);
    } catch (err) {
      if (this.closed) return;
      const parts = parleyErrorParts(err);
      const detail = errorDetail(parts?.entry ?? Errors.unavailable, parts?.metadata);
      this.send(create(ServerFrameSchema, {
        requestId,
        type: ServerFrameType.AUTH_RESPONSE,
        payload: { case: "authResponse", value: { success: false, error: detail } },
      }));
      this.close(CloseCodes.authFailed, "authentication failed");
    } finally {
      this.authenticating = false;
    }
  }

  get hasRoom(): boolean {
    return this.socket.bufferedAmount < this.policy.maxBufferedBytes / 2;
  }

  /** Bytes queued on the socket and not yet written to the network. */
  get backlogBytes(): number {
    return this.socket.bufferedAmount;
  }

  /** Routes this connection's sequenced pushes through an agent feed (set once, at authentication). */
  attachFeed(feed: AgentFeed): void {
    this.feed = feed;
  }

  /** Starts the agent feed's catch-up, once the authentication answer went out. */
  startFeed(): void {
    this.feed?.start();
  }

  /**
   * Queues a push built once for many connections; `sn` is set for a sequenced entry, and
   * `toWebhook` when the entry went to the agent's webhook queue instead (see agent-feed.ts).
   */
  push(frame: PushFrame, sn?: number, toWebhook = false): void {
    if (this.closed || !this.form) return;
    if (this.feed && sn !== undefined) this.feed.live(frame, sn, toWebhook);
    else this.write(frame.encoded(this.form), undefined, true);
  }

  /** The agent feed of this connection, if it is an agent's. */
  get agentFeed(): AgentFeed | undefined {
    return this.feed;
  }

  askForReceipt(): void {
    if (!this.closed) this.socket.ping();
  }

  writePush(frame: PushFrame, onWritten: () => void): void {
    if (this.closed || !this.form) return;
    this.write(
      frame.encoded(this.form),
      (err) => {
        if (!err) onWritten();
      },
      true,
    );
  }

  private send(frame: ServerFrame): void {
    this.write(encodeServerFrame(frame, this.form ?? "json"));
  }

  /** Queues a frame on the socket; `isPush`: an UPDATE frame, counted as a push once queued. */
  private write(data: string | Uint8Array, onWritten?: (err?: Error) => void, isPush = false): void {
    const size = typeof data === "string" ? Buffer.byteLength(data) : data.byteLength;
    if (this.socket.bufferedAmount + size > this.policy.maxBufferedBytes) {
      // The reader fell behind: queuing more would grow memory without bound. Nothing more is
      // queued; the close frame tells a client that reads again why, and a client that never
      // does is dropped. It reconnects and catches up with GetDifference.
      this.close(CloseCodes.slowConsumer, Errors.gatewaySlowConsumer.errorName);
      setTimeout(() => this.socket.terminate(), slowConsumerGraceMs).unref();
      return;
    }
    this.socket.send(data, onWritten);
    if (isPush) {
      gatewayPushFrames.inc();
      gatewayPushBytes.inc(size);
    }
  }

  private sendError(requestId: bigint, error: ErrorDetail, fatal: boolean): void {
    this.send(create(ServerFrameSchema, { requestId, type: ServerFrameType.ERROR, payload: { case: "error", value: { error, fatal } } }));
  }

  /** Sends a fatal error frame and closes. */
  fail(entry: CatalogueEntry, closeCode: number, requestId = 0n): void {
    if (this.closed) return;
    this.sendError(requestId, errorDetail(entry), true);
    this.close(closeCode, entry.errorName);
  }

  close(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    closesByCode.get(code)?.inc();
    this.clearTimers();
    this.feed?.stop();
    this.socket.close(code, reason);
    this.hooks.onClosed(this);
  }

  onClose(): void {
    if (this.closed) return;
    this.closed = true;
    closedByPeer.inc();
    this.clearTimers();
    this.feed?.stop();
    this.hooks.onClosed(this);
  }

  private clearTimers(): void {
    clearTimeout(this.authTimer);
    clearTimeout(this.idleTimer);
  }
}
