// The socket layer the gateway rules need, so another WebSocket implementation (uWebSockets.js
// where its binaries load) can replace `ws` without touching the rules.
export interface GatewaySocket {
  /** Queues a frame: text for a string, binary for bytes. */
  send(data: string | Uint8Array): void;
  /** Bytes accepted by send() but not yet written to the network. */
  readonly bufferedAmount: number;
  /** Closes with a WebSocket close code after flushing what is queued. */
  close(code: number, reason: string): void;
  /** Drops the connection at once, discarding what is queued. */
  terminate(): void;
  /** The peer's address. */
  readonly remoteAddress: string;
}

export interface SocketHandlers {
  onMessage(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void;
  onClose(): void;
}

export interface SocketServer {
  /** Stops accepting connections. */
  close(): Promise<void>;
}
