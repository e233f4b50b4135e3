// The socket layer the gateway rules need, so that either WebSocket implementation carries them:
// `ws` on node:http (ws-socket-server.ts) or uWebSockets.js (uws-socket-server.ts), chosen by
// SOCKET_DRIVER once at start-up.
import { isServableHost } from "../shared/public-url.js";

export interface GatewaySocket {
  /**
   * Queues a frame: text for a string, binary for bytes. `onWritten` runs once the frame has been
   * handed to the network, with an error when it never will be.
   */
  send(data: string | Uint8Array, onWritten?: (err?: Error) => void): void;
  /** Bytes accepted by send() but not yet written to the network. */
  readonly bufferedAmount: number;
  /**
   * Queues a WebSocket ping behind the frames already queued. Clients answer it with a pong
   * without the application's help (browsers, ws, gorilla and coder/websocket all do), and its
   * arrival shows they read everything queued before it.
   */
  ping(): void;
  /** Closes with a WebSocket close code after flushing what is queued. */
  close(code: number, reason: string): void;
  /** Drops the connection at once, discarding what is queued. */
  terminate(): void;
  /** The peer's address. */
  readonly remoteAddress: string;
  /** The X-Forwarded-For header of the upgrade request, believed only from trusted proxies. */
  readonly forwardedFor?: string;
}

export interface SocketHandlers {
  onMessage(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void;
  onClose(): void;
  /** A pong arrived (the answer to ping(), or one the client sent unasked). */
  onPong(): void;
}

export interface SocketServer {
  /**
   * Stops accepting connections and resolves once every connection has gone: those already sent
   * a close frame get a short while to answer it, the rest are dropped.
   */
  close(): Promise<void>;
}

/** Accepts WebSocket connections at one path of the edge's port, handing each to `onConnection`. */
export type SocketAcceptor = (path: string, onConnection: (socket: GatewaySocket) => SocketHandlers) => SocketServer;

export type UpgradeRefusal = "400 Bad Request" | "404 Not Found" | "431 Request Header Fields Too Large" | "503 Service Unavailable";

/** Why an upgrade to a Parley socket at `path` is refused (both drivers answer it the same), or undefined when it may proceed. */
export function upgradeRefusal(path: string, wanted: string, host: string | undefined, accepting: boolean): UpgradeRefusal | undefined {
  if (path !== wanted) return "404 Not Found";
  if (!isServableHost(host)) return "400 Bad Request";
  // The server is shutting down: a keep-alive connection asking to upgrade now would only be closed again.
  if (!accepting) return "503 Service Unavailable";
  return undefined;
}
