// The gRPC port (GRPC_PORT) of an api process: cleartext HTTP/2 with prior knowledge (h2c), which
// gRPC requires and the main port cannot offer (uWS speaks HTTP/1.1 only, and it owns its listening
// socket, so HTTP/2 connections cannot be picked out there). Every request is an RPC, served by
// Connect-ES through the API's procedures (api/api-service.ts): gRPC, gRPC-Web and Connect all
// work here, with the same authentication, validation and errors as on the main port, which keeps
// serving gRPC-Web over HTTP/1.1. Health, metrics, media and /ws stay on the main port only.
import http2, { type Http2ServerRequest, type Http2ServerResponse, type Http2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { ApiHandle } from "../api/api-service.js";
import { connectErrorOf, errorBodyJson } from "../api/errors.js";
import { grpcRefusal, protocolOf } from "../api/grpc-status.js";
import { Errors, type CatalogueEntry } from "../shared/errors.js";
import { maxHeaderBytes, requestHeadBytes } from "../shared/http-limits.js";
import { isServableHost } from "../shared/public-url.js";
import type { HttpTimeouts } from "./edge-http.js";

export interface GrpcFrontOptions {
  /** The API once its service has started. */
  api(): ApiHandle | undefined;
  /** The main HTTP port, which URLs handed out to gRPC callers name (see mainPortAuthority). */
  httpPort(): number;
  timeouts: HttpTimeouts;
  logger: { error(message: string, err: unknown): void };
}

export interface GrpcFront {
  /** Opens the port; resolves with the bound port number. */
  listen(host: string, port: number): Promise<number>;
  /**
   * Stops accepting connections and sends every connection GOAWAY: calls in flight finish, new
   * ones go elsewhere (gRPC clients reconnect by themselves). Connections still open after
   * `windowMs`, or once `cut` resolves, are cut; resolves with their number.
   */
  drain(windowMs: number, cut: Promise<void>): Promise<number>;
  /** Drops any connection left and releases the port. */
  close(): Promise<void>;
}

/**
 * A connection on which nothing moved for this long is sent GOAWAY, as node:http closes an idle
 * keep-alive connection (edge/node-front.ts); a gRPC channel simply connects again for its next call.
 */
const idleConnectionMs = 65_000;

/** Streams one connection may run at once; a client wanting more opens another connection. */
const maxConcurrentStreams = 100;

/**
 * The Host procedures see for a call on the gRPC port. The URLs they hand out (download links,
 * GetClientConfig's wsUrl) must name the main port, which serves media and /ws: an authority naming
 * this gRPC port is taken to mean the same host's main port. Any other authority (a proxy in front
 * that names its own HTTP address) is kept; PUBLIC_URL and PUBLIC_WS_URL override both.
 */
export function mainPortAuthority(authority: string, grpcPort: number, httpPort: number): string {
  const match = /^(\[[^\]]*\]|[^:]*):(\d+)$/.exec(authority);
  if (!match || Number(match[2]) !== grpcPort) return authority;
  return `${match[1]}:${httpPort}`;
}

export function grpcFront(options: GrpcFrontOptions): GrpcFront {
  const sessions = new Set<Http2Session>();
  let boundPort = 0;
  let closing = false;
  let closed: Promise<void> | undefined;
  let allClosed: (() => void) | undefined;

  const server = http2.createServer({ settings: { maxConcurrentStreams } }, (req, res) => serve(req, res));
  server.on("session", (session: Http2Session) => {
    sessions.add(session);
    session.once("close", () => {
      sessions.delete(session);
      if (closing && sessions.size === 0) allClosed?.();
    });
    session.setTimeout(idleConnectionMs, () => session.close());
    if (closing) session.close();
  });

  function serve(req: Http2ServerRequest, res: Http2ServerResponse): void {
    // A client that takes longer than this to send its whole request loses the stream, as on the
    // main port; the time an answer takes is the engine's to bound.
    const slowSender = setTimeout(() => {
      if (!req.complete) req.stream.close(http2.constants.NGHTTP2_CANCEL);
    }, options.timeouts.requestTimeoutMs);
    res.once("close", () => clearTimeout(slowSender));
    req.once("end", () => clearTimeout(slowSender));
    // An answer given before the request was read to its end (a body over the size limit, an
    // unknown procedure) leaves the client blocked on flow control and the stream open, keeping
    // the connection busy until the drain cuts it. RFC 9113 §8.1: once the answer is complete, the
    // stream ends with NO_ERROR. Node releases such a stream only once the request bytes it holds
    // are read, so they are dropped. A gRPC answer is complete with its trailers (Node sends them
    // in an immediate after asking for them), other answers once their body has ended.
    const discardUnreadRequest = () =>
      setImmediate(() => {
        if (req.complete || req.stream.closed) return;
        req.stream.close(http2.constants.NGHTTP2_NO_ERROR);
        req.stream.removeAllListeners("data");
        req.stream.resume();
      });
    if (protocolOf(req.headers["content-type"]) === "grpc") req.stream.once("wantTrailers", discardUnreadRequest);
    else req.stream.once("finish", discardUnreadRequest);
    try {
      // The head limit of the main port, counted alike (the path as the target, pseudo-headers
      // left out). A header list past 64 KiB never gets here: Node's HTTP/2 session refuses the
      // stream itself (its maxHeaderListSize).
      const { rawHeaders } = req;
      const headBytes = requestHeadBytes(req.url, "", (visit) => {
        for (let index = 0; index < rawHeaders.length; index += 2) if (!rawHeaders[index].startsWith(":")) visit(rawHeaders[index], rawHeaders[index + 1]);
      });
      if (headBytes >= maxHeaderBytes) {
        refuse(req, res, Errors.requestHeadersTooLarge, 431);
        return;
      }
      const authority = req.authority ?? req.headers.host ?? "";
      if (!isServableHost(authority)) {
        refuse(req, res, Errors.invalidHost, 400);
        return;
      }
      const api = options.api();
      if (!api) {
        refuse(req, res, Errors.unavailable, 503);
        return;
      }
      api.serveHttp2(req, res, mainPortAuthority(authority, boundPort, options.httpPort()));
    } catch (err) {
      options.logger.error("failed to answer a request on the gRPC port", err);
      refuse(req, res, Errors.internal, 500);
    }
  }

  /** An error answer before any procedure runs, in the request's protocol, with its ErrorDetail. */
  function refuse(req: Http2ServerRequest, res: Http2ServerResponse, entry: CatalogueEntry, connectStatus: number): void {
    if (res.headersSent) {
      res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      return;
    }
    const contentType = req.headers["content-type"] ?? "";
    const protocol = protocolOf(contentType);
    if (protocol === "connect") {
      res.writeHead(connectStatus, { "content-type": "application/json" }).end(errorBodyJson(entry));
      return;
    }
    universalResponseToNodeResponse(grpcRefusal(protocol, contentType, connectErrorOf(entry)), res).catch(() => res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
  }

  return {
    async listen(host, port) {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          // A failed accept (out of file descriptors) is reported, not fatal.
          server.on("error", (err) => options.logger.error("gRPC server error", err));
          resolve();
        });
      });
      boundPort = (server.address() as AddressInfo).port;
      return boundPort;
    },
    async drain(windowMs, cut) {
      closing = true;
      closed = new Promise((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      if (sessions.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([new Promise<void>((resolve) => (allClosed = resolve)), new Promise<void>((resolve) => (timer = setTimeout(resolve, windowMs))), cut]);
        clearTimeout(timer);
      }
      const remaining = [...sessions];
      for (const session of remaining) session.destroy();
      return remaining.length;
    },
    async close() {
      closing = true;
      closed ??= new Promise((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.destroy();
      await closed;
    },
  };
}
