// Two engine nodes and an edge over Moleculer's TCP transporter: conversations and update streams
// are split over the engines by their placement, every call reaches the owner, a fan-out reaches
// recipients owned by both, and when an engine leaves its keys move to the other under a new
// epoch with nothing lost or numbered twice.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { conversationKey, shardOf, userStreamKey } from "../shared/shards.js";
import { engineNodes, ownerOf, servedWhereCalled } from "../engine/shard-owners.js";
import type { Store } from "../ports/store/store.js";
import { MessageService, SendMessageRequestSchema } from "../shared/gen/api/v1/message_pb.js";
import type { RpcParams } from "../shared/caller.js";
import { parleyErrorParts } from "../shared/errors.js";
import { toWire } from "../shared/wire.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import type { Parley } from "../server.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, openServerStore, startNodes, testConfig, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedSnUpdates, textBody } from "./support/messaging.js";
import { befriend } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

describe("two engine nodes sharing the keys", () => {
  let nodes: Record<"engineA" | "engineB" | "edge", Parley>;
  let dataDir: string;
  let codesFile: string;
  let store: Store;
  let stopped = false;
  const engines = ["routing-engineA", "routing-engineB"];

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-routing-"));
    ({ nodes, codesFile } = await startNodes(dataDir, "routing", { engineA: ["engine"], engineB: ["engine", "webhooks"], edge: ["api", "gateway"] }));
    await eventually(() => engineNodes(nodes.edge.broker).length === 2 && engineNodes(nodes.engineA.broker).length === 2 && engineNodes(nodes.engineB.broker).length === 2, "every node seeing both engines", 30_000);
    store = await openServerStore({ config: await testConfig(dataDir), dataDir });
  });

  after(async () => {
    await nodes?.edge.stop();
    if (!stopped) await nodes?.engineA.stop();
    await nodes?.engineB.stop();
    await store?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const server = () => ({ url: nodes.edge.url, codesFile }) as TestServer;
  const placedOn = (key: string) => ownerOf(shardOf(key), engines);

  /** Users in pairs whose conversations land on each engine, with a socket each. */
  async function pairsOnBothEngines(): Promise<{ pairs: [SignedIn, SignedIn, bigint][]; sockets: Map<number, GatewayClient> }> {
    const pairs: [SignedIn, SignedIn, bigint][] = [];
    const sockets = new Map<number, GatewayClient>();
    const onEngine = new Map<string, number>();
    while ((onEngine.get(engines[0]) ?? 0) < 2 || (onEngine.get(engines[1]) ?? 0) < 2) {
      const a = await signInWithCode(server(), "json");
      const b = await signInWithCode(server(), "json");
      const conversationId = await befriend(server(), a, b);
      const engine = placedOn(conversationKey(conversationId))!;
      if ((onEngine.get(engine) ?? 0) >= 2) continue;
      onEngine.set(engine, (onEngine.get(engine) ?? 0) + 1);
      pairs.push([a, b, conversationId]);
      for (const user of [a, b]) {
        const socket = await GatewayClient.connect(nodes.edge.url, "json");
        await socket.authenticate(user.accessToken);
        sockets.set(user.userId, socket);
      }
    }
    return { pairs, sockets };
  }

  it("numbers every conversation's messages densely on the engine it is placed on, and delivers each to its recipient's stream once", async () => {
    const { pairs, sockets } = await pairsOnBothEngines();
    const perConversation = 12;
    const sent = await Promise.all(
      pairs.map(async ([a, , conversationId]) => {
        const ids: bigint[] = [];
        for (let i = 0; i < perConversation; i++) {
          const answer = await client(server(), MessageService, "json", a.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(`m${i}`) });
          ids.push(answer.messageId);
        }
        return ids;
      }),
    );
    for (const ids of sent) expect(ids.map((id, i) => id - ids[0] - BigInt(i))).to.deep.equal(ids.map(() => 0n));
    for (const [a, b, conversationId] of pairs) {
      // The conversation's lease is held by the engine it is placed on, and the users' streams by theirs.
      expect((await store.leases.getLease(shardOf(conversationKey(conversationId))))?.node).to.equal(placedOn(conversationKey(conversationId)));
      expect((await store.leases.getLease(shardOf(userStreamKey(b.userId))))?.node).to.equal(placedOn(userStreamKey(b.userId)));
      const socket = sockets.get(b.userId)!;
      await eventually(() => pushedSnUpdates(socket).filter((u) => u.update.case === "messageEnvelope" && u.update.value.conversationId === conversationId).length === perConversation, `every message pushed to user ${b.userId}`);
      const sns = pushedSnUpdates(socket).map((u) => u.sn);
      expect(new Set(sns).size).to.equal(sns.length);
      const difference = await client(server(), SyncService, "json", b.accessToken).getDifference({ sn: 0 });
      const received = difference.updates.filter((u) => u.update.case === "messageEnvelope" && u.update.value.conversationId === conversationId);
      expect(received).to.have.length(perConversation);
      void a;
    }
    for (const socket of sockets.values()) socket.close();
  });

  it("forwards a sharded call that reached an engine the key is not placed on to the one it is, once; served where it landed, it finds the lease held elsewhere", async () => {
    const { pairs, sockets } = await pairsOnBothEngines();
    const [a, , conversationId] = pairs.find(([, , id]) => placedOn(conversationKey(id)) === engines[1])!;
    // As an api node whose view of the cluster lags would: the call goes to the other engine.
    const sendOn = (engine: string, text: string, options: object = {}) =>
      nodes.edge.broker.call(
        "messages.sendMessage",
        { caller: { kind: "user", userId: a.userId, deviceId: a.deviceId }, request: toWire(SendMessageRequestSchema, { conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) }) } satisfies RpcParams,
        { nodeID: engine, ...options },
      ) as Promise<{ messageId: string }>;
    const first = await sendOn(engines[1], "on its owner");
    const forwarded = await sendOn(engines[0], "forwarded");
    expect(BigInt(forwarded.messageId)).to.equal(BigInt(first.messageId) + 1n);
    expect((await store.leases.getLease(shardOf(conversationKey(conversationId))))?.node).to.equal(engines[1]);
    let refused: unknown;
    await sendOn(engines[0], "served where it landed", servedWhereCalled("messages.sendMessage")).catch((err: unknown) => (refused = err));
    expect(parleyErrorParts(refused)?.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE" });
    for (const socket of sockets.values()) socket.close();
  });

  it("moves an engine's conversations to the other one when it stops: sends go on under the next epoch, numbering continues", async () => {
    const { pairs, sockets } = await pairsOnBothEngines();
    const [a, b, conversationId] = pairs.find(([, , id]) => placedOn(conversationKey(id)) === engines[0])!;
    const send = (text: string) => client(server(), MessageService, "json", a.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    const before = await send("before");
    const shard = shardOf(conversationKey(conversationId));
    const leaseBefore = (await store.leases.getLease(shard))!;
    expect(leaseBefore.node).to.equal(engines[0]);

    stopped = true;
    await nodes.engineA.stop();
    await eventually(() => engineNodes(nodes.edge.broker).length === 1, "the edge seeing one engine", 30_000);
    const after = await send("after");
    expect(after.messageId).to.equal(before.messageId + 1n);
    const leaseAfter = (await store.leases.getLease(shard))!;
    expect(leaseAfter).to.deep.include({ node: engines[1] });
    expect(leaseAfter.epoch).to.be.above(leaseBefore.epoch);
    const socket = sockets.get(b.userId)!;
    await eventually(() => pushedSnUpdates(socket).some((u) => u.update.case === "messageEnvelope" && u.update.value.messageId === after.messageId), "the message after the move pushed");
    const difference = await client(server(), SyncService, "json", b.accessToken).getDifference({ sn: 0 });
    const ids = difference.updates.flatMap((u) => (u.update.case === "messageEnvelope" && u.update.value.conversationId === conversationId ? [u.update.value.messageId] : []));
    expect(ids).to.deep.equal([before.messageId, after.messageId]);
    for (const s of sockets.values()) s.close();
  });
});
