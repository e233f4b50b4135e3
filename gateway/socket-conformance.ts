// The promises of the socket port (socket.ts), as one mocha suite every socket driver must pass:
// each driver is served by its front on a real port and driven by a real WebSocket client, so
// the gateway's rules (connection.ts) hold whichever driver carries them.
import { once } from "node:events";
import { expect } from "chai";
import { WebSocket, type RawData } from "ws";
import type { GatewaySocket, SocketHandlers, SocketServer } from "./socket.js";

/** A driver on a real port: its front accepts sockets at `path` and listens on 127.0.0.1. */
export interface SocketDriverUnderTest {
  accept(path: string, onConnection: (socket: GatewaySocket) => SocketHandlers): SocketServer;
  /** The port the front listens on. */
  readonly port: number;
  /** Releases the port. */
  close(): Promise<void>;
}

/** What the server side of one connection saw. */
class Seen implements SocketHandlers {
  readonly messages: { data: Buffer; isBinary: boolean }[] = [];
  pongs = 0;
  closed = false;
  private waiters: (() => void)[] = [];

  constructor(readonly socket: GatewaySocket) {}

  onMessage(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data instanceof ArrayBuffer ? new Uint8Array(data) : data);
    this.messages.push({ data: bytes, isBinary });
    this.wake();
  }

  onClose(): void {
    this.closed = true;
    this.wake();
  }

  onPong(): void {
    this.pongs += 1;
    this.wake();
  }

  /** Resolves once `done` holds (checked after every event), or fails after two seconds. */
  async until(done: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 2000;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`the server side never saw ${what}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }
}

/** What the client side of one connection received, in order. */
function recorded(client: WebSocket): { events: string[] } {
  const log = { events: [] as string[] };
  client.on("message", (data: RawData, isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as Buffer);
    log.events.push(isBinary ? `binary ${bytes.toString("hex")}` : `text ${bytes.toString("utf8")}`);
  });
  client.on("ping", () => log.events.push("ping"));
  client.on("close", (code: number, reason: Buffer) => log.events.push(`close ${code} ${reason.toString("utf8")}`));
  return log;
}

const written = (socket: GatewaySocket, data: string | Uint8Array) =>
  new Promise<Error | undefined>((resolve) => {
    socket.send(data, (err) => resolve(err));
  });

export function describeSocketConformance(name: string, start: () => Promise<SocketDriverUnderTest>): void {
  describe(`socket port conformance: ${name}`, () => {
    const path = "/ws";
    let driver: SocketDriverUnderTest;
    let server: SocketServer;
    let connections: Seen[];
    let clients: WebSocket[];

    beforeEach(async () => {
      driver = await start();
      connections = [];
      clients = [];
      server = driver.accept(path, (socket) => {
        const seen = new Seen(socket);
        connections.push(seen);
        return seen;
      });
    });

    afterEach(async () => {
      for (const client of clients) if (client.readyState !== WebSocket.CLOSED) client.terminate();
      await server.close();
      await driver.close();
    });

    /** A client connecting at `at`; what fails it is asserted by the test, never thrown. */
    const opened = (at: string, headers: Record<string, string> = {}) => {
      const client = new WebSocket(`ws://127.0.0.1:${driver.port}${at}`, { headers });
      client.on("error", () => {});
      clients.push(client);
      return client;
    };

    /** Opens a client at `at` and resolves once the server side has its connection. */
    const connect = async (headers: Record<string, string> = {}, at = path): Promise<{ client: WebSocket; seen: Seen; log: { events: string[] } }> => {
      const before = connections.length;
      const client = opened(at, headers);
      const log = recorded(client);
      await once(client, "open");
      const deadline = Date.now() + 2000;
      while (connections.length === before && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(connections.length, "connections handed over").to.equal(before + 1);
      return { client, seen: connections[before], log };
    };

    /** The status an upgrade request is refused with. */
    const refusal = async (at: string, headers: Record<string, string> = {}): Promise<number> => {
      const client = opened(at, headers);
      const [, response] = (await once(client, "unexpected-response")) as [unknown, { statusCode: number }];
      return response.statusCode;
    };

    it("hands each connection at its path over with the peer's address and the X-Forwarded-For header as sent", async () => {
      const plain = await connect();
      expect(plain.seen.socket.remoteAddress).to.equal("127.0.0.1");
      expect(plain.seen.socket.forwardedFor).to.equal(undefined);
      const proxied = await connect({ "x-forwarded-for": "203.0.113.7, 198.51.100.2" });
      expect(proxied.seen.socket.forwardedFor).to.equal("203.0.113.7, 198.51.100.2");
    });

    it("refuses an upgrade at another path with 404 and one with an unusable Host with 400, handing nothing over", async () => {
      expect(await refusal("/elsewhere")).to.equal(404);
      expect(await refusal(path, { host: "bad host" })).to.equal(400);
      expect(connections).to.have.length(0);
    });

    it("sends a string as a text frame and bytes as a binary frame, in the order sent, and tells each sender once written", async () => {
      const { seen, log } = await connect();
      const answers = await Promise.all([written(seen.socket, "first"), written(seen.socket, new Uint8Array([1, 2, 3])), written(seen.socket, "ü third")]);
      expect(answers).to.deep.equal([undefined, undefined, undefined]);
      const deadline = Date.now() + 2000;
      while (log.events.length < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(log.events).to.deep.equal(["text first", "binary 010203", "text ü third"]);
      expect(seen.socket.bufferedAmount).to.equal(0);
    });

    it("hands the client's frames over with whether each was binary", async () => {
      const { client, seen } = await connect();
      client.send("hello");
      client.send(Buffer.from([9, 8, 7]));
      await seen.until(() => seen.messages.length === 2, "both frames");
      expect(seen.messages.map(({ data, isBinary }) => [isBinary, data.toString("hex")])).to.deep.equal([
        [false, Buffer.from("hello").toString("hex")],
        [true, "090807"],
      ]);
    });

    it("queues a ping behind the frames already sent, and the client's answer reaches onPong", async () => {
      const { seen, log } = await connect();
      seen.socket.send("before the ping");
      seen.socket.ping();
      await seen.until(() => seen.pongs === 1, "the pong");
      expect(log.events).to.deep.equal(["text before the ping", "ping"]);
    });

    it("closes with the code and reason given after what was queued, and then reports the close", async () => {
      const { client, seen, log } = await connect();
      seen.socket.send("last words");
      seen.socket.close(4001, "bye");
      await once(client, "close");
      expect(log.events).to.deep.equal(["text last words", "close 4001 bye"]);
      await seen.until(() => seen.closed, "the close");
    });

    it("drops the connection at once on terminate: the client gets no close frame, and the close is reported", async () => {
      const { client, seen, log } = await connect();
      seen.socket.terminate();
      await once(client, "close");
      expect(log.events).to.deep.equal(["close 1006 "]);
      await seen.until(() => seen.closed, "the close");
    });

    it("reports the close when the client closes", async () => {
      const { client, seen } = await connect();
      client.close(1000, "done");
      await seen.until(() => seen.closed, "the close");
    });

    it("answers a frame sent after the connection closed with an error, never with success", async () => {
      const { client, seen } = await connect();
      client.close(1000);
      await seen.until(() => seen.closed, "the close");
      const err = await written(seen.socket, "too late");
      expect(err).to.be.instanceOf(Error);
    });

    it("on close, resolves once the connections that were closed have gone, and refuses upgrades after it with 503", async () => {
      const { seen } = await connect();
      seen.socket.close(1001, "going away");
      await server.close();
      expect(seen.closed).to.equal(true);
      const late = opened(path);
      const outcome = await new Promise<string>((resolve) => {
        late.on("open", () => resolve("open"));
        late.on("unexpected-response", (_request, response: { statusCode: number }) => resolve(`refused ${response.statusCode}`));
        late.on("error", (err) => resolve(`failed: ${err.message}`));
      });
      expect(outcome).to.equal("refused 503");
      expect(connections).to.have.length(1);
    });
  });
}
