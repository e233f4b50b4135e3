import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { expect } from "chai";
import moleculer, { type ServiceBroker } from "moleculer";
import { brokerOptions, meshTransporter } from "../moleculer.config.js";
import { freeStablePort } from "../test/support/ports.js";
import { OwnershipPolicy } from "./ownership.js";
import { announceToMesh, ClusterPlacement, engineNodes, keysByOwner, outnumberEarlierInstances, ownerOf, settleWithMesh, unsettledPeers, withoutConnectPause, writingInTurns } from "./shard-owners.js";

describe("Shard placement (rendezvous hashing)", () => {
  const shards = Array.from({ length: OwnershipPolicy.shards }, (_, shard) => shard);
  const placementOver = (nodes: string[]) => shards.map((shard) => ownerOf(shard, nodes));

  it("answers the same owner whatever the order the nodes are listed in, and none without nodes", () => {
    expect(placementOver(["engine-1", "engine-2", "engine-3"])).to.deep.equal(placementOver(["engine-3", "engine-1", "engine-2"]));
    expect(ownerOf(5, [])).to.equal(undefined);
  });

  it("spreads shards evenly and moves only the joining node's share when a node joins", () => {
    const three = placementOver(["engine-1", "engine-2", "engine-3"]);
    for (const node of ["engine-1", "engine-2", "engine-3"]) {
      const share = three.filter((owner) => owner === node).length / shards.length;
      expect(share).to.be.within(0.25, 0.42);
    }
    const four = placementOver(["engine-1", "engine-2", "engine-3", "engine-4"]);
    const moved = shards.filter((shard) => three[shard] !== four[shard]);
    // Every moved shard went to the new node; none moved between the old ones.
    expect(moved.every((shard) => four[shard] === "engine-4")).to.equal(true);
    expect(moved.length / shards.length).to.be.within(0.18, 0.32);
  });

  it("a node leaving hands only its own shards over", () => {
    const before = placementOver(["a", "b", "c"]);
    const after = placementOver(["a", "c"]);
    for (const shard of shards) if (before[shard] !== "b") expect(after[shard]).to.equal(before[shard]);
  });

  it("groups keys by their owners", () => {
    const groups = keysByOwner([1, 2, 3, 4, 5, 6], (userId) => `u:${userId}`, ["a", "b"]);
    expect([...groups.values()].flat().sort()).to.deep.equal([1, 2, 3, 4, 5, 6]);
    expect([...groups.keys()].every((node) => node === "a" || node === "b")).to.equal(true);
    expect([...keysByOwner([1], (userId) => `u:${userId}`, []).keys()]).to.deep.equal([undefined]);
  });
});

/**
 * How long a test waits for nodes to hear of each other: what a server gives discovery (its
 * heartbeat timeout, server.ts). Gossip picks its peers at random, so on a loaded machine hearing
 * of a node has taken over 5 s; the waits end as soon as what they wait for holds.
 */
const discoveryLimitMs = 15_000;

describe("Settling with the static mesh", function () {
  this.timeout(60_000);
  const brokers: ServiceBroker[] = [];
  afterEach(async () => {
    await Promise.all(brokers.splice(0).map((broker) => broker.stop()));
  });

  /** Brokers on one static mesh; an engine serves the action engines are recognised by. */
  async function mesh(names: string[], gossipPeriodS?: number) {
    const base = await freeStablePort(names.map((_, i) => i));
    const ports = names.map((_, i) => base + i);
    const urls = names.map((name, i) => `127.0.0.1:${ports[i]}/${name}`);
    const transporterOf = (i: number) => {
      const transporter = meshTransporter(ports[i], urls) as { type: string; options: Record<string, unknown> };
      return gossipPeriodS === undefined ? transporter : { ...transporter, options: { ...transporter.options, gossipPeriod: gossipPeriodS } };
    };
    return (name: string, roles: string[], engineActionDelayMs = 0, leaseInstance?: string) => {
      const i = names.indexOf(name);
      const broker = new moleculer.ServiceBroker({ ...brokerOptions({ logLevel: "warn", nodeID: name, transporter: transporterOf(i) }), metadata: { roles, leaseInstance } });
      outnumberEarlierInstances(broker);
      brokers.push(broker);
      if (roles.includes("engine")) {
        const engineService = () => broker.createService({ name: "sync", actions: { appendFanOuts: () => null } });
        if (engineActionDelayMs === 0) engineService();
        else setTimeout(engineService, engineActionDelayMs);
      }
      return broker;
    };
  }

  it("waits until every listed peer was heard from and every engine's actions are known", async () => {
    const node = await mesh(["api", "engine1", "engine2"]);
    const api = node("api", ["api"]);
    await api.start();
    expect(unsettledPeers(api).sort()).to.deep.equal(["engine1", "engine2"]);
    const settled = settleWithMesh(api, 20_000);
    const engine1 = node("engine1", ["engine"]);
    // The second engine's actions arrive in a later INFO than its first one.
    const engine2 = node("engine2", ["engine"], 1_500);
    await Promise.all([engine1.start(), engine2.start()]);
    expect(await settled).to.deep.equal([]);
    expect(engineNodes(api).sort()).to.deep.equal(["engine1", "engine2"]);
  });

  it("gives up after the limit, answering the peers never heard from", async () => {
    const node = await mesh(["engine1", "engine2"]);
    const engine1 = node("engine1", ["engine"]);
    await engine1.start();
    const began = performance.now();
    expect(await settleWithMesh(engine1, 300)).to.deep.equal(["engine2"]);
    expect(performance.now() - began).to.be.at.least(290);
  });

  it("counts a listed peer never heard from as gone only once discovery had its time, and one heard from as gone once it left", async () => {
    const node = await mesh(["engine1", "engine2"]);
    const engine1 = node("engine1", ["engine"]);
    await engine1.start();
    const patient = new ClusterPlacement(engine1, 20_000);
    const impatient = new ClusterPlacement(engine1, 0);
    const engine2Lease = { node: "engine2", instance: "engine2/first" };
    expect(patient.isGone(engine2Lease)).to.equal(false);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(impatient.isGone(engine2Lease)).to.equal(true);

    const engine2 = node("engine2", ["engine"], 0, engine2Lease.instance);
    await engine2.start();
    expect(await settleWithMesh(engine1, 20_000)).to.deep.equal([]);
    expect(patient.isGone(engine2Lease)).to.equal(false);
    expect(impatient.isGone(engine2Lease)).to.equal(false);
    await engine2.stop();
    brokers.splice(brokers.indexOf(engine2), 1);
    const leftBy = performance.now() + 10_000;
    while (!patient.isGone(engine2Lease) && performance.now() < leftBy) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(patient.isGone(engine2Lease)).to.equal(true);
  });

  it("counts a holder that died before this process started as gone once a peer's gossip says it left", async () => {
    const node = await mesh(["api", "engine1", "engine2"]);
    const api = node("api", ["api"]);
    const engine2Lease = { node: "engine2", instance: "engine2/first" };
    const engine2 = node("engine2", ["engine"], 0, engine2Lease.instance);
    await Promise.all([api.start(), engine2.start()]);
    const heardBy = performance.now() + discoveryLimitMs;
    while (engineNodes(api).length === 0 && performance.now() < heardBy) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(engineNodes(api)).to.deep.equal(["engine2"]);
    await engine2.stop();
    brokers.splice(brokers.indexOf(engine2), 1);
    const leftBy = performance.now() + discoveryLimitMs;
    while (engineNodes(api).length > 0 && performance.now() < leftBy) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(engineNodes(api)).to.deep.equal([]);

    // engine1 starts after engine2 died: it never hears from engine2, only of it, from the api node.
    const engine1 = node("engine1", ["engine"]);
    await engine1.start();
    const placement = new ClusterPlacement(engine1, 20_000);
    const toldBy = performance.now() + discoveryLimitMs;
    while (!placement.isGone(engine2Lease) && performance.now() < toldBy) {
      settleWithMesh(engine1, 0).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(placement.isGone(engine2Lease)).to.equal(true);
    // A peer nobody has news of is still given discovery's time.
    const engine3Lease = { node: "engine3", instance: "engine3/first" };
    expect(placement.isGone(engine3Lease)).to.equal(false);
  });

  it("connects a broker to the TCP mesh without Moleculer's 500 ms pause, and the broker works as before", async () => {
    const node = await mesh(["api", "engine1"]);
    const api = node("api", ["api"]);
    const engine1 = node("engine1", ["engine"]);
    withoutConnectPause(api);
    withoutConnectPause(engine1);
    const pauses: number[] = [];
    const realSetTimeout = globalThis.setTimeout;
    globalThis.setTimeout = ((callback: () => void, ms?: number, ...args: unknown[]) => {
      if (ms === 500) pauses.push(ms);
      return realSetTimeout(callback, ms, ...args);
    }) as typeof setTimeout;
    try {
      await Promise.all([api.start(), engine1.start()]);
    } finally {
      globalThis.setTimeout = realSetTimeout;
    }
    expect(pauses).to.deep.equal([]);
    expect((api.transit as unknown as { connected: boolean }).connected).to.equal(true);
    expect(await settleWithMesh(api, 20_000)).to.deep.equal([]);
    expect(await api.call("sync.appendFanOuts", {}, { nodeID: "engine1" })).to.equal(null);
  });

  it("counts the holder of a restarted node's earlier process as gone once the new process is known, while the node itself is up", async () => {
    const node = await mesh(["engine1", "engine2"], 60);
    const engine1 = node("engine1", ["engine"]);
    const first = node("engine2", ["engine"], 0, "engine2/first");
    await Promise.all([engine1.start(), first.start()]);
    expect(await settleWithMesh(engine1, 20_000)).to.deep.equal([]);
    const placement = new ClusterPlacement(engine1, 20_000);
    const earlier = { node: "engine2", instance: "engine2/first" };
    expect(placement.isGone(earlier)).to.equal(false);
    // Killed and started again: engine1 hears of the new process and takes it as available, as it
    // would had it never seen the old one leave.
    await first.stop();
    brokers.splice(brokers.indexOf(first), 1);
    const again = node("engine2", ["engine"], 0, "engine2/second");
    await again.start();
    expect(await settleWithMesh(again, 20_000)).to.deep.equal([]);
    announceToMesh(again);
    const record = () => (engine1.registry as unknown as { nodes: { get(id: string): { available: boolean; metadata: { leaseInstance?: string } } } }).nodes.get("engine2");
    const knownBy = performance.now() + discoveryLimitMs;
    while (!(record().available && record().metadata.leaseInstance === "engine2/second") && performance.now() < knownBy) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(record().available).to.equal(true);
    expect(placement.isGone(earlier)).to.equal(true);
    expect(placement.isGone({ node: "engine2", instance: "engine2/second" })).to.equal(false);
  });

  it("a restarted node is known again, with its actions, to peers that still hold its earlier record, as soon as its broker started", async () => {
    // Gossip once a minute: only the restarted node's own announcement can reach the api node in time.
    const node = await mesh(["api", "engine1"], 60);
    const api = node("api", ["api"]);
    const first = node("engine1", ["engine"]);
    await Promise.all([api.start(), first.start()]);
    await Promise.all([settleWithMesh(api, 20_000), settleWithMesh(first, 20_000)]);
    expect(engineNodes(api)).to.deep.equal(["engine1"]);
    // A kill: the api node stops hearing from it (as its heartbeat timeout would have it).
    await first.stop();
    brokers.splice(brokers.indexOf(first), 1);
    (api.registry as unknown as { nodes: { disconnected(id: string, unexpected: boolean): void } }).nodes.disconnected("engine1", true);
    expect(engineNodes(api)).to.deep.equal([]);

    const again = node("engine1", ["engine"]);
    await again.start();
    // At once, before it has heard from anyone (as server.ts does).
    announceToMesh(again);
    const knownBy = performance.now() + discoveryLimitMs;
    while (engineNodes(api).length === 0 && performance.now() < knownBy) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(engineNodes(api)).to.deep.equal(["engine1"]);
    expect(await api.call("sync.appendFanOuts", {}, { nodeID: "engine1" })).to.equal(null);
  });
});

describe("Mesh writes in turns", () => {
  /** A connected socket pair on loopback, with the writes that reach the client socket's handle counted. */
  async function counted(): Promise<{ socket: Socket; handleWrites: () => number[]; received: () => Buffer; close: () => void }> {
    const chunks: Buffer[] = [];
    const server = createServer((peer) => peer.on("data", (data: Buffer) => chunks.push(data)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.setNoDelay(true);
    // Each call is one write of the handle: one system call, however many buffers it carries.
    const writes: number[] = [];
    const internals = socket as unknown as { _write(...a: unknown[]): void; _writev(chunks: unknown[], cb: unknown): void };
    const [single, vector] = [internals._write.bind(socket), internals._writev.bind(socket)];
    internals._write = (...args: unknown[]) => (writes.push(1), single(...args));
    internals._writev = (chunks: unknown[], cb: unknown) => (writes.push(chunks.length), vector(chunks, cb));
    return { socket, handleWrites: () => writes, received: () => Buffer.concat(chunks), close: () => (socket.destroy(), server.close()) };
  }

  it("sends the packets written in one turn as one write, in order, and the next turn's apart", async () => {
    const { socket, handleWrites, received, close } = await counted();
    try {
      writingInTurns(socket);
      await Promise.resolve().then(() => {
        socket.write("a");
        socket.write("b");
        return Promise.resolve().then(() => socket.write("c"));
      });
      await new Promise((resolve) => setImmediate(resolve));
      socket.write("d");
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(handleWrites()).to.deep.equal([3, 1]);
      expect(received().toString()).to.equal("abcd");
    } finally {
      close();
    }
  });

  it("without it, each packet is a write of its own (what the wrapper saves)", async () => {
    const { socket, handleWrites, close } = await counted();
    try {
      socket.write("a");
      socket.write("b");
      socket.write("c");
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(handleWrites().length).to.be.greaterThan(1);
    } finally {
      close();
    }
  });
});
