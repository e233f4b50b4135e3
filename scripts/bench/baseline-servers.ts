// The baselines the benchmark measures Parley against, each in its own process like the server:
//   relay: a bare `ws` server; a client sends {"to": [ids], "frame": "<text>"} and the server
//          forwards the frame text to those sockets. No auth, no storage, no protocol.
//   echo:  a plain node:http server answering each POST with its JSON body.
// Usage: tsx scripts/bench/baseline-servers.ts relay|echo <port>
import { createServer } from "node:http";
import { WebSocketServer, type WebSocket } from "ws";

const [mode, portText] = process.argv.slice(2);
const port = Number(portText);

if (mode === "relay") {
  const sockets = new Map<string, WebSocket>();
  const wss = new WebSocketServer({ port, host: "127.0.0.1", perMessageDeflate: false });
  wss.on("connection", (socket, req) => {
    const id = new URL(req.url ?? "/", "http://x").searchParams.get("id") ?? "";
    sockets.set(id, socket);
    socket.on("message", (data) => {
      const { to, frame } = JSON.parse(data.toString()) as { to: string[]; frame: string };
      for (const target of to) sockets.get(target)?.send(frame);
    });
    socket.on("close", () => sockets.delete(id));
  });
  wss.on("listening", () => console.log("ready"));
} else if (mode === "echo") {
  createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      JSON.parse(body.toString() || "{}");
      res.writeHead(200, { "content-type": "application/json", "content-length": body.length }).end(body);
    });
  }).listen(port, "127.0.0.1", () => console.log("ready"));
} else {
  console.error("usage: baseline-servers.ts relay|echo <port>");
  process.exit(2);
}
