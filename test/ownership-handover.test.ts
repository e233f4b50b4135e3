// Ownership moves mid-stream. Node A is a real server; node B is a second conversation actor in
// this process with its own connection to the same database, its own leases and a clock that runs
// ahead (so A's lease looks expired to it, as after a pause or a clock skew). B takes the
// conversation's shard over while A still believes it owns it: A's writes are refused by the
// store, and the stream goes on through B, which rebuilds it from the store.
import { create, fromBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import moleculer, { type Context } from "moleculer";
import { MessageService, SendMessageRequestSchema } from "../shared/gen/api/v1/message_pb.js";
import { MessageBodySchema, StreamPhase, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { Errors } from "../shared/errors.js";
import type { Caller } from "../shared/caller.js";
import { AdjustableClock } from "../shared/clock.js";
import { ConversationActors } from "../engine/messages/conversation-actor.js";
import type { EngineDeps } from "../engine/deps.js";
import { MemoryEphemeralState } from "../ports/ephemeral/memory-ephemeral-state.js";
import { FanOuts } from "../engine/delivery/fan-out.js";
import { FanOutIds } from "../engine/delivery/fan-out-ids.js";
import { Ownership, OwnershipPolicy } from "../engine/ownership.js";
import { conversationKey } from "../shared/shards.js";
import { MemoryPresenceRegistry } from "../ports/presence/memory-presence-registry.js";
import { LiveRouter } from "../engine/delivery/live-router.js";
import type { Store } from "../ports/store/store.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedEnvelopes, streamOf, streamStartBody, textBody } from "./support/messaging.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

for (const mode of wireModes) {
  describe(`ownership moves mid-stream (${mode})`, () => {
    let server: TestServer;
    let owner: SignedIn;
    let agent: TestAgent;
    let socket: GatewayClient;
    let storeB: Store;
    let ownershipB: Ownership;
    let fanOutIdsB: FanOutIds;
    // The server's gateway and node B's pushes meet in one registry, as in Redis in a cluster.
    const presence = new MemoryPresenceRegistry();
    before(async () => {
      // Node B is simulated here beside one server node, on that node's own broker.
      server = await startTestServer({ adapters: { presence }, topology: "single" });
      owner = await signInWithCode(server, mode);
      agent = await createAgent(server, owner, mode);
      socket = await GatewayClient.connect(server.url, mode);
      await socket.authenticate(owner.accessToken);
    });
    after(async () => {
      socket.close();
      await ownershipB?.stop();
      await fanOutIdsB?.stop();
      await storeB?.close();
      await server.dispose();
    });

    /** Node B: the same engine code on its own store connection, clock and leases; its deliveries go through the server's broker. */
    async function nodeB() {
      storeB = await openServerStore(server);
      const clock = new AdjustableClock();
      clock.advance(2 * OwnershipPolicy.leaseMs);
      ownershipB = new Ownership(storeB.leases, clock, "node-b");
      fanOutIdsB = await FanOutIds.claim(storeB.leases, clock, ownershipB.holder);
      const deps: EngineDeps = {
        config: server.config,
        clock,
        store: storeB,
        ephemeral: new MemoryEphemeralState(clock),
        codeSender: { supports: () => true, send: async () => {}, close: async () => {} },
        pushNotifier: { send: async () => ({ rejected: [] }) },
        fanOuts: new FanOuts(storeB, clock, fanOutIdsB),
        ownership: ownershipB,
        presence,
        live: new LiveRouter(server.broker, presence),
        webhookQueued: () => {},
      };
      return { actor: new ConversationActors(deps), ctx: moleculer.Context.create(server.broker) as Context };
    }

    it("refuses the old owner's writes; the new owner rebuilds the stream, END persists the full text, ids stay dense, nothing is written twice", async () => {
      const conversationId = agent.conversationId;
      const asAgent = client(server, MessageService, mode, agent.token);
      const asOwner = client(server, MessageService, mode, owner.accessToken);
      const before = await client(server, SyncService, mode, owner.accessToken).getCurrentState({});
      const { messageId } = await asAgent.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
      await asAgent.pushStreamDelta({ conversationId, messageId, seq: 1, delta: "Hello" });
      await asAgent.pushStreamDelta({ conversationId, messageId, seq: 2, delta: " wor" });
      expect(streamOf((await asOwner.getMessage({ conversationId, messageId })).message)?.accumulatedText).to.equal("Hello wor");

      const b = await nodeB();
      const fenceB = await ownershipB.fence(conversationKey(conversationId));
      expect(fenceB.epoch).to.be.greaterThan(1);

      // A still believes it owns the conversation: its END is refused by the store, writing nothing.
      const refused = await expectError(asAgent.endStream({ conversationId, messageId, accumulatedText: "Hello wor" }), Code.Unavailable);
      expect(refused).to.deep.include({ errorName: Errors.unavailable.errorName });
      expect(refused.metadata).to.deep.include({ reason: "OWNERSHIP_LOST" });
      const stored = fromBinary(MessageBodySchema, (await storeB.messages.getMessage(conversationId, messageId))!.body);
      expect(stored.content.case === "stream" && [stored.content.value.phase, stored.content.value.accumulatedText]).to.deep.equal([StreamPhase.START, ""]);
      expect(await storeB.messages.listOpenStreams(Number.MAX_SAFE_INTEGER, 10)).to.have.length(1);
      // A now knows: it answers every call for the conversation as retryable, and writes nothing.
      const elsewhere = await expectError(asOwner.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("to A") }), Code.Unavailable);
      expect(elsewhere.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE" });
      await expectError(asAgent.pushStreamDelta({ conversationId, messageId, seq: 3, delta: "ld" }), Code.Unavailable);
      expect(await storeB.messages.latestMessageId(conversationId)).to.equal(messageId);

      // The stream goes on through B, rebuilt from the store: it takes the agent's next delta as the continuation.
      const agentCaller: Caller = { kind: "agent", userId: agent.userId, deviceId: "" };
      const ownerCaller: Caller = { kind: "user", userId: owner.userId, deviceId: owner.deviceId };
      await b.actor.pushDelta(b.ctx, agentCaller, conversationId, messageId, 3, "ld");
      expect(streamOf((await b.actor.getMessage(ownerCaller, conversationId, messageId)).message)).to.deep.include({ phase: StreamPhase.DELTA, accumulatedText: "ld", seq: 3 });
      await b.actor.finishStream(b.ctx, agentCaller, conversationId, messageId, { text: "Hello world" });
      const next = await b.actor.send(b.ctx, ownerCaller, create(SendMessageRequestSchema, { conversationId, clientMessageId: nextClientMessageId(), body: textBody("after the move") }));
      expect(next.messageId).to.equal(messageId + 1n);

      const ended = (await b.actor.getMessage(ownerCaller, conversationId, messageId)).message;
      expect(streamOf(ended)).to.deep.include({ phase: StreamPhase.END, accumulatedText: "Hello world" });
      expect(await storeB.messages.listOpenStreams(Number.MAX_SAFE_INTEGER, 10)).to.deep.equal([]);

      // Every event once, in order, on the user's stream and socket: START, END, the next message.
      const entries = (await client(server, SyncService, mode, owner.accessToken).getDifference({ sn: before.state!.latestSn })).updates;
      const envelopes = entries.flatMap((entry) => (entry.update.case === "messageEnvelope" ? [entry.update.value] : []));
      const described = (envelope: MessageEnvelope) => [envelope.messageId, streamOf(envelope)?.phase ?? "text"];
      expect(envelopes.map(described)).to.deep.equal([
        [messageId, StreamPhase.START],
        [messageId, StreamPhase.END],
        [messageId + 1n, "text"],
      ]);
      await eventually(() => pushedEnvelopes(socket, "snUpdate").some((e) => e.messageId === messageId + 1n), "the last message's push");
      expect(pushedEnvelopes(socket, "snUpdate").filter((e) => e.messageId >= messageId).map(described)).to.deep.equal(envelopes.map(described));
      // Deltas went out live from both owners, each once.
      await eventually(() => pushedEnvelopes(socket, "nonSnUpdate", messageId).length === 3, "three deltas");
      expect(pushedEnvelopes(socket, "nonSnUpdate", messageId).map((e) => streamOf(e)?.delta)).to.deep.equal(["Hello", " wor", "ld"]);
    });
  });
}
