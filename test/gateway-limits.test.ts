import { expect } from "chai";
import WebSocket from "ws";
import { ClientFrameType, ServerFrameType, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { encodeEntry } from "../engine/delivery/stream-entry.js";
import { appendThroughInbox, nextTestFanOutId } from "./support/fan-outs.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { signInWithCode } from "./support/accounts.js";
import { client, socketDrivers, startTestServer, type TestServer } from "./support/harness.js";
import { GatewayClient } from "./support/ws-client.js";

const heartbeatPing = { type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } } as const;
const fatal = (name: string) => (f: ServerFrame) => f.type === ServerFrameType.ERROR && f.payload.case === "error" && f.payload.value.fatal && f.payload.value.error?.errorName === name;

for (const driver of socketDrivers)
describe(`WebSocket gateway limits (${driver} driver)`, () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer({ env: { SOCKET_DRIVER: driver }, gateway: { authTimeoutMs: 300, idleTimeoutMs: 1500, maxBufferedBytes: 256 * 1024 } });
  });
  after(async () => server.dispose());

  it("closes a connection that does not authenticate in time", async () => {
    const ws = await GatewayClient.connect(server.url, "json");
    await ws.next(fatal("GATEWAY_AUTH_TIMEOUT"));
    await ws.closed;
  });

  it("closes a connection that stays silent past the idle timeout, and keeps one that pings", async () => {
    const user = await signInWithCode(server);
    const [silent, pinging] = [await GatewayClient.connect(server.url, "json"), await GatewayClient.connect(server.url, "binary")];
    await silent.authenticate(user.accessToken);
    await pinging.authenticate(user.accessToken);
    const timer = setInterval(() => pinging.send(heartbeatPing), 400);
    try {
      await silent.next(fatal("GATEWAY_IDLE_TIMEOUT"), 5000);
      await silent.closed;
      expect(pinging.socket.readyState).to.equal(WebSocket.OPEN);
    } finally {
      clearInterval(timer);
      pinging.close();
    }
  });

  it("disconnects a reader that falls behind instead of queuing without bound", async () => {
    const user = await signInWithCode(server);
    const ws = await GatewayClient.connect(server.url, "json");
    await ws.authenticate(user.accessToken);
    const rawSocket = (ws.socket as unknown as { _socket: import("node:net").Socket })._socket;
    rawSocket.pause();
    // It still writes, so it is slow, not idle.
    const pinging = setInterval(() => ws.send(heartbeatPing), 400);
    const big = "x".repeat(64 * 1024);
    const entry = encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: user.userId, newSignature: big } });
    let openConnections = Number.NaN;
    const readOpenConnections = async () => (openConnections = Number(/parley_websocket_connections(?:\{[^}]*\})? (\d+)/.exec(await (await fetch(server.url + "/metrics")).text())?.[1]));
    // Until the gateway gives up on it: the network buffers in between take a share first, which
    // through a cluster's front (two connections' kernel buffers and nginx) is several MB.
    let pushed = 0;
    try {
      for (let batch = 0; batch < 100 && (await readOpenConnections()) !== 0; batch++) {
        const fanOuts = Array.from({ length: 10 }, () => ({ fanOutId: String(nextTestFanOutId()), entry, recipients: [user.userId] }));
        await appendThroughInbox(server.broker, fanOuts);
        pushed += fanOuts.length;
      }
      // The pushes reach the gateway after the appends answered (across nodes in a cluster).
      const deadline = performance.now() + 5_000;
      while ((await readOpenConnections()) !== 0 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
    } finally {
      clearInterval(pinging);
    }
    expect(openConnections, "the slow reader disconnected").to.equal(0);
    rawSocket.resume();
    const closed = await ws.closed;
    expect(closed).to.deep.equal({ code: 4008, reason: "GATEWAY_SLOW_CONSUMER" });
    // Far fewer than the updates pushed arrived: the rest were never queued.
    expect(ws.pushedSns().length).to.be.lessThan(pushed);
  });

  it("replays an agent's backlog far larger than the send limit whole and in order, pacing itself on written frames", async () => {
    const owner = await signInWithCode(server);
    const agent = await client(server, AgentService, "json", owner.accessToken).createAgent({ username: `pacer_${driver}_${Date.now() % 100000}`, name: "Pacer" });
    // About 6 MiB waiting for the agent, more than the kernel's buffers and the connection's
    // 256 KiB limit together take while the agent does not read: the replay must wait for the
    // driver to report frames written (onWritten), or it stalls or is closed as a slow consumer.
    const agentUserId = agent.profile!.user!.userId;
    const text = "y".repeat(30 * 1024);
    const entry = encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: agentUserId, newSignature: text } });
    let lastSn = 0;
    for (let i = 0; i < 20; i++) {
      const fanOuts = Array.from({ length: 10 }, () => ({ fanOutId: String(nextTestFanOutId()), entry, recipients: [agentUserId] }));
      const sns = await appendThroughInbox(server.broker, fanOuts);
      lastSn = Math.max(lastSn, ...sns.flat().map(([, sn]) => sn));
    }
    const ws = await GatewayClient.connect(server.url, "json");
    const rawSocket = (ws.socket as unknown as { _socket: import("node:net").Socket })._socket;
    await ws.authenticate(agent.token);
    rawSocket.pause();
    await new Promise((resolve) => setTimeout(resolve, 500));
    rawSocket.resume();
    await ws.next((f) => f.payload.case === "update" && f.payload.value.update.case === "snUpdate" && f.payload.value.update.value.sn === lastSn, 15_000);
    // Every entry of the stream, once, in order.
    expect(ws.pushedSns()).to.deep.equal(Array.from({ length: lastSn }, (_, i) => i + 1));
    ws.close();
  });
});