// The presence port: which gateway nodes hold live connections of which users. Gateways write it
// (gateway-service.ts), the push router and the presence service read it. Embedded mode keeps it
// in memory; a cluster keeps it in Redis, so no engine holds a copy and a joining node needs no
// full report. A node's entries count only while it keeps saying it is alive, so a gateway that
// dies takes its entries with it without anyone cleaning up. The promises are pinned by
// ./presence-conformance.ts.
export interface PresenceRegistry {
  /** A gateway node's connection counts of these users changed (absolute counts; 0 = none left). */
  report(nodeId: string, counts: { userId: number; connections: number }[]): Promise<void>;
  /**
   * The node is alive for ttlMs more; its entries stop counting once it stops saying so. Answers
   * false when the node was not alive until now (a first beat, after dropNode, or after its beat
   * lapsed): its entries are gone, and it must report every count it holds again.
   */
  heartbeat(nodeId: string, ttlMs: number): Promise<boolean>;
  /** The node left (or restarted): its entries go at once. */
  dropNode(nodeId: string): Promise<void>;
  /** For each given user with a live connection on a live node: those nodes. Users without one are absent. */
  gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>>;
  close(): Promise<void>;
}
