// The uWebSockets.js implementation of the socket layer, on the uWS app that owns the edge's port
// (edge/uws-front.ts). It keeps the promises the `ws` driver keeps: 64 KiB client frames at most,
// no per-message deflate, upgrades refused with 404 elsewhere, 400 for a bad Host or a broken
// handshake, 431 for a head over the limit, 503 while the server drains; a frame's `onWritten`
// runs once its bytes left uWS's backpressure buffer; the frames sent in one turn leave in that
// order, ahead of a ping or close sent after them. A uWS socket may not be touched after its close
// handler ran (the native side has freed it), so every call goes through a guard.
import type { HttpRequest, HttpResponse, TemplatedApp, WebSocket, us_socket_context_t } from "@trufflesuite/uws-js-unofficial";
import type { UwsModule } from "./uws-native.js";
import { maxHeaderBytes, requestHeadBytes } from "../shared/http-limits.js";
import { upgradeRefusal, type GatewaySocket, type SocketHandlers, type SocketServer, type UpgradeRefusal } from "./socket.js";

/** Client frames are only auth and heartbeat; anything larger is not a Parley client. */
const maxClientFrameBytes = 64 * 1024;

/** How long closing waits for clients to answer the close frames already sent before dropping them. */
const closeHandshakeGraceMs = 2000;

/**
 * Far above any connection's own slow-consumer limit (gateway/connection.ts closes a socket
 * before its unsent bytes pass 1 MiB), so uWS never drops a frame on its own.
 */
const maxBackpressureBytes = 64 * 1024 * 1024;

/** The peer's address as text: dotted IPv4 (also for IPv4-mapped IPv6), compressed IPv6. */
export function addressText(binary: ArrayBuffer): string {
  const bytes = new Uint8Array(binary);
  if (bytes.length === 4) return bytes.join(".");
  if (bytes.length !== 16) return "";
  if (bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) return bytes.subarray(12).join(".");
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  return new URL(`http://[${groups.join(":")}]/`).hostname.slice(1, -1);
}

/** Whether a request asks to become a WebSocket (whatever its path and validity). */
export function asksForUpgrade(header: (name: string) => string): boolean {
  return header("upgrade") !== "" && /(?:^|,)\s*upgrade\s*(?:,|$)/i.test(header("connection"));
}

/** Refuses an upgrade the way `ws` does: a bare status, and the connection closes. */
export function refuseUpgrade(res: HttpResponse, status: UpgradeRefusal): void {
  res.cork(() => res.writeStatus(status).writeHeader("connection", "close").end("", true));
}

interface SocketState {
  socket: UwsGatewaySocket;
}

/**
 * Sockets with frames queued this turn of the event loop. A socket's frames are written together
 * once the turn's work is done, corked: one system call for all of them. A busy group's pushes
 * reach a socket several to a turn (a delivery appends every message queued behind the one
 * before), and a write each was most of the gateway's time; a frame alone is written as before.
 */
const socketsWithQueuedFrames = new Set<UwsGatewaySocket>();
let queuedFramesWrite: NodeJS.Immediate | undefined;

function writeQueuedFrames(): void {
  queuedFramesWrite = undefined;
  const sockets = [...socketsWithQueuedFrames];
  socketsWithQueuedFrames.clear();
  for (const socket of sockets) socket.writeQueued();
}

interface QueuedFrame {
  data: string | Uint8Array;
  onWritten?: (err?: Error) => void;
}

export class UwsGatewaySocket implements GatewaySocket {
  handlers: SocketHandlers | undefined;
  closed = false;
  /** Bytes that have entered uWS's backpressure buffer since the socket opened. */
  private bufferedTotal = 0;
  /** Callbacks of frames still in the buffer, each with the `bufferedTotal` its last byte reached. */
  private pending: { until: number; onWritten: (err?: Error) => void }[] = [];

  constructor(
    private readonly ws: WebSocket<SocketState>,
    readonly remoteAddress: string,
    readonly forwardedFor: string | undefined,
  ) {}

  /** Frames sent this turn and not yet handed to uWS, and their size (a string's in UTF-16 units: close enough for the slow-consumer limit). */
  private queued: QueuedFrame[] = [];
  private queuedBytes = 0;

  send(data: string | Uint8Array, onWritten?: (err?: Error) => void): void {
    if (this.closed) {
      if (onWritten) queueMicrotask(() => onWritten(new Error("the socket is closed")));
      return;
    }
    this.queued.push({ data, onWritten });
    this.queuedBytes += typeof data === "string" ? data.length : data.byteLength;
    if (this.queued.length > 1) return;
    socketsWithQueuedFrames.add(this);
    queuedFramesWrite ??= setImmediate(writeQueuedFrames);
  }

  /** Hands this turn's frames to uWS, in order: several at once in one corked write. */
  writeQueued(): void {
    const frames = this.queued;
    if (frames.length === 0) return;
    this.queued = [];
    this.queuedBytes = 0;
    if (this.closed) {
      this.failUnwritten(frames.flatMap(({ onWritten }) => (onWritten ? [onWritten] : [])), "the socket closed before the frame was written");
      return;
    }
    // A frame whose writing someone waits for is counted into uWS's buffer by itself (write()).
    if (frames.length === 1 || frames.some(({ onWritten }) => onWritten)) {
      for (const { data, onWritten } of frames) this.write(data, onWritten);
      return;
    }
    const before = this.ws.getBufferedAmount();
    this.ws.cork(() => {
      for (const { data } of frames) this.ws.send(data, typeof data !== "string");
    });
    this.bufferedTotal += Math.max(0, this.ws.getBufferedAmount() - before);
    this.written();
  }

  private write(data: string | Uint8Array, onWritten?: (err?: Error) => void): void {
    const before = this.ws.getBufferedAmount();
    const status = this.ws.send(data, typeof data !== "string");
    if (status === 2) {
      if (onWritten) queueMicrotask(() => onWritten(new Error("uWS dropped the frame: backpressure limit")));
      return;
    }
    const after = this.ws.getBufferedAmount();
    // What uWS could not write now sits in its buffer, behind whatever was there before.
    this.bufferedTotal += Math.max(0, after - before);
    if (onWritten) this.pending.push({ until: this.bufferedTotal, onWritten });
    this.written();
  }

  /** Runs the callbacks of the frames that have left the buffer (called on uWS's drain too). */
  written(): void {
    if (this.pending.length === 0) return;
    const left = this.bufferedTotal - (this.closed ? this.bufferedTotal : this.ws.getBufferedAmount());
    let done = 0;
    while (done < this.pending.length && this.pending[done].until <= left) done += 1;
    if (done === 0) return;
    const ready = this.pending.splice(0, done);
    // Never inside send(): its caller expects the callback later, as `ws` calls it.
    queueMicrotask(() => {
      for (const { onWritten } of ready) onWritten();
    });
  }

  get bufferedAmount(): number {
    return this.closed ? 0 : this.ws.getBufferedAmount() + this.queuedBytes;
  }

  ping(): void {
    // After the frames sent before it: its pong is the client's receipt for them.
    this.writeQueued();
    if (!this.closed) this.ws.ping();
  }

  close(code: number, reason: string): void {
    // The frames sent before it (a fatal error, say) go out ahead of the close frame.
    this.writeQueued();
    if (!this.closed) this.ws.end(code, reason);
  }

  terminate(): void {
    if (!this.closed) this.ws.close();
  }

  /** uWS's close handler ran: the socket may not be used any more. */
  onClosed(): void {
    this.closed = true;
    this.writeQueued();
    this.failUnwritten(
      this.pending.splice(0).map(({ onWritten }) => onWritten),
      "the socket closed before the frame was written",
    );
    this.handlers?.onClose();
  }

  private failUnwritten(callbacks: ((err?: Error) => void)[], reason: string): void {
    if (callbacks.length === 0) return;
    queueMicrotask(() => {
      for (const onWritten of callbacks) onWritten(new Error(reason));
    });
  }
}

interface UpgradeFacts {
  remoteAddress: string;
  forwardedFor: string | undefined;
}

/**
 * Serves WebSockets at `path` on `app`. `accepting` answers false once the server drains. Other
 * upgrade requests never reach this route (uWS only routes requests with a proper 24-character
 * key here); the front refuses them with `refuseUpgrade`.
 */
export function attachUwsServer(
  uws: UwsModule,
  app: TemplatedApp,
  path: string,
  accepting: () => boolean,
  onConnection: (socket: GatewaySocket) => SocketHandlers,
): SocketServer {
  const open = new Set<WebSocket<SocketState>>();
  let closing = false;
  let allGone: (() => void) | undefined;

  app.ws<SocketState & Partial<UpgradeFacts>>(path, {
    compression: uws.DISABLED,
    maxPayloadLength: maxClientFrameBytes,
    maxBackpressure: maxBackpressureBytes,
    // The gateway's own timers (authentication, idle) decide when a connection has gone quiet.
    idleTimeout: 0,
    sendPingsAutomatically: false,
    upgrade(res: HttpResponse, req: HttpRequest, context: us_socket_context_t) {
      const header = (name: string) => req.getHeader(name);
      // A head node:http's parser would refuse (431) is refused alike, before anything else.
      if (requestHeadBytes(req.getUrl(), req.getQuery() ?? "", (visit) => req.forEach(visit)) >= maxHeaderBytes) {
        refuseUpgrade(res, "431 Request Header Fields Too Large");
        return;
      }
      const refusal = upgradeRefusal(path, path, header("host"), accepting() && !closing);
      if (refusal) {
        refuseUpgrade(res, refusal);
        return;
      }
      // What `ws` checks that uWS does not: the version and the Upgrade token.
      if (header("sec-websocket-version") !== "13" || header("upgrade").toLowerCase() !== "websocket") {
        refuseUpgrade(res, "400 Bad Request");
        return;
      }
      const forwarded: string[] = [];
      req.forEach((name, value) => {
        if (name === "x-forwarded-for") forwarded.push(value);
      });
      const protocol = header("sec-websocket-protocol").split(",", 1)[0].trim();
      res.upgrade<Partial<SocketState> & UpgradeFacts>(
        { remoteAddress: addressText(res.getRemoteAddress()), forwardedFor: forwarded.join(",") || undefined },
        header("sec-websocket-key"),
        protocol,
        // No extensions: per-message deflate stays off whatever the client offers.
        "",
        context,
      );
    },
    open(ws) {
      const facts = ws.getUserData();
      const socket = new UwsGatewaySocket(ws, facts.remoteAddress ?? "", facts.forwardedFor);
      facts.socket = socket;
      open.add(ws);
      socket.handlers = onConnection(socket);
    },
    message(ws, message, isBinary) {
      // uWS reclaims the buffer when this handler returns.
      ws.getUserData().socket.handlers?.onMessage(Buffer.from(new Uint8Array(message)), isBinary);
    },
    drain(ws) {
      ws.getUserData().socket.written();
    },
    pong(ws) {
      ws.getUserData().socket.handlers?.onPong();
    },
    close(ws) {
      open.delete(ws);
      ws.getUserData().socket?.onClosed();
      if (closing && open.size === 0) allGone?.();
    },
  });

  return {
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        if (open.size === 0) {
          resolve();
          return;
        }
        allGone = resolve;
        // Clients that do not answer the close frames already sent in time are dropped.
        const cutoff = setTimeout(() => {
          for (const ws of [...open]) ws.close();
        }, closeHandshakeGraceMs);
        const done = allGone;
        allGone = () => {
          clearTimeout(cutoff);
          done();
        };
      }),
  };
}
