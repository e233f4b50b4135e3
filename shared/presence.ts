// Who has a live connection, as the engine's presence service answers it (engine/presence-service.ts).

export interface OnlineAmongParams {
  userIds: number[];
}

/**
 * What gateways announce to the engines' presence services, which keep a copy of the answers they
 * needed (ports/presence/cached-presence-registry.ts).
 */
export const PresenceEvents = {
  /** A gateway reported new connection counts (PresenceChangedEvent), before it answered the connection that changed them. */
  changed: "parley.presence-changed",
  /** A gateway's entries are gone (PresenceNodeResetEvent): it starts over, or stops. */
  nodeReset: "parley.presence-node-reset",
} as const;

export interface PresenceChangedEvent {
  node: string;
  counts: { userId: number; connections: number }[];
}

export interface PresenceNodeResetEvent {
  node: string;
}
