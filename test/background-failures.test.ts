// No error of a background or recovery path ends a process (docs/OPERATIONS.md): a refused lease,
// a store that times out or a peer that does not answer, met while the node recovers at start or in
// its periodic work, is logged, counted in parley_background_failures_total and tried again, and
// the node serves meanwhile. The store is made to fail on purpose, and a peer engine is a bare
// broker that never answers; the rest is a real server.
import { expect } from "chai";
import moleculer, { type ServiceBroker } from "moleculer";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { shardOf, userStreamKey } from "../shared/shards.js";
import { ownerOf } from "../engine/shard-owners.js";
import { brokerOptions, meshTransporter } from "../moleculer.config.js";
import { startParley, type Parley } from "../server.js";
import { metricsRegistry } from "../shared/metrics.js";
import type { Store } from "../ports/store/store.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, freePort, startTestServer, type TestServer } from "./support/harness.js";
import { nextClientMessageId, textBody } from "./support/messaging.js";
import { scrape, sumOf } from "./support/prometheus-text.js";
import { befriend } from "./support/social.js";

/** Failures to inject, each consumed by the next matching store call. */
class Faults {
  /** Shards whose lease the store answers as another node's. */
  refusedShards = new Set<number>();
  /** Stream writes to fail that hold an entry of the user. */
  appendsFor = new Map<number, number>();
  /** Reads of the outbox to fail as a query that timed out. */
  outboxTimeouts = 0;
  /** Reads of expired upload sessions to fail as a query that timed out. */
  uploadSweepTimeouts = 0;

  wrap = (store: Store): Store => {
    const timedOut = (what: string) => Object.assign(new Error(`injected: ${what} timed out`), { name: "OperationTimedOutError" });
    return {
      ...store,
      leases: {
        ...store.leases,
        acquire: async (shard, holder, now, ttlMs) =>
          this.refusedShards.has(shard) ? { shard, node: "another-engine", instance: "another-engine/still-holding", epoch: 1_000_000, expiresAt: now + ttlMs } : store.leases.acquire(shard, holder, now, ttlMs),
      },
      updates: {
        ...store.updates,
        append: async (write) => {
          const hit = [...new Set(write.entries.map((entry) => entry.userId))].filter((userId) => (this.appendsFor.get(userId) ?? 0) > 0);
          for (const userId of hit) this.appendsFor.set(userId, this.appendsFor.get(userId)! - 1);
          if (hit.length > 0) throw new Error(`injected: append for ${hit.join(", ")}`);
          return store.updates.append(write);
        },
      },
      outbox: {
        ...store.outbox,
        pending: async (limit, scope) => {
          if (this.outboxTimeouts > 0 && this.outboxTimeouts--) throw timedOut("reading the outbox");
          return store.outbox.pending(limit, scope);
        },
      },
      media: {
        ...store.media,
        listExpiredSessions: async (now, limit) => {
          if (this.uploadSweepTimeouts > 0 && this.uploadSweepTimeouts--) throw timedOut("listing expired upload sessions");
          return store.media.listExpiredSessions(now, limit);
        },
      },
    };
  };
}

/** Polls until `probe` answers true; the timeout is only a safety net. */
async function eventually(probe: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("errors of background and recovery work never end the process", () => {
  let server: TestServer;
  let faults: Faults;
  let alice: SignedIn;
  let bob: SignedIn;
  let conversationId: bigint;

  beforeEach(async () => {
    faults = new Faults();
    // One process: the start-up pass under test is the one of the node that restarts.
    server = await startTestServer({ adapters: { store: faults.wrap }, topology: "single", env: { LOG_LEVEL: "fatal" } });
    [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    conversationId = await befriend(server, alice, bob);
  });
  afterEach(async () => server.dispose());

  const failures = async (task: string, reason: string) => sumOf(await scrape(server.url), "parley_background_failures_total", { task, reason });
  /** An RPC through the whole server: the node serves. */
  const serves = async () => expect((await client(server, UserService, "json", alice.accessToken).getProfile({})).profile?.userId).to.equal(alice.userId);
  const latestSn = async (user: SignedIn) => (await client(server, SyncService, "json", user.accessToken).getCurrentState({})).state!.latestSn;

  /** Leaves a message accepted whose event did not reach bob's stream: its fan-out stays recorded, to be finished at the next start. */
  async function cutShortFanOut(): Promise<void> {
    faults.appendsFor.set(bob.userId, 1);
    await client(server, MessageService, "json", alice.accessToken)
      .sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("cut short") })
      .then(
        () => expect.fail("the send was expected to fail with its fan-out"),
        () => undefined,
      );
  }

  it("a lease another node still holds during start-up recovery: the node serves, counts it, and finishes the events once the lease is free", async () => {
    await cutShortFanOut();
    const bobBefore = await latestSn(bob);
    const before = await failures("startup_recovery", "ownership");
    faults.refusedShards.add(shardOf(userStreamKey(bob.userId)));
    server = await server.restart();
    await serves();
    await eventually(async () => (await failures("startup_recovery", "ownership")) > before, "the refusal counted");
    expect(await latestSn(bob)).to.equal(bobBefore);
    // The other node lets go: the pass, retried in the background, delivers the event.
    faults.refusedShards.clear();
    await eventually(async () => (await latestSn(bob)) === bobBefore + 1, "the recorded event in bob's stream");
    await serves();
  });

  it("a store query timing out during start-up recovery: the node serves, counts it, and the retry finishes the events", async () => {
    await cutShortFanOut();
    const bobBefore = await latestSn(bob);
    const before = await failures("startup_recovery", "timeout");
    faults.outboxTimeouts = 1;
    server = await server.restart();
    await serves();
    await eventually(async () => (await failures("startup_recovery", "timeout")) === before + 1, "the timeout counted");
    await eventually(async () => (await latestSn(bob)) === bobBefore + 1, "the recorded event in bob's stream");
  });

  it("an upload sweep timing out at start: the node serves and counts it", async () => {
    const before = await failures("upload_sweep", "timeout");
    faults.uploadSweepTimeouts = 1;
    server = await server.restart();
    await serves();
    await eventually(async () => (await failures("upload_sweep", "timeout")) === before + 1, "the failed sweep counted");
  });
});

describe("an engine whose peer does not answer during its start-up recovery", function () {
  this.timeout(60_000);
  const engineName = `background-engine-${process.pid}`;
  let faults: Faults;
  let first: TestServer;
  let alice: SignedIn;
  let bob: SignedIn;
  let bobBefore: number;
  let engine: Parley | undefined;
  let peer: ServiceBroker | undefined;

  beforeEach(async () => {
    faults = new Faults();
    // The engine's node name outlives its processes: restarted under it, it finishes what its earlier instance recorded.
    first = await startTestServer({ adapters: { store: faults.wrap }, topology: "single", broker: { nodeID: engineName }, env: { LOG_LEVEL: "fatal" } });
    [alice, bob] = [await signInWithCode(first), await signInWithCode(first)];
    const conversationId = await befriend(first, alice, bob);
    faults.appendsFor.set(bob.userId, 1);
    await client(first, MessageService, "json", alice.accessToken)
      .sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("cut short") })
      .catch(() => undefined);
    bobBefore = (await client(first, SyncService, "json", bob.accessToken).getCurrentState({})).state!.latestSn;
    await first.stop();
  });
  afterEach(async () => {
    await engine?.stop();
    await peer?.stop();
    [engine, peer] = [undefined, undefined];
    await first.dispose();
  });

  /**
   * Restarts the engine on a TCP mesh with a peer engine that owns bob's stream (its name chosen so
   * that rendezvous placement puts bob's shard there) and never answers an append.
   */
  async function restartBesideSilentPeer(options: { requestTimeout?: number; startupRecoveryWaitMs?: number }): Promise<Parley> {
    const bobShard = shardOf(userStreamKey(bob.userId));
    let peerName = "";
    for (let attempt = 0; ownerOf(bobShard, [engineName, peerName]) !== peerName; attempt++) peerName = `background-peer-${process.pid}-${attempt}`;
    const ports = [await freePort(), await freePort()];
    const mesh = [`127.0.0.1:${ports[0]}/${engineName}`, `127.0.0.1:${ports[1]}/${peerName}`];
    peer = new moleculer.ServiceBroker({ ...brokerOptions({ logLevel: "fatal", nodeID: peerName, transporter: meshTransporter(ports[1], mesh) }), metadata: { roles: ["engine"] } });
    peer.createService({ name: "sync", actions: { appendFanOuts: { handler: () => new Promise(() => {}) } } });
    await peer.start();
    const config = { ...first.config, logLevel: "fatal" as const };
    engine = await startParley({
      config,
      clock: first.clock,
      adapters: { store: faults.wrap },
      startupRecoveryWaitMs: options.startupRecoveryWaitMs,
      broker: { nodeID: engineName, transporter: meshTransporter(ports[0], mesh), requestTimeout: options.requestTimeout },
    });
    return engine;
  }

  const failures = async (task: string, reason: string) => sumOf(await metricsRegistry.metrics(), "parley_background_failures_total", { task, reason });
  const bobsLatestSn = async (server: Parley) => (await client(server, SyncService, "json", bob.accessToken).getCurrentState({})).state!.latestSn;

  it("the call times out: the engine serves, counts it, and finishes the events once the peer is gone", async () => {
    const before = await failures("startup_recovery", "timeout");
    const served = await restartBesideSilentPeer({ requestTimeout: 1_000 });
    expect((await client(served, UserService, "json", alice.accessToken).getProfile({})).profile?.userId).to.equal(alice.userId);
    await eventually(async () => (await failures("startup_recovery", "timeout")) > before, "the call to the silent peer counted");
    // The peer leaves: bob's stream is placed here now, and the retried pass delivers the event.
    await peer!.stop();
    peer = undefined;
    await eventually(async () => (await bobsLatestSn(served)) === bobBefore + 1, "the recorded event in bob's stream");
  });

  it("the call outlasts the start's wait: the engine serves meanwhile; the peer's departure ends the call, and the delivery moves to the new owner at once", async () => {
    const before = await failures("startup_recovery", "unreachable");
    const served = await restartBesideSilentPeer({ startupRecoveryWaitMs: 300 });
    expect((await client(served, UserService, "json", alice.accessToken).getProfile({})).profile?.userId).to.equal(alice.userId);
    // Serving while the call to the peer is still held (it has not failed yet), not after it.
    expect(await failures("startup_recovery", "unreachable")).to.equal(before);
    await peer!.stop();
    peer = undefined;
    // The refused append is tried again within the same pass, regrouped by the owners known then
    // (engine/delivery/fan-out.ts, movingStreamRetryMs): bob's stream is placed here now, and nothing failed.
    await eventually(async () => (await bobsLatestSn(served)) === bobBefore + 1, "the recorded event in bob's stream");
    expect(await failures("startup_recovery", "unreachable")).to.equal(before);
  });
});

describe("a node whose Kafka is out of reach at start", function () {
  this.timeout(60_000);
  let server: TestServer | undefined;
  afterEach(async () => {
    await server?.dispose();
    server = undefined;
  });

  it("serves (a message is sent and read back), and counts each try at the webhook topic it could not make", async () => {
    const closedPort = await freePort();
    const before = sumOf(await metricsRegistry.metrics(), "parley_background_failures_total", { task: "webhook_topic" });
    server = await startTestServer({ topology: "single", env: { KAFKA_BROKERS: `127.0.0.1:${closedPort}`, LOG_LEVEL: "fatal" } });
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const conversationId = await befriend(server, alice, bob);
    const { messageId } = await client(server, MessageService, "json", alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("no kafka") });
    const history = await client(server, MessageService, "json", bob.accessToken).getMessageHistory({ conversationId });
    expect(history.messages.map((message) => message.messageId)).to.include(messageId);
    expect(sumOf(await metricsRegistry.metrics(), "parley_background_failures_total", { task: "webhook_topic" })).to.be.above(before);
  });
});
