// Who has a live connection, as the gateway tells the engine without importing it. Only gateway
// nodes hold sockets, so each one broadcasts its own counts and every presence tracker
// (engine/presence.ts) keeps them per node: a node that leaves takes its entries with it.
// Counts are absolute, not deltas, so a report repeated or replayed after a reconnect is harmless.

export const PresenceEvents = {
  /** A gateway node's connection counts of some users changed (PresenceReport). */
  report: "parley.presence.report",
} as const;

export const PresenceActions = {
  /** Which of the given users have a live user connection on some node (OnlineAmongParams → number[]). */
  onlineAmong: "presence.onlineAmong",
} as const;

export interface PresenceReport {
  /** The Moleculer node id of the gateway that holds the connections. */
  nodeId: string;
  /** Users and how many user connections this node now holds for each; 0 means none. */
  counts: { userId: number; connections: number }[];
  /** True when counts is the node's whole picture: users it leaves out have no connection there. */
  full: boolean;
}

export interface OnlineAmongParams {
  userIds: number[];
}
