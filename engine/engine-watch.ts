// Moleculer's TCP mesh notices an engine that died (its sockets close, in milliseconds) but never
// one that hangs with its sockets open: a paused process, a wedged event loop, a frozen host. The
// TCP transporter turns Moleculer's heartbeat checks off and keeps only gossip, whose heartbeats
// move only when a node's CPU reading changes, so nothing ever declared such an engine gone. Calls
// to it waited out the request timeout (30 s), and calls to the other engines that waited on it
// (a fan-out to its streams) with them; its keys stayed placed on it for as long as it hung.
//
// So every node of a mesh pings the engines it knows every second. An engine that has answered
// none for `silentMs` is marked disconnected here: the calls waiting on it are refused at once
// (ENGINE_NODE_LOST, retryable), its shards are placed on the other engines, which take them over
// with the next epoch (the fence refuses whatever it writes should it wake). When it does wake,
// it answers the gossip that lists it as offline with its own record, and is placed again.
import type { ServiceBroker } from "moleculer";

export interface EngineWatchPolicy {
  pingEveryMs: number;
  silentMs: number;
}

export const engineWatchPolicy: EngineWatchPolicy = {
  /** How often each engine is pinged. */
  pingEveryMs: 1_000,
  /** An engine silent this long is taken for gone. */
  silentMs: 5_000,
};

interface WatchedNode {
  id: string;
  local: boolean;
  available: boolean;
  metadata: { roles?: readonly string[] } | null;
}

interface NodeRegistry {
  toArray(): WatchedNode[];
  disconnected(nodeID: string, isUnexpected: boolean): void;
}

/** Starts watching; answers the function that stops it. */
export function watchEngines(broker: ServiceBroker, policy: EngineWatchPolicy = engineWatchPolicy): () => void {
  const nodes = (broker.registry as unknown as { nodes: NodeRegistry }).nodes;
  const logger = broker.getLogger("engine-watch");
  /** When each engine last answered (or was first watched), by node id. */
  const answeredAt = new Map<string, number>();
  let lastTick = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    // This process itself stalled (a long GC, a blocked loop): the answers that came meanwhile
    // are still unread, so no peer is blamed for the time it lost.
    if (now - lastTick > 2 * policy.pingEveryMs) for (const id of answeredAt.keys()) answeredAt.set(id, now);
    lastTick = now;
    const engines = nodes.toArray().filter((node) => !node.local && node.available && node.metadata?.roles?.includes("engine"));
    for (const id of answeredAt.keys()) if (!engines.some((node) => node.id === id)) answeredAt.delete(id);
    for (const { id } of engines) {
      const since = answeredAt.get(id);
      if (since === undefined) answeredAt.set(id, now);
      else if (now - since > policy.silentMs) {
        answeredAt.delete(id);
        logger.warn(`engine ${id} answered no ping for ${Math.round(now - since)} ms: taken for gone (its calls are refused, its shards move)`);
        nodes.disconnected(id, true);
        continue;
      }
      void broker.ping(id, policy.silentMs).then((pong) => {
        if (pong && answeredAt.has(id)) answeredAt.set(id, performance.now());
      });
    }
  }, policy.pingEveryMs);
  timer.unref();
  return () => clearInterval(timer);
}
