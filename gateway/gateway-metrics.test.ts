// The gateway's metrics from its own connections: the gateway service alone on a local broker,
// sockets that report whatever send backlog the test gives them, and the registry /metrics serves.
// The backlog and the slow-consumer close depend on kernel and proxy buffers through a real
// socket; here they are exact.
import { expect } from "chai";
import moleculer, { type ServiceBroker } from "moleculer";
import { MemoryPresenceRegistry } from "../ports/presence/memory-presence-registry.js";
import type { LiveEvent } from "../shared/bus.js";
import { metricsRegistry } from "../shared/metrics.js";
import { sumOf } from "../test/support/prometheus-text.js";
import { CloseCodes } from "./connection.js";
import { gatewayService } from "./gateway-service.js";
import type { GatewaySocket, SocketAcceptor, SocketHandlers } from "./socket.js";

const maxBufferedBytes = 10_000;
const userId = 7;

class ScriptedSocket implements GatewaySocket {
  bufferedAmount = 0;
  readonly remoteAddress = "127.0.0.1";
  readonly sent: (string | Uint8Array)[] = [];
  closedWith: number | undefined;

  send(data: string | Uint8Array, onWritten?: (err?: Error) => void): void {
    this.sent.push(data);
    onWritten?.();
  }

  ping(): void {}

  close(code: number): void {
    this.closedWith = code;
  }

  terminate(): void {}
}

const byteLength = (data: string | Uint8Array) => (typeof data === "string" ? Buffer.byteLength(data) : data.byteLength);

describe("gateway metrics", () => {
  let broker: ServiceBroker;
  let accept: (socket: GatewaySocket) => SocketHandlers;

  before(async () => {
    const sockets: SocketAcceptor = (_path, onConnection) => {
      accept = onConnection;
      return { close: async () => {} };
    };
    broker = new moleculer.ServiceBroker({ logger: false, nodeID: `gateway-metrics-${process.pid}` });
    broker.createService(
      gatewayService({ sockets, presence: new MemoryPresenceRegistry(), maxBufferedBytes, authenticate: async () => ({ kind: "user", userId, deviceId: "device" }) }),
    );
    await broker.start();
  });
  after(async () => broker.stop());

  const metric = async (name: string, labels: Record<string, string> = {}) => sumOf(await metricsRegistry.metrics(), name, labels);

  /** A connection of the user, authenticated in the JSON form. */
  async function connect(): Promise<{ socket: ScriptedSocket; handlers: SocketHandlers }> {
    const socket = new ScriptedSocket();
    const handlers = accept(socket);
    handlers.onMessage(Buffer.from(JSON.stringify({ requestId: "1", type: "CLIENT_FRAME_TYPE_AUTH_REQUEST", authRequest: { token: "token" } })), false);
    const deadline = Date.now() + 5_000;
    while (socket.sent.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(socket.sent, "the authentication answer").to.have.length(1);
    return { socket, handlers };
  }

  const push = (text: string) => broker.call("gateway.deliver", { update: { nonSnUpdate: { typing: { text } } }, userIds: [userId] } as unknown as LiveEvent);

  it("counts each pushed frame and its bytes once queued on a socket", async () => {
    const { socket, handlers } = await connect();
    const [frames, bytes] = [await metric("parley_gateway_push_frames_total"), await metric("parley_gateway_push_bytes_total")];
    await push("one");
    await push("two");
    const pushed = socket.sent.slice(1);
    expect(pushed).to.have.length(2);
    expect((await metric("parley_gateway_push_frames_total")) - frames).to.equal(2);
    expect((await metric("parley_gateway_push_bytes_total")) - bytes).to.equal(pushed.reduce((sum, frame) => sum + byteLength(frame), 0));
    handlers.onClose();
  });

  it("reports the bytes queued on its sockets and the connections past half the slow-consumer limit", async () => {
    const first = await connect();
    const second = await connect();
    const [backlog, backlogged] = [await metric("parley_gateway_send_backlog_bytes"), await metric("parley_gateway_backlogged_connections")];
    first.socket.bufferedAmount = 1_200;
    second.socket.bufferedAmount = maxBufferedBytes / 2 + 1;
    expect((await metric("parley_gateway_send_backlog_bytes")) - backlog).to.equal(1_200 + maxBufferedBytes / 2 + 1);
    expect((await metric("parley_gateway_backlogged_connections")) - backlogged).to.equal(1);
    first.handlers.onClose();
    second.handlers.onClose();
    expect(await metric("parley_gateway_send_backlog_bytes")).to.equal(backlog);
  });

  it("counts closes by reason: a slow consumer's, without counting the frame it refused, and one the peer made", async () => {
    const slow = await connect();
    const [slowCloses, peerCloses, frames] = [
      await metric("parley_gateway_connection_closes_total", { reason: "slow_consumer" }),
      await metric("parley_gateway_connection_closes_total", { reason: "peer" }),
      await metric("parley_gateway_push_frames_total"),
    ];
    slow.socket.bufferedAmount = maxBufferedBytes - 1;
    await push("does not fit");
    expect(slow.socket.closedWith).to.equal(CloseCodes.slowConsumer);
    expect((await metric("parley_gateway_connection_closes_total", { reason: "slow_consumer" })) - slowCloses).to.equal(1);
    expect((await metric("parley_gateway_push_frames_total")) - frames).to.equal(0);

    const gone = await connect();
    gone.handlers.onClose();
    expect((await metric("parley_gateway_connection_closes_total", { reason: "peer" })) - peerCloses).to.equal(1);
  });
});
