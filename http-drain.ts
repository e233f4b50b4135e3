// Graceful stop of the shared HTTP server. Stopping closes the listening socket (new connections
// are refused) and the idle keep-alive connections; every request already on a connection, even
// one whose headers are only partly received, is answered, and its answer carries
// `Connection: close` so the client goes elsewhere for its next request. Whatever is still running
// when the drain window ends is cut. Upgraded connections (WebSockets) are not HTTP requests: the
// gateway closes them itself.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";

export class HttpDrain {
  /** Connections that carry HTTP requests (not upgraded ones). */
  private readonly httpSockets = new Set<Socket>();
  private readonly allSockets = new Set<Socket>();
  private readonly inFlight = new Set<ServerResponse>();
  private closing = false;
  private closed: Promise<void> | undefined;
  private settled: (() => void) | undefined;

  constructor(private readonly server: Server) {
    server.on("connection", (socket: Socket) => {
      this.httpSockets.add(socket);
      this.allSockets.add(socket);
      socket.once("close", () => {
        this.allSockets.delete(socket);
        this.forget(socket);
      });
    });
    server.on("upgrade", (_req: IncomingMessage, socket: Socket) => this.forget(socket));
    // Ahead of the request handler, so the header is in place before any handler writes.
    server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => this.track(req, res));
  }

  /** True once stop has begun. */
  get stopping(): boolean {
    return this.closing;
  }

  private track(req: IncomingMessage, res: ServerResponse): void {
    this.inFlight.add(res);
    if (this.closing) res.setHeader("connection", "close");
    res.once("close", () => {
      this.inFlight.delete(res);
      // An answer whose headers went out as keep-alive before the stop began: the connection is
      // ended after it, unless another (pipelined) answer is still due on it.
      if (this.closing && !req.socket.destroyed && ![...this.inFlight].some((other) => other.req.socket === req.socket)) req.socket.end();
    });
  }

  private forget(socket: Socket): void {
    this.httpSockets.delete(socket);
    if (this.closing && this.httpSockets.size === 0) this.settled?.();
  }

  /**
   * Stops accepting connections and waits until every HTTP connection has closed: each is
   * answered and then ends, or is cut when `windowMs` elapses or `cut` resolves, whichever comes
   * first. Resolves with the number of connections cut (0 when everything finished in time).
   */
  async drain(windowMs: number, cut: Promise<void>): Promise<number> {
    this.closing = true;
    for (const res of this.inFlight) if (!res.headersSent) res.setHeader("connection", "close");
    this.closed = new Promise((resolve) => this.server.close(() => resolve()));
    // Node 20 already does this inside close(); said here because the drain depends on it.
    this.server.closeIdleConnections();
    if (this.httpSockets.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => (this.settled = resolve)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, windowMs))),
        cut,
      ]);
      clearTimeout(timer);
    }
    const remaining = [...this.httpSockets];
    for (const socket of remaining) socket.destroy();
    return remaining.length;
  }

  /** After the gateway has closed its sockets: drops any connection left and waits for the server to close. */
  async close(): Promise<void> {
    this.closed ??= new Promise((resolve) => this.server.close(() => resolve()));
    for (const socket of this.allSockets) socket.destroy();
    await this.closed;
  }
}
