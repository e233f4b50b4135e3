// A stream's frames reach every socket in the stream's order, START first and END last, though
// nobody waits for them: SendMessage answers once the START is stored, and the agent pushes its
// deltas at once. In a cluster the START is appended by the engines owning the recipients'
// streams and the deltas come from the conversation's engine; both leave that engine on one
// ordered path to each gateway (engine/delivery/live-router.ts), or a delta could overtake its START.
// The presence lookups each push needs are made slow and uneven here, as a loaded Redis makes
// them: a push whose lookup came back early must still wait for its turn.
import { expect } from "chai";
import { setTimeout as sleep } from "node:timers/promises";
import { MemoryPresenceRegistry } from "../ports/presence/memory-presence-registry.js";
import type { PresenceRegistry } from "../ports/presence/presence-registry.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { signInAnotherDevice, signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, streamOf, streamStartBody, updateOf } from "./support/messaging.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { OpenSockets, type GatewayClient } from "./support/ws-client.js";

const deltasPerStream = 12;

/** The registry every node shares, answering each lookup after 0 to 20 ms. */
class UnevenPresence implements PresenceRegistry {
  private readonly registry = new MemoryPresenceRegistry();
  report: PresenceRegistry["report"] = (nodeId, counts) => this.registry.report(nodeId, counts);
  heartbeat: PresenceRegistry["heartbeat"] = (nodeId, ttlMs) => this.registry.heartbeat(nodeId, ttlMs);
  dropNode: PresenceRegistry["dropNode"] = (nodeId) => this.registry.dropNode(nodeId);
  close = () => this.registry.close();
  async gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    await sleep(Math.random() * 20);
    return this.registry.gatewaysOf(userIds);
  }
}

interface MessageKey {
  conversationId: bigint;
  messageId: bigint;
}

/** The stream phases a socket received for one message, in arrival order: START, each DELTA's seq, END. */
function phasesOf(socket: GatewayClient, { conversationId, messageId }: MessageKey): string[] {
  return socket.frames.flatMap((frame) => {
    const update = updateOf(frame)?.update;
    if (update?.case !== "snUpdate" && update?.case !== "nonSnUpdate") return [];
    const inner = update.value.update;
    if (inner.case !== "messageEnvelope" || inner.value.conversationId !== conversationId || inner.value.messageId !== messageId) return [];
    const stream = streamOf(inner.value as MessageEnvelope);
    if (!stream) return [];
    if (stream.phase === StreamPhase.DELTA) return [`delta ${stream.seq}`];
    return [StreamPhase[stream.phase]];
  });
}

describe("stream frames in order on every socket, nobody waiting for them", () => {
  let server: TestServer;
  let owner: SignedIn;
  const agents: TestAgent[] = [];
  const sockets = new OpenSockets(() => server);
  before(async () => {
    server = await startTestServer({ adapters: { presence: new UnevenPresence() } });
    owner = await signInWithCode(server, "binary");
    // Each agent's conversation with the owner has its own id, so in a cluster they fall to
    // both engines, and most of them to another than the one owning the owner's stream.
    for (let i = 0; i < 6; i++) agents.push(await createAgent(server, owner, "binary"));
  });
  after(async () => {
    sockets.closeAll();
    await server?.dispose();
  });

  const connected = (token: string) => sockets.authenticated(token);

  it("START before every delta and END after them, on the owner's devices and on the agents' own sockets", async () => {
    // Two devices of the owner, which the front spreads over the gateways.
    const ownerSockets = [await connected(owner.accessToken), await connected((await signInAnotherDevice(server, owner.email)).accessToken)];
    const agentSockets = await Promise.all(agents.map((agent) => connected(agent.token)));

    const streamed = await Promise.all(
      agents.map(async (agent) => {
        const messages = client(server, MessageService, "binary", agent.token);
        const { messageId } = await messages.sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
        for (let seq = 1; seq <= deltasPerStream; seq++) await messages.pushStreamDelta({ conversationId: agent.conversationId, messageId, seq, delta: `d${seq} ` });
        await messages.endStream({ conversationId: agent.conversationId, messageId, accumulatedText: "done" });
        return { conversationId: agent.conversationId, messageId };
      }),
    );

    const expected = ["START", ...Array.from({ length: deltasPerStream }, (_, i) => `delta ${i + 1}`), "END"];
    const watched = [...ownerSockets.map((socket) => ({ socket, streams: streamed })), ...agentSockets.map((socket, index) => ({ socket, streams: [streamed[index]] }))];
    await eventually(() => watched.every(({ socket, streams }) => streams.every((stream) => phasesOf(socket, stream).includes("END"))), "every stream's END on every socket", 10_000);
    for (const { socket, streams } of watched) {
      for (const stream of streams) expect(phasesOf(socket, stream), `message ${stream.conversationId}/${stream.messageId}`).to.deep.equal(expected);
    }
  });
});
