// The edge on node:http (SOCKET_DRIVER=ws): the routes of edge-http.ts, the Connect API through
// its node handler, WebSockets through `ws` on the same server, and the drain of http-drain.ts.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { attachWsServer } from "../gateway/ws-socket-server.js";
import { HttpDrain } from "../http-drain.js";
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
    },
    (req, res) => routeEdgeRequest(options.routes, edgeRequest(req), edgeReply(res), () => options.api(req, res)),
  );
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
