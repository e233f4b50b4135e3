// The edge on uWebSockets.js (SOCKET_DRIVER=uws). uWS cannot share a port with node:http, so its
// app owns the port and serves everything there: the routes of edge-http.ts, the Connect API
// through a UnaryHttpHandler, and WebSockets (gateway/uws-socket-server.ts).
//
// uWS rules this file keeps: a response may be touched only until it is answered or aborted, so
// every call is guarded; calls outside the request handler are corked (one write per answer);
// a request body is read only through onData attached in the handler, and copied (uWS reuses the
// buffer). What differs from the node front, because uWS offers no hook for it: a request's
// headers are timed by uWS itself (it closes a connection whose request does not arrive within
// about 10 s, without an answer), and idle keep-alive connections are closed only when the drain
// ends (a request arriving on one meanwhile is answered, with `Connection: close`).
import type { BlockList } from "node:net";
import type { Readable } from "node:stream";
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, us_socket } from "@trufflesuite/uws-js-unofficial";
import { maxRequestBytes } from "../api/api-service.js";
import { Errors } from "../shared/errors.js";
import { maxHeaderBytes, requestHeadBytes } from "../shared/http-limits.js";
import { resolveClientAddress } from "../shared/ip.js";
import { upgradeRefusal } from "../gateway/socket.js";
import { addressText, asksForUpgrade, attachUwsServer, refuseUpgrade } from "../gateway/uws-socket-server.js";
import { answerError, routeEdgeRequest, type EdgeFront, type EdgeHeaders, type EdgeReply, type EdgeRequest, type EdgeRoutes, type HttpTimeouts } from "./edge-http.js";
import type { WholeRequestApi } from "./whole-request-api.js";
import type { UwsModule } from "../gateway/uws-native.js";

export interface UwsFrontOptions {
  uws: UwsModule;
  routes: EdgeRoutes;
  timeouts: HttpTimeouts;
  /** Proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES); undefined trusts none. */
  trustedProxies: BlockList | undefined;
  /** The Connect API once the api service has started, else undefined. */
  api(): WholeRequestApi | undefined;
  logger: { error(message: string, err: unknown): void };
}

/** The path WebSockets are served at; the gateway asks for it by name. */
const socketPath = "/ws";

const statusText: Record<number, string> = {
  200: "OK",
  206: "Partial Content",
  304: "Not Modified",
  400: "Bad Request",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  412: "Precondition Failed",
  413: "Payload Too Large",
  415: "Unsupported Media Type",
  416: "Range Not Satisfiable",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  499: "Client Closed Request",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

const statusLine = (status: number) => `${status} ${statusText[status] ?? "Unknown"}`;

/**
 * Headers a repeat of which is dropped, the first kept, as node:http does (IncomingMessage's
 * _addHeaderLine), so both fronts read a request alike; others are joined.
 */
const singleValuedHeaders = new Set([
  "age",
  "authorization",
  "content-length",
  "content-type",
  "etag",
  "expires",
  "from",
  "host",
  "if-modified-since",
  "if-unmodified-since",
  "last-modified",
  "location",
  "max-forwards",
  "proxy-authorization",
  "referer",
  "retry-after",
  "server",
  "user-agent",
]);

/** One request on the uWS front, from its handler until it is answered or aborted. */
class UwsExchange implements EdgeRequest, EdgeReply {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly headers: Record<string, string | undefined> = {};
  readonly peer: string;
  /** What the head counts against maxHeaderBytes. */
  readonly headBytes: number;
  aborted = false;
  started = false;
  /** Answered in full (or cut): the response may not be touched any more. */
  finished = false;
  /** When the body must have arrived (while it is being read). */
  bodyDeadline = 0;
  /** The body has been read to its end. */
  private bodyRead = false;
  private onAbort: (() => void) | undefined;

  constructor(
    private readonly res: HttpResponse,
    req: HttpRequest,
    private readonly front: { draining: boolean; done(exchange: UwsExchange): void },
  ) {
    this.method = req.getCaseSensitiveMethod();
    this.path = req.getUrl();
    this.query = req.getQuery() ?? "";
    this.headBytes = requestHeadBytes(this.path, this.query, (visit) =>
      req.forEach((name, value) => {
        visit(name, value);
        const seen = this.headers[name];
        if (seen === undefined) this.headers[name] = value;
        else if (!singleValuedHeaders.has(name)) this.headers[name] = `${seen}${name === "cookie" ? "; " : ", "}${value}`;
      }),
    );
    this.peer = addressText(res.getRemoteAddress());
    res.onAborted(() => {
      this.aborted = true;
      this.finish();
      this.onAbort?.();
    });
  }

  header(name: string): string | undefined {
    return this.headers[name];
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.front.done(this);
  }

  /** Whether the request announced a body that has not been read to its end. */
  private get bodyUnread(): boolean {
    if (this.bodyRead) return false;
    return this.headers["transfer-encoding"] !== undefined || Number(this.headers["content-length"] ?? 0) > 0;
  }

  /**
   * Writes the status line and headers (corked by the caller); answers whether uWS is to close the
   * connection after the answer. Not while a body is still arriving: uWS closes at once (it sends
   * FIN and closes, so as not to read a large body), and a client still sending then meets a reset
   * before it reads the answer. Left open, uWS reads past the rest of the body by its length and
   * drops it; a client told `Connection: close` closes once it has read the answer, and one that
   * does not is closed by uWS's own idle timeout. uWS offers no way to close a connection once its
   * answer has gone out, so nothing but the announced length bounds that reading.
   */
  private head(status: number, headers: EdgeHeaders): boolean {
    let close = this.front.draining;
    this.res.writeStatus(statusLine(status));
    for (const name in headers) {
      // uWS writes Content-Length itself.
      if (name === "content-length") continue;
      if (name === "connection") {
        close ||= headers[name].toLowerCase() === "close";
        continue;
      }
      this.res.writeHeader(name, headers[name]);
    }
    // uWS closes when told to, but does not say so to the client.
    if (close) this.res.writeHeader("connection", "close");
    return close && !this.bodyUnread;
  }

  send(status: number, headers: EdgeHeaders, body?: string | Uint8Array): void {
    if (this.finished) return;
    this.res.cork(() => {
      this.started = true;
      const close = this.head(status, headers);
      // A HEAD answer announces the length of the body it leaves out (uWS would send the body).
      // The length goes in as a header and endWithoutBody() gets no arguments: given a length
      // (or a close flag) it leaves the connection stalled in this uWS version. A client told
      // `Connection: close` closes it; otherwise the drain's end does.
      if (this.method === "HEAD" || body === undefined) {
        this.res.writeHeader("content-length", headers["content-length"] ?? String(body === undefined ? 0 : Buffer.byteLength(body)));
        this.res.endWithoutBody();
      } else this.res.end(body, close);
    });
    this.finish();
  }

  stream(status: number, headers: EdgeHeaders, body: Readable): Promise<void> {
    if (this.finished) {
      body.destroy();
      return Promise.resolve();
    }
    const total = Number(headers["content-length"]);
    return new Promise<void>((resolve) => {
      const end = () => {
        body.destroy();
        this.finish();
        resolve();
      };
      this.onAbort = end;
      // uWS ends the response itself once `total` bytes have gone through tryEnd.
      this.res.cork(() => {
        this.started = true;
        this.head(status, headers);
        if (total === 0) this.res.end("", this.front.draining);
      });
      if (total === 0) {
        end();
        return;
      }
      /** The chunk uWS could not take whole, and the write offset where it began. */
      let waiting: { chunk: Uint8Array; offset: number } | undefined;
      let sourceEnded = false;
      const offer = (chunk: Uint8Array): boolean => {
        const offset = this.res.getWriteOffset();
        const [ok, done] = this.res.tryEnd(chunk, total);
        if (done) end();
        else if (!ok) waiting = { chunk, offset };
        return ok;
      };
      /** Everything read was offered and the answer is still short of `total`: the client would wait forever. */
      const cutIfShort = () => {
        if (sourceEnded && !waiting && !this.finished) {
          this.destroy();
          end();
        }
      };
      this.res.onWritable((offset) => {
        if (!waiting || this.finished) return true;
        const { chunk, offset: began } = waiting;
        waiting = undefined;
        const ok = offer(chunk.subarray(offset - began));
        if (ok && !this.finished) {
          body.resume();
          cutIfShort();
        }
        return ok;
      });
      body.on("data", (chunk: Buffer) => {
        if (this.finished) return;
        let ok = false;
        this.res.cork(() => (ok = offer(chunk)));
        if (!ok && !this.finished) body.pause();
      });
      body.once("error", () => {
        this.destroy();
        end();
      });
      body.once("end", () => {
        sourceEnded = true;
        cutIfShort();
      });
    });
  }

  destroy(): void {
    if (this.finished) return;
    this.aborted = true;
    // close() runs the abort handler, which finishes the exchange.
    this.res.close();
  }

  /**
   * Reads the body into one buffer, keeping at most `limit` + 1 bytes (the API refuses more than
   * `limit` itself, as on node:http). Must be called from the request handler.
   */
  readBody(limit: number, timeoutMs: number, whole: (body: Uint8Array) => void): void {
    const chunks: Buffer[] = [];
    let kept = 0;
    this.bodyDeadline = Date.now() + timeoutMs;
    this.res.onData((chunk, isLast) => {
      if (this.finished) return;
      if (kept <= limit) {
        const part = Buffer.from(new Uint8Array(chunk).subarray(0, limit + 1 - kept));
        chunks.push(part);
        kept += part.length;
      }
      if (isLast) {
        this.bodyDeadline = 0;
        this.bodyRead = true;
        whole(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
      }
    });
  }

  /** Answers 408 and closes, when the body did not arrive in time. */
  timedOut(): void {
    if (this.finished || this.started) return;
    this.res.cork(() => {
      this.started = true;
      this.res.writeStatus(statusLine(408)).writeHeader("connection", "close").end("", true);
    });
    this.finish();
  }
}

export function uwsFront(options: UwsFrontOptions): EdgeFront {
  const { uws, routes, timeouts, logger } = options;
  const app = uws.App();
  let listenSocket: us_listen_socket | undefined;
  let sweep: NodeJS.Timeout | undefined;
  const inFlight = new Set<UwsExchange>();
  let drained: (() => void) | undefined;
  const front = {
    draining: false,
    done(exchange: UwsExchange) {
      inFlight.delete(exchange);
      if (front.draining && inFlight.size === 0) drained?.();
    },
  };

  const serveApi = (exchange: UwsExchange): boolean => {
    const api = exchange.path.startsWith("/api.v1.") ? options.api() : undefined;
    if (!api) return false;
    const refusal = api.beforeBody(exchange);
    if (refusal) {
      // uWS reads past the body (see UwsExchange.head), and the connection serves on after it.
      exchange.send(refusal.status, refusal.headers, refusal.body);
      return true;
    }
    const clientIp = resolveClientAddress(exchange.peer, exchange.headers["x-forwarded-for"], options.trustedProxies);
    exchange.readBody(maxRequestBytes, timeouts.requestTimeoutMs, (body) => {
      api.serve({ method: exchange.method, path: exchange.path, query: exchange.query, headers: exchange.headers, body, clientIp, host: exchange.headers.host ?? "" }).then(
        (answer) => exchange.send(answer.status, answer.headers, answer.body),
        (err: unknown) => {
          if (exchange.aborted) return;
          logger.error("failed to answer an RPC", err);
          answerError(exchange, 500, Errors.internal);
        },
      );
    });
    return true;
  };

  app.any("/*", (res: HttpResponse, req: HttpRequest) => {
    // Anything asking to upgrade that uWS did not route to the socket path (a wrong path, a broken handshake).
    if (asksForUpgrade((name) => req.getHeader(name))) {
      refuseUpgrade(res, upgradeRefusal(req.getUrl(), socketPath, req.getHeader("host"), !front.draining) ?? "400 Bad Request");
      return;
    }
    let exchange: UwsExchange;
    try {
      exchange = new UwsExchange(res, req, front);
    } catch (err) {
      logger.error("failed to read an HTTP request", err);
      res.cork(() => res.writeStatus(statusLine(400)).writeHeader("connection", "close").end("", true));
      return;
    }
    inFlight.add(exchange);
    // What node:http's parser refuses before any route runs; a head too large for uWS's own parser
    // (over about 4 KiB arriving in more than one read) never gets here: uWS closes it unanswered.
    if (exchange.headBytes >= maxHeaderBytes) {
      answerError(exchange, 431, Errors.requestHeadersTooLarge);
      return;
    }
    routeEdgeRequest(routes, exchange, exchange, () => serveApi(exchange));
  });

  return {
    sockets: (path, onConnection) => {
      if (path !== socketPath) throw new Error(`the uWS front serves WebSockets at ${socketPath} only`);
      return attachUwsServer(uws, app, path, () => !front.draining, onConnection);
    },
    listen: (host, port) =>
      new Promise<number>((resolve, reject) => {
        app.listen(host, port, (socket) => {
          if (!socket) {
            reject(new Error(`uWS could not listen on ${host}:${port} (in use, or not an address of this host)`));
            return;
          }
          listenSocket = socket;
          // A body still arriving past the request limit gets 408; checked at a quarter of the
          // limit, as node:http's sweep does.
          sweep = setInterval(
            () => {
              const now = Date.now();
              for (const exchange of inFlight) if (exchange.bodyDeadline !== 0 && exchange.bodyDeadline <= now) exchange.timedOut();
            },
            Math.min(5_000, Math.ceil(timeouts.requestTimeoutMs / 4)),
          );
          sweep.unref();
          resolve(uws.us_socket_local_port(socket as unknown as us_socket));
        });
      }),
    async drain(windowMs, cut) {
      front.draining = true;
      if (listenSocket) uws.us_listen_socket_close(listenSocket);
      listenSocket = undefined;
      if (inFlight.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((resolve) => (drained = resolve)),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, windowMs))),
          cut,
        ]);
        clearTimeout(timer);
      }
      const remaining = [...inFlight];
      for (const exchange of remaining) exchange.destroy();
      return remaining.length;
    },
    async close() {
      clearInterval(sweep);
      if (listenSocket) uws.us_listen_socket_close(listenSocket);
      listenSocket = undefined;
      // Every socket still open: idle keep-alive connections and WebSockets that never answered.
      // Missing from the package's typings, present in its binary.
      (app as TemplatedApp & { close(): void }).close();
    },
  };
}
