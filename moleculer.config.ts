// Broker settings. Embedded mode (the default) runs every service in one broker with no
// transporter. A multi-node deployment passes one (TRANSPORTER; see transporterOf).
import type { BrokerOptions } from "moleculer";

export interface BrokerSettings {
  nodeID?: string;
  /** Moleculer transporter, e.g. "TCP" or "nats://127.0.0.1:4222"; none in embedded mode. */
  transporter?: BrokerOptions["transporter"];
  logLevel?: "fatal" | "error" | "warn" | "info" | "debug";
  /** How long a call waits for its answer; 30 s unless given (tests of a peer that never answers). */
  requestTimeout?: number;
}

/**
 * TRANSPORTER as Moleculer takes it. `tcp://host:port/nodeID,host:port/nodeID,…` is a static TCP
 * mesh: this node listens on the port of its own entry and UDP discovery stays off (Moleculer's own
 * reading of a tcp:// string turns multicast discovery on). Chosen by measurement
 * (scripts/bench/transporters.ts: lowest latency per call, a killed node noticed in milliseconds,
 * no server). Anything else (redis://, nats://) goes to Moleculer as it is.
 */
export function transporterOf(raw: string | undefined, nodeId: string): BrokerOptions["transporter"] {
  if (!raw) return undefined;
  if (!raw.startsWith("tcp://")) return raw;
  const urls = raw
    .slice("tcp://".length)
    .split(",")
    .map((entry) => entry.trim());
  const own = urls.find((entry) => entry.endsWith(`/${nodeId}`));
  const port = own && Number(/:(\d+)\//.exec(own)?.[1]);
  if (!port) throw new Error(`TRANSPORTER lists no host:port/${nodeId} entry for this node (NODE_ID=${nodeId})`);
  return meshTransporter(port, urls);
}

/**
 * Largest packet a node takes from the mesh. Moleculer's TCP default (1 MiB) refused, as
 * RequestRejectedError, every call carrying more: an UploadFile of more than about 750 KB (its
 * bytes travel as base64) and large fan-out batches. A call carries at most one request body
 * (api/api-service.ts maxRequestBytes, 8 MiB) grown by a third as base64, plus its envelope.
 */
export const meshMaxPacketBytes = 16 * 1024 * 1024;

/** Moleculer's TCP transporter as the static mesh: listens on `port`, finds the others in `urls` (host:port/nodeID), no UDP discovery. */
export function meshTransporter(port: number, urls: string[]): BrokerOptions["transporter"] {
  // Peers find each other by gossip; every second (the least it takes, Moleculer's default is 2 s)
  // a node that joins later is found sooner; each node sends two small packets a second.
  return { type: "TCP", options: { udpDiscovery: false, port, urls, maxPacketSize: meshMaxPacketBytes, gossipPeriod: 1 } };
}

export function brokerOptions(settings: BrokerSettings = {}): BrokerOptions {
  return {
    namespace: "parley",
    nodeID: settings.nodeID,
    transporter: settings.transporter ?? null,
    // CBOR (cbor-x), chosen by measurement (scripts/bench/serializers.ts, docs/decisions/mesh-serializer.md): as
    // fast as JSON on a private message's packets, half its CPU on a group's (their recipient and
    // sn lists), and 15-26% fewer bytes. Every node of a cluster must use the same one.
    serializer: "CBOR",
    logger: { type: "Console", options: { level: settings.logLevel ?? "info", formatter: "short" } },
    registry: {
      // Actors are sharded per key; a local endpoint must not win over the shard owner, or two
      // nodes would own one conversation or stream (the store refuses that, but it costs retries).
      preferLocal: false,
      strategy: "RoundRobin",
    },
    requestTimeout: settings.requestTimeout ?? 30_000,
    // A killed engine's shards move once the others stop hearing it (ownership.ts takes them over
    // then), so the timeout bounds how long its conversations are unavailable.
    heartbeatInterval: 2,
    heartbeatTimeout: 10,
    metrics: false,
    tracing: false,
    // The process owner (main.ts) decides when to stop: Moleculer's own SIGTERM/SIGINT handler
    // would stop the broker under the HTTP server's feet and call process.exit before the store
    // is closed.
    skipProcessEventRegistration: true,
    // No broker-wide context tracking: it costs a promise chain and a list search on every call
    // (6-10% of a message's server CPU, measured). The HTTP drain waits for requests, which wait
    // for their events; an event fan-out cut short by a stop is finished at the next start (the
    // outbox); the push service waits for the offline pushes under way itself.
  };
}
