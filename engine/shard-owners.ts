// Which engine node should own a shard of keys: rendezvous (highest random weight) hashing of the
// shard over the engine nodes that are up. Every node computes the same answer from the same node
// list, and a node that joins or leaves moves only the shards it wins or held (about 1/N of them),
// where Moleculer's own Shard strategy moves about half. Callers route a key's calls to this node
// (OwnerStrategy); engines give up the leases of shards designated elsewhere (Ownership.rebalance).
// Routing is only a preference: the lease and its fence decide who may write (ownership.ts).
import type { Socket } from "node:net";
import moleculer, { type Context, type ServiceBroker } from "moleculer";
import { type Placement } from "./ownership.js";
import { conversationKey, shardOf, userStreamKey } from "../shared/shards.js";
import type { LeaseHolder } from "../ports/store/store.js";

/** Node ids of the engines able to own keys: the nodes serving the sharded actor actions. */
export function engineNodes(broker: ServiceBroker): string[] {
  return nodesServing(broker, ownerProbeAction);
}

/** Node ids of the available endpoints of an action, as this node's registry knows them. */
function nodesServing(broker: ServiceBroker, action: string): string[] {
  const registry = broker.registry as unknown as { getActionEndpoints(action: string): { endpoints?: { id: string; isAvailable: boolean }[] } | undefined };
  const list = registry.getActionEndpoints(action);
  return (list?.endpoints ?? []).filter((endpoint) => endpoint.isAvailable).map((endpoint) => endpoint.id);
}

/** An action every engine serves, whose endpoints say which engines are up. */
const ownerProbeAction = "sync.appendFanOuts";

/** 32-bit mix of a node id and a shard (FNV-1a, then murmur3's finalizer for avalanche). */
function weight(nodeId: string, shard: number): number {
  let hash = 0x811c9dc5 ^ shard;
  for (let i = 0; i < nodeId.length; i++) {
    hash ^= nodeId.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash >>> 0;
}

/** The node that should own the shard, or undefined when there is none. Ties (never in practice) go to the smaller id. */
export function ownerOf(shard: number, nodeIds: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestWeight = -1;
  for (const nodeId of nodeIds) {
    const w = weight(nodeId, shard);
    if (w > bestWeight || (w === bestWeight && best !== undefined && nodeId < best)) {
      best = nodeId;
      bestWeight = w;
    }
  }
  return best;
}

/** Groups keys by the node that should own them (undefined when no engine is known yet). */
export function keysByOwner<K>(keys: readonly K[], keyOf: (key: K) => string, nodeIds: readonly string[]): Map<string | undefined, K[]> {
  const groups = new Map<string | undefined, K[]>();
  for (const key of keys) {
    const owner = ownerOf(shardOf(keyOf(key)), nodeIds);
    const group = groups.get(owner);
    if (group) group.push(key);
    else groups.set(owner, [key]);
  }
  return groups;
}

/** How a param's value becomes an ownership key (ownership.ts). */
const keyKinds = {
  conversation: (value: string | number) => conversationKey(BigInt(value)),
  user: (value: string | number) => userStreamKey(Number(value)),
  upload: (value: string | number) => `upload:${value}`,
} as const;

/**
 * Plain data: action definitions travel to other nodes as JSON in Moleculer's discovery, and the
 * caller's registry builds the strategy from them (a function or a class would not survive).
 */
interface OwnerStrategyOptions {
  /** Path of the key's value in the action's params, e.g. "request.conversationId". */
  shardKey: string;
  keyKind: keyof typeof keyKinds;
}

type Endpoint = { id: string };

function valueAt(params: unknown, path: string): string | number | undefined {
  let value: unknown = params;
  for (const part of path.split(".")) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return typeof value === "string" || typeof value === "number" ? value : undefined;
}

/** A Moleculer strategy sending a key's calls to the node ownerOf designates among the action's endpoints. */
export class OwnerStrategy extends moleculer.Strategies.Base {
  private readonly options: OwnerStrategyOptions;

  constructor(registry: ServiceBroker["registry"], broker: ServiceBroker, opts?: object) {
    super(registry, broker, opts);
    this.options = opts as OwnerStrategyOptions;
  }

  override select(list: Endpoint[], ctx?: Context): moleculer.Endpoint {
    const value = ctx && valueAt(ctx.params, this.options.shardKey);
    if (value !== undefined && value !== "") {
      const owner = ownerOf(shardOf(keyKinds[this.options.keyKind](value)), list.map((endpoint) => endpoint.id));
      const chosen = list.find((endpoint) => endpoint.id === owner);
      if (chosen) return chosen as moleculer.Endpoint;
    }
    // No key (the action validates and refuses it): any node answers the same error.
    return list[Math.floor(Math.random() * list.length)] as moleculer.Endpoint;
  }
}

// Registered by name in every process that imports this module (server.ts does, whatever its roles).
const strategyName = "ParleyOwner";
// (Moleculer's typings leave register out; it is public API in its docs.)
(moleculer.Strategies as unknown as { register(name: string, strategy: typeof OwnerStrategy): void }).register(strategyName, OwnerStrategy);

/** Action options routing by the ownership key of a param. */
export const routeToOwner = (shardKey: string, keyKind: OwnerStrategyOptions["keyKind"]) => ({
  strategy: strategyName,
  strategyOptions: { shardKey, keyKind } satisfies OwnerStrategyOptions,
});

/**
 * Meta naming the action a call was forwarded for: the node it reaches serves it, whatever its
 * own view says, so two views that disagree cannot bounce a call between them.
 */
const forwardedFor = "parleyForwardedFor";

/** Call options that make the engine reached serve a sharded action itself (tests that race two engines on one key). */
export const servedWhereCalled = (action: string) => ({ meta: { [forwardedFor]: action } });

/**
 * Engines forward a sharded call that reached them but is placed on another engine, as this
 * engine sees the cluster, to that engine, once. Nodes learn of a membership change at slightly
 * different moments: an api node whose view lags routes a key to an engine that has already
 * given it up, which would take the free lease and hold it away from its owner (who then waits
 * for it and answers OWNERSHIP_ELSEWHERE), or answer that error itself. A forward that cannot
 * reach the owner (it just left) is served here; the lease decides who may write either way.
 */
export function ownerForwarding(broker: ServiceBroker): moleculer.Middleware {
  return {
    localAction(handler: moleculer.ActionHandler, action: moleculer.ActionSchema) {
      const options = action.strategyOptions as OwnerStrategyOptions | undefined;
      if (action.strategy !== strategyName || !options || !action.name) return handler;
      const name = action.name;
      return async (ctx: Context<unknown, Record<string, unknown>>) => {
        if (ctx.meta[forwardedFor] === name) {
          delete ctx.meta[forwardedFor];
          return handler(ctx);
        }
        const value = valueAt(ctx.params, options.shardKey);
        // Among the action's own endpoints, as OwnerStrategy routes: a node whose services are not
        // all registered here yet is no owner to forward to.
        const owner = value === undefined || value === "" ? undefined : ownerOf(shardOf(keyKinds[options.keyKind](value)), nodesServing(broker, name));
        if (!owner || owner === broker.nodeID) return handler(ctx);
        try {
          return await ctx.call(name, ctx.params, { nodeID: owner, meta: { [forwardedFor]: name } });
        } catch (err) {
          // Refused before it was sent (the owner is not there any more): nothing ran there.
          if (err instanceof moleculer.Errors.ServiceNotAvailableError || err instanceof moleculer.Errors.RequestRejectedError) return handler(ctx);
          throw err;
        } finally {
          delete ctx.meta[forwardedFor];
        }
      };
    },
  };
}

/**
 * The placement of shards as this engine sees the cluster: its own node counts as an engine from
 * the start (its actions are registered only once the broker started). A node the registry saw
 * leave is gone at once; one it never saw (a holder from before this process started) counts as
 * gone once discovery had time to find it.
 */
export class ClusterPlacement implements Placement {
  private nodes: string[] | undefined;
  private readonly startedAt = performance.now();

  constructor(
    private readonly broker: ServiceBroker,
    /** How long a node unknown to the registry may still be discovered (Moleculer's heartbeat timeout). */
    private readonly discoveryMs: number,
  ) {
    broker.localBus.on("$node.**", () => (this.nodes = undefined));
    broker.localBus.on("$services.changed", () => (this.nodes = undefined));
  }

  engineNodes(): string[] {
    if (!this.nodes) {
      const known = engineNodes(this.broker);
      this.nodes = known.includes(this.broker.nodeID) ? known : [...known, this.broker.nodeID];
    }
    return this.nodes;
  }

  isMine(shard: number): boolean {
    return ownerOf(shard, this.engineNodes()) === this.broker.nodeID;
  }

  isGone(holder: LeaseHolder): boolean {
    const known = meshNodes(this.broker).find((peer) => peer.id === holder.node);
    // A static mesh lists every peer as offline before it is heard from: not seen leave, so not gone.
    // Unless a peer's gossip said it left (that numbers its record): this process started after
    // the holder died, as when both engines were killed in turn. Waiting for discovery's time
    // kept every key of the other engine away until that one had started again too.
    if (known && !heardFrom(known) && !known.available && known.seq > 0) return true;
    if (known && heardFrom(known)) {
      if (!known.available) return true;
      // The node was restarted (killed and started again within the heartbeat timeout, so never
      // seen leave): the holder was its earlier process. Waiting for that lease to run out kept
      // the shards it held elsewhere away from their owners for up to 30 s.
      const announced = known.metadata?.leaseInstance;
      return announced !== undefined && announced !== holder.instance;
    }
    return performance.now() - this.startedAt > this.discoveryMs;
  }
}

/** A node as Moleculer's registry holds it (the fields read here are public in its docs, not in its typings). */
interface MeshNode {
  id: string;
  local: boolean;
  available: boolean;
  /** Set by the node's first INFO packet; null for a peer the static mesh listed but never heard. */
  instanceID: string | null;
  /** The number of its record; 0 until the node, or a peer's gossip about it, gave one. */
  seq: number;
  metadata: { roles?: readonly string[]; leaseInstance?: string } | null;
}

const meshNodes = (broker: ServiceBroker) => (broker.registry as unknown as { nodes: { toArray(): MeshNode[] } }).nodes.toArray();
const heardFrom = (node: MeshNode) => node.instanceID !== null;

/**
 * Peers this node has not settled with yet: listed by the mesh but never heard from, or engines
 * heard from whose actions are not registered here yet (their services come in a later INFO).
 */
export function unsettledPeers(broker: ServiceBroker): string[] {
  const engines = new Set(engineNodes(broker));
  return meshNodes(broker)
    .filter((node) => !node.local && (!heardFrom(node) || (node.available && node.metadata?.roles?.includes("engine") && !engines.has(node.id))))
    .map((node) => node.id);
}

/** What this module reads of Moleculer's TCP transporter (public in its source, not in its typings). */
interface MeshTransporter {
  sendGossipRequest?(): void;
  publish?(packet: { type: string; target: string; payload: Record<string, unknown> }): Promise<void>;
}

const meshTransporterOf = (broker: ServiceBroker) => (broker.transit as unknown as { tx?: MeshTransporter } | undefined)?.tx;

/**
 * Moleculer's transit waits 500 ms after connecting, for the INFO packets its discovery broadcast
 * asks for; the TCP mesh broadcasts nothing (it discovers by gossip, which settleWithMesh waits
 * for), so on it the pause only held a restarted engine back from serving. Its Promise, which
 * supplies that pause, is swapped for one whose delay does not wait, around the transit's
 * connection step only. Called on a new broker, before it starts.
 */
export function withoutConnectPause(broker: ServiceBroker): void {
  const transit = broker.transit as unknown as (MeshTransit & { tx?: { afterConnect?: (wasReconnect: boolean) => Promise<unknown> } }) | undefined;
  const tx = transit?.tx;
  if (!transit || !tx?.afterConnect || !(tx instanceof moleculer.Transporters.TCP)) return;
  const pausing = tx.afterConnect;
  tx.afterConnect = (wasReconnect) => {
    const usual = transit.Promise;
    transit.Promise = PromiseWithoutDelay;
    try {
      return pausing(wasReconnect);
    } finally {
      transit.Promise = usual;
    }
  };
}

interface MeshTransit {
  Promise: PromiseConstructor;
}

/**
 * Packets to one peer written in one turn of the event loop leave in one write. Moleculer's TCP
 * writer sends each packet as a write of its own, one system call each: 11% of an engine's CPU
 * under a private-message load (profiled, 2026-11-29), most of it in those writes. Each socket it
 * opens is corked at its first write of a turn and uncorked once the turn's promise jobs have
 * run, which is when the rest of a burst (a fan-out's calls, the answers of one read) was written.
 * Called on a new broker, before it starts.
 */
export function coalescedMeshWrites(broker: ServiceBroker): void {
  const tx = (broker.transit as unknown as { tx?: unknown } | undefined)?.tx;
  if (!(tx instanceof moleculer.Transporters.TCP)) return;
  const mesh = tx as unknown as { startTcpServer(): unknown; writer?: { addSocket(nodeID: string, socket: Socket, force?: boolean): unknown } };
  const startTcpServer = mesh.startTcpServer.bind(mesh);
  mesh.startTcpServer = () => {
    const listening = startTcpServer();
    const writer = mesh.writer;
    if (writer) {
      const addSocket = writer.addSocket.bind(writer);
      writer.addSocket = (nodeID, socket, force) => addSocket(nodeID, writingInTurns(socket), force);
    }
    return listening;
  };
}

/** The socket with its writes of one turn corked together (see coalescedMeshWrites). */
export function writingInTurns(socket: Socket): Socket {
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
  let corked = false;
  const uncork = () => {
    corked = false;
    if (!socket.destroyed) socket.uncork();
  };
  socket.write = ((...args: unknown[]) => {
    if (!corked && !socket.destroyed) {
      corked = true;
      socket.cork();
      process.nextTick(uncork);
    }
    return write(...args);
  }) as Socket["write"];
  return socket;
}

/** A promise whose delay(ms), which Moleculer adds to promises, settles at once. */
class PromiseWithoutDelay<T> extends Promise<T> {
  delay(): this {
    return this;
  }
}

/**
 * Numbers this node's announcements above every earlier instance's, so that peers who still hold a
 * restarted node's old record take its new one from the first gossip that carries it: Moleculer
 * numbers them from 0 in each process and a peer keeps the higher number. Called on a new broker.
 */
export function outnumberEarlierInstances(broker: ServiceBroker): void {
  const local = (broker.registry as unknown as { nodes: { localNode: { seq: number } } }).nodes.localNode;
  local.seq = Math.max(local.seq, Date.now());
}

/**
 * Hands this node's record (its services with it) to every peer of the mesh.
 * Moleculer's TCP mesh spreads records only by gossip with a random peer each second, so peers
 * learned of a node that restarted 1 to 3 s after it served; meanwhile their views of the cluster
 * disagreed with its own (an api node routing to the new engine while the old owner still held and
 * served its shards), which is when calls meet OWNERSHIP_ELSEWHERE.
 */
export function announceToMesh(broker: ServiceBroker): void {
  const transporter = meshTransporterOf(broker);
  if (!transporter?.publish) return;
  const registry = broker.registry as unknown as { getLocalNodeInfo(force?: boolean): Record<string, unknown> };
  const info = registry.getLocalNodeInfo(true);
  for (const peer of meshNodes(broker)) {
    // Peers not heard from yet too: a restarted node has heard from nobody when its broker has
    // started, and the api nodes learned of it only from the announcement after it settled, which
    // waits for an engine that is down (0.6 s later, or until that engine was back).
    if (peer.local) continue;
    // A gossip answer carrying the record: the one packet a peer takes a node's record from.
    transporter.publish({ type: "GOSSIP_RES", target: peer.id, payload: { online: { [broker.nodeID]: [info, 0, 0] } } }).catch(() => {
      // The peer left meanwhile; the gossip reaches it when it is back.
    });
  }
}

/**
 * Waits until this node has heard from every peer of the mesh and knows the engines' actions, at
 * most `limitMs`; answers the peers still missing then. A node that served before that would act
 * on a partial view: an api node routing every key to the one engine it knows, two engines each
 * placing a shard on itself; each then takes leases the other is placed to hold. Meanwhile it
 * gossips every 100 ms instead of every second (Moleculer's TCP mesh discovers only by gossip; it
 * ignores DISCOVER packets): seven nodes starting at once settle in about 0.5 s instead of 2-4.
 */
export async function settleWithMesh(broker: ServiceBroker, limitMs: number): Promise<string[]> {
  const deadline = performance.now() + limitMs;
  // Only the TCP transporter gossips; the others discover by broadcast on their own.
  const transporter = meshTransporterOf(broker);
  let askedAt = 0;
  for (;;) {
    const missing = unsettledPeers(broker);
    if (missing.length === 0 || performance.now() >= deadline) return missing;
    if (performance.now() - askedAt > 100) {
      askedAt = performance.now();
      transporter?.sendGossipRequest?.();
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
