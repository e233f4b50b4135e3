// The baselines the benchmark measures Parley against, each in its own process like the server:
//   relay: a bare `ws` server, the cost floor of moving Parley's pushes. Each client connects as
//          /?id=<n>; a binary message [u16 count][count × u32 socket ids][frame] is forwarded, frame
//          bytes unchanged, to those sockets. No auth, no storage, no protocol.
//   echo:  a plain node:http server answering each POST with its JSON body.
// Usage: tsx scripts/bench/baseline-servers.ts relay|echo <port>
import { createServer } from "node:http";
import { WebSocketServer, type WebSocket } from "ws";

const [mode, portText] = process.argv.slice(2);
const port = Number(portText);

if (mode === "relay") {
  const sockets: (WebSocket | undefined)[] = [];
  const wss = new WebSocketServer({ port, host: "127.0.0.1", perMessageDeflate: false });
  wss.on("connection", (socket, req) => {
    const id = Number(new URL(req.url ?? "/", "http://relay").searchParams.get("id"));
    sockets[id] = socket;
    socket.on("message", (data: Buffer) => {
      const count = data.readUInt16LE(0);
      const frame = data.subarray(2 + 4 * count);
      for (let i = 0; i < count; i++) sockets[data.readUInt32LE(2 + 4 * i)]?.send(frame, { binary: true });
    });
    socket.on("close", () => sockets[id] === socket && (sockets[id] = undefined));
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
