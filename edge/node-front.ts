// The edge on node:http (SOCKET_DRIVER=ws): the routes of edge-http.ts, the Connect API through
// its node handler, WebSockets through `ws` on the same server, and the drain of http-drain.ts.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Duplex, Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { errorBodyJson } from "../api/errors.js";
import { attachWsServer } from "../gateway/ws-socket-server.js";
import { HttpDrain } from "../http-drain.js";
import { Errors } from "../shared/errors.js";
import { maxHeaderBytes } from "../shared/http-limits.js";
import { routeEdgeRequest, type EdgeFront, type EdgeReply, type EdgeRequest, type EdgeRoutes, type HttpTimeouts } from "./edge-http.js";

export interface NodeFrontOptions {
  routes: EdgeRoutes;
  timeouts: HttpTimeouts;
  /** Serves the request if it is a Connect RPC (api/api-service.ts); false when it is not ours. */
  api(req: IncomingMessage, res: ServerResponse): boolean;
  logger: { error(message: string, err: unknown): void };
}

function edgeRequest(req: IncomingMessage): EdgeRequest {
  const url = req.url ?? "";
  const mark = url.indexOf("?");
  return {
    method: req.method ?? "",
    path: mark < 0 ? url : url.slice(0, mark),
    query: mark < 0 ? "" : url.slice(mark + 1),
    header(name) {
      const value = req.headers[name];
      return Array.isArray(value) ? value.join(", ") : value;
    },
  };
}

function edgeReply(res: ServerResponse): EdgeReply {
  return {
    send(status, headers, body) {
      res.writeHead(status, headers).end(body);
    },
    async stream(status, headers, body) {
      try {
        res.writeHead(status, headers);
      } catch (err) {
        body.destroy();
        throw err;
      }
      // A client that goes away mid-download ends the pipeline with an error; nothing to report.
      await pipeline(body as Readable, res).catch(() => undefined);
    },
    get started() {
      return res.headersSent;
    },
    get aborted() {
      return res.destroyed;
    },
    destroy: () => res.destroy(),
  };
}

/**
 * Reads past the rest of a body whose request was answered before it was read to its end (a body
 * over the limit, a refusal from the head, an error): a client still sending it reads the answer,
 * where closing (or leaving the body unread until the request timeout closes) would meet its
 * writes with a reset. The next request on the connection is served once the body has passed; a
 * body still arriving at the request timeout is cut by node:http's own check.
 */
function readPastBody(req: IncomingMessage, socket: Socket): void {
  if (req.complete) return;
  // Whoever was reading has no use for the rest (the API stops keeping bytes past the limit;
  // Connect-ES stops iterating, which leaves a "readable" listener that keeps the stream paused).
  req.removeAllListeners("readable");
  // node:http's own way to drop a body nobody reads: its parser then stops handing the request
  // bytes (and pausing the socket when they are not taken). A request Connect-ES destroyed when it
  // stopped iterating does not resume its socket: that is done here.
  (req as IncomingMessage & { _dump(): void })._dump();
  if (req.destroyed) socket.resume();
}

/** What node:http answers to a request its parser refuses, by error code (its own socketOnError). */
const parserRefusals: Record<string, string> = {
  HPE_CHUNK_EXTENSIONS_OVERFLOW: "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n",
  ERR_HTTP_REQUEST_TIMEOUT: "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n",
};
const badRequest = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n";
const headTooLargeBody = errorBodyJson(Errors.requestHeadersTooLarge);
const headTooLarge = `HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(headTooLargeBody)}\r\nConnection: close\r\n\r\n${headTooLargeBody}`;

/**
 * Answers a request node:http's parser refused, as node:http itself would, except for a head over
 * maxHeaderBytes: that one gets the Connect error body of REQUEST_HEADERS_TOO_LARGE, and what the
 * client still sends (the rest of a 1 MB header, its body) is read and dropped until it closes, so
 * that it reads the answer instead of a reset. A client that keeps sending is cut at the headers
 * timeout. `inFlight` is node:http's answer in progress on the socket, if any: once its head went
 * out, nothing can be said any more.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, answered: WeakSet<Duplex>, headersTimeoutMs: number): void {
  if (answered.has(socket)) return;
  answered.add(socket);
  const inFlight = (socket as Duplex & { _httpMessage?: { _headerSent?: boolean } })._httpMessage;
  const canAnswer = socket.writable && !inFlight?._headerSent;
  if (err.code !== "HPE_HEADER_OVERFLOW" || !canAnswer) {
    if (canAnswer && err.code !== "ECONNRESET") socket.write(parserRefusals[err.code ?? ""] ?? badRequest);
    socket.destroy(err);
    return;
  }
  // node:http's own listeners would feed the rest to the failed parser (and report it again).
  socket.removeAllListeners("data");
  socket.removeAllListeners("end");
  socket.on("data", () => undefined);
  socket.once("end", () => socket.destroy());
  socket.on("error", () => socket.destroy());
  setTimeout(() => socket.destroy(), headersTimeoutMs).unref();
  // The server's sockets are half-open: the FIN goes out after the answer, and reading goes on.
  socket.end(headTooLarge);
  socket.resume();
}

export function nodeFront(options: NodeFrontOptions): EdgeFront {
  const { timeouts } = options;
  const headersTimeout = Math.min(timeouts.headersTimeoutMs, timeouts.requestTimeoutMs);
  const server = createServer(
    {
      keepAliveTimeout: 65_000,
      headersTimeout,
      requestTimeout: timeouts.requestTimeoutMs,
      // Node checks both limits in a sweep at this interval (30 s unless told), which would
      // otherwise add up to 30 s to each of them.
      connectionsCheckingInterval: Math.min(5_000, Math.ceil(headersTimeout / 4)),
      // Said, though it is the default, because the uWS front and the docs follow this number.
      maxHeaderSize: maxHeaderBytes,
    },
    (req, res) => {
      const { socket } = req;
      res.once("finish", () => readPastBody(req, socket));
      routeEdgeRequest(options.routes, edgeRequest(req), edgeReply(res), () => options.api(req, res));
    },
  );
  const answered = new WeakSet<Duplex>();
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket, answered, headersTimeout));
  const drain = new HttpDrain(server);
  return {
    sockets: (path, onConnection) => attachWsServer(server, path, onConnection),
    async listen(host, port) {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          // A failed accept (out of file descriptors under a flood of connections) is reported
          // here; without a listener it would end the process.
          server.on("error", (err) => options.logger.error("HTTP server error", err));
          resolve();
        });
      });
      return (server.address() as AddressInfo).port;
    },
    drain: (windowMs, cut) => drain.drain(windowMs, cut),
    close: () => drain.close(),
  };
}
