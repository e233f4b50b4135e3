// The edge's HTTP routes, written once for both fronts (edge/node-front.ts on node:http,
// edge/uws-front.ts on uWebSockets.js): the Host check, /healthz, /metrics, media downloads and,
// through a front-specific hook, the Connect API. A front turns its own request and response into
// an EdgeRequest and an EdgeReply; everything a route says to a client goes through them.
import type { Readable } from "node:stream";
import { errorBodyJson } from "../api/errors.js";
import { Errors, type CatalogueEntry } from "../shared/errors.js";
import { mediaPathPrefix } from "../shared/media-download.js";
import { metricsRegistry } from "../shared/metrics.js";
import { isServableHost } from "../shared/public-url.js";
import type { SocketAcceptor } from "../gateway/socket.js";

export interface EdgeRequest {
  /** As sent (HTTP methods are case-sensitive). */
  readonly method: string;
  /** The path, without the query. */
  readonly path: string;
  /** The query without its "?", or "". */
  readonly query: string;
  /** A header by its lower-case name; repeated headers come joined with ", ". */
  header(name: string): string | undefined;
}

export type EdgeHeaders = Record<string, string>;

export interface EdgeReply {
  /**
   * Answers whole. Without a body, a `content-length` header is announced as is (a HEAD answer);
   * once the server drains, the answer carries `Connection: close`.
   */
  send(status: number, headers: EdgeHeaders, body?: string | Uint8Array): void;
  /**
   * Answers with a body read from `body`, no faster than the client takes it; `content-length`
   * must be among the headers. Resolves once all is handed to the network or the client went away
   * (then `body` is destroyed).
   */
  stream(status: number, headers: EdgeHeaders, body: Readable): Promise<void>;
  /** Whether the status line has gone out (a failure now can only cut the connection). */
  readonly started: boolean;
  /** Whether the client went away or the connection was cut. */
  readonly aborted: boolean;
  /** Cuts the connection. */
  destroy(): void;
}

export interface EdgeRoutes {
  /** Why /healthz answers 503 now (its body says it), or undefined: it answers 200. */
  whyNotReady(): string | undefined;
  /** Media downloads (media-http.ts). */
  downloads(req: EdgeRequest, reply: EdgeReply): void;
  logger: { error(message: string, err: unknown): void };
}

/** A bare error answer with the Connect error body of `entry`; the connection is not kept. */
export function answerError(reply: EdgeReply, status: number, entry: CatalogueEntry): void {
  if (reply.aborted) return;
  if (reply.started) reply.destroy();
  else reply.send(status, { "content-type": "application/json", connection: "close" }, errorBodyJson(entry));
}

/**
 * Serves one request. `api` is the front's way to the Connect API: it answers false when the
 * request is not an RPC of ours. A throw costs only its request (a 500), never the process.
 */
export function routeEdgeRequest(routes: EdgeRoutes, req: EdgeRequest, reply: EdgeReply, api: () => boolean): void {
  try {
    // Checked for every path, before anything reads the Host (Connect builds a URL from it).
    if (!isServableHost(req.header("host"))) {
      answerError(reply, 400, Errors.invalidHost);
      return;
    }
    const { path } = req;
    // Liveness: the process answers. What it can serve is /healthz's to say.
    if (path === "/livez") {
      reply.send(200, { "content-type": "text/plain" }, "ok\n");
      return;
    }
    if (path === "/healthz") {
      const why = routes.whyNotReady();
      reply.send(why === undefined ? 200 : 503, { "content-type": "text/plain" }, why === undefined ? "ok\n" : `unavailable: ${why}\n`);
      return;
    }
    if (path === "/metrics" && req.method === "GET") {
      metricsRegistry.metrics().then(
        (text) => reply.aborted || reply.send(200, { "content-type": metricsRegistry.contentType }, text),
        () => reply.aborted || reply.send(500, {}),
      );
      return;
    }
    if (path.startsWith(mediaPathPrefix)) {
      routes.downloads(req, reply);
      return;
    }
    if (api()) return;
    reply.send(404, { "content-type": "text/plain" }, "not found\n");
  } catch (err) {
    routes.logger.error("failed to answer an HTTP request", err);
    answerError(reply, 500, Errors.internal);
  }
}

export interface HttpTimeouts {
  /** Longest a client may take to send a request's headers. */
  headersTimeoutMs: number;
  /**
   * Longest a client may take to send a whole request, body included. It covers receiving only:
   * a long download or a WebSocket (its upgrade request is short) runs as long as it needs.
   */
  requestTimeoutMs: number;
}

/** A slow sender holds a socket for at most about this long; 30 s moves an 8 MiB body at about 2.2 Mbit/s. */
export const defaultHttpTimeouts: HttpTimeouts = { headersTimeoutMs: 20_000, requestTimeoutMs: 30_000 };

/** The listening side of the edge's one port: HTTP routes and WebSockets, on node:http or uWS. */
export interface EdgeFront {
  /** Accepts WebSockets at one path (the gateway's socket driver). */
  readonly sockets: SocketAcceptor;
  /** Opens the port; resolves with the bound port number. */
  listen(host: string, port: number): Promise<number>;
  /**
   * Stops accepting connections and waits for the HTTP requests in flight to be answered (each
   * with `Connection: close`), up to `windowMs` or until `cut` resolves; what remains is cut.
   * Resolves with the number of connections cut. WebSockets are left to the gateway.
   */
  drain(windowMs: number, cut: Promise<void>): Promise<number>;
  /** After the gateway has closed its sockets: drops any connection left and releases the port. */
  close(): Promise<void>;
}
