// What crosses from the engine to the gateways and the webhook fleet. Live pushes are calls to the
// gateway nodes holding the recipients (engine/delivery/live-router.ts); the rest are Moleculer broadcasts,
// rare and heard by every node. Payloads are JSON-safe (the proto3 JSON form of the protocol messages).
import type { UpdateJson } from "./gen/api/v1/updates_pb.js";

export const BusEvents = {
  /** Device sessions that stopped being valid; their sockets must close. */
  sessionsRevoked: "parley.sessions-revoked",
  /** An agent's record changed (delivery mode, webhook, keys, status): cached views must reload it. */
  agentChanged: "parley.agent-changed",
  /** An agent's token stopped being valid (regenerated, agent deleted): its sockets must close. */
  agentTokenRevoked: "parley.agent-token-revoked",
  /** An agent's IP whitelist changed: its sockets from addresses now outside it must close. */
  agentWhitelistChanged: "parley.agent-whitelist-changed",
} as const;

/**
 * An update to deliver live. A stream entry is one event for all its recipients: its snUpdate
 * carries no sn, each recipient's sn comes with it, and a gateway builds each recipient's frame
 * from one encoding by putting the sn in. An ephemeral update goes to its users as it is.
 */
export type LiveEvent =
  // toWebhook: the recipients (WEBHOOK-mode agents) whose entry went to their webhook queue; their sockets do not carry it.
  | { update: UpdateJson; recipients: [userId: number, sn: number][]; toWebhook?: number[] }
  | { update: UpdateJson; userIds: number[] };

export interface SessionsRevokedEvent {
  userId: number;
  /** The revoked devices; every socket authenticated on one of them is closed. */
  deviceIds: string[];
}

export interface AgentChangedEvent {
  agentUserId: number;
}

export interface AgentTokenRevokedEvent {
  agentUserId: number;
}

export interface AgentWhitelistChangedEvent {
  agentUserId: number;
  /** The new list (addresses and CIDR blocks); empty allows every address. */
  ipWhitelist: string[];
}
