// The `ws` implementation of the socket layer, attached to the shared HTTP server at one path.
import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import { upgradeRefusal, type GatewaySocket, type SocketHandlers, type SocketServer } from "./socket.js";

/** Client frames are only auth and heartbeat; anything larger is not a Parley client. */
const maxClientFrameBytes = 64 * 1024;

/** How long closing waits for clients to answer the close frames already sent before dropping them. */
const closeHandshakeGraceMs = 2000;

export function attachWsServer(server: Server, path: string, onConnection: (socket: GatewaySocket) => SocketHandlers): SocketServer {
  const wss = new WebSocketServer({ noServer: true, maxPayload: maxClientFrameBytes, perMessageDeflate: false });
  const refuse = (stream: Duplex, status: string) => stream.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  const onUpgrade = (req: IncomingMessage, stream: Duplex, head: Buffer) => {
    // Node hands the socket over with no error listener of its own: a peer that resets it now
    // would otherwise end the process.
    stream.on("error", () => stream.destroy());
    try {
      upgrade(req, stream, head);
    } catch {
      stream.destroy();
    }
  };
  const upgrade = (req: IncomingMessage, stream: Duplex, head: Buffer) => {
    // Once the server stopped listening or this socket server closed (shutting down), upgrades
    // are refused.
    const refusal = upgradeRefusal((req.url ?? "").split("?", 1)[0], path, req.headers.host, server.listening && !closed);
    if (refusal) {
      refuse(stream, refusal);
      return;
    }
    wss.handleUpgrade(req, stream, head, (ws: WebSocket) => {
      const address = (req.socket.remoteAddress ?? "").replace(/^::ffff:/, "");
      const socket: GatewaySocket = {
        // ws answers a written frame with null; the port's promise is no error at all.
        send: (data, onWritten) => ws.send(data, { binary: typeof data !== "string" }, onWritten && ((err) => onWritten(err ?? undefined))),
        get bufferedAmount() {
          return ws.bufferedAmount;
        },
        close: (code, reason) => ws.close(code, reason),
        ping: () => ws.ping(),
        terminate: () => ws.terminate(),
        remoteAddress: address,
        forwardedFor: [req.headers["x-forwarded-for"] ?? []].flat().join(",") || undefined,
      };
      const handlers = onConnection(socket);
      ws.on("message", (data, isBinary) => handlers.onMessage(data, isBinary));
      ws.on("close", () => handlers.onClose());
      ws.on("pong", () => handlers.onPong());
      ws.on("error", () => ws.terminate());
    });
  };
  // Stays attached once closed: without an upgrade listener node:http would hand the request to
  // no one, and the client would wait for an answer that never comes.
  let closed = false;
  server.on("upgrade", onUpgrade);
  return {
    close: () =>
      new Promise<void>((resolve) => {
        closed = true;
        // The callback runs once every client has gone; clients that do not answer the close
        // frame in time are dropped.
        const cutoff = setTimeout(() => {
          for (const client of wss.clients) client.terminate();
        }, closeHandshakeGraceMs);
        wss.close(() => {
          clearTimeout(cutoff);
          resolve();
        });
      }),
  };
}
