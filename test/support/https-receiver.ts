// A local HTTPS server that records webhook requests, with a certificate the server under test
// trusts through NODE_EXTRA_CA_CERTS (scripts/test.sh creates both).
import { readFileSync } from "node:fs";
import type { IncomingHttpHeaders } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { join } from "node:path";

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** Decides the status of each request (default 200); may delay to simulate a slow endpoint. */
export type Responder = (request: ReceivedRequest, index: number) => number | Promise<number>;

export interface HttpsReceiver {
  /** https://localhost:<port> */
  url: string;
  received: ReceivedRequest[];
  respond: Responder;
  /** Resolves once at least `count` requests have arrived. */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export function testTlsDir(): string {
  const dir = process.env.PARLEY_TEST_TLS_DIR;
  if (!dir) throw new Error("PARLEY_TEST_TLS_DIR is not set: run the tests with `npm test`");
  return dir;
}

export async function startHttpsReceiver(respond: Responder = () => 200): Promise<HttpsReceiver> {
  const dir = testTlsDir();
  const received: ReceivedRequest[] = [];
  const waiters: (() => void)[] = [];
  const receiver: HttpsReceiver = {
    url: "",
    received,
    respond,
    async waitFor(count, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (received.length < count) {
        if (Date.now() > deadline) throw new Error(`expected ${count} webhook requests, got ${received.length}`);
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 50);
        });
      }
      return received.slice(0, count);
    },
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Every socket, not only those closeAllConnections knows (past their TLS handshake): one
        // still in it, or idle before its first request, would hold close() up to the timeouts.
        for (const socket of sockets) socket.destroy();
      });
    },
  };
  const server: Server = createServer({ key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const request: ReceivedRequest = { method: req.method ?? "", path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), at: Date.now() };
      const index = received.length;
      received.push(request);
      for (const wake of waiters.splice(0)) wake();
      Promise.resolve(receiver.respond(request, index)).then(
        (status) => res.writeHead(status).end(),
        () => res.destroy(),
      );
    });
  });
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  receiver.url = `https://localhost:${(server.address() as AddressInfo).port}`;
  return receiver;
}
