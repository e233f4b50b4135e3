// The WebSocket gateway: holds the connections of this node and delivers what the engine
// broadcasts (new updates, revoked sessions) to the connections it concerns.
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceBroker, ServiceSchema } from "moleculer";
import { AgentDeliveryActions, type AgentBacklog } from "../shared/agent-delivery.js";
import { BusEvents, type AgentTokenRevokedEvent, type AgentWhitelistChangedEvent, type PushEvent, type SessionsRevokedEvent } from "../shared/bus.js";
import { Errors } from "../shared/errors.js";
import { addressList, listContains, resolveClientAddress } from "../shared/ip.js";
import { PresenceEvents, type PresenceReport } from "../shared/presence.js";
import { AgentFeed } from "./agent-feed.js";
import { CloseCodes, Connection, nextPushId, type ConnectionPolicy, type Identity } from "./connection.js";
import { SequencedFrames, UpdateFrame } from "./frame-codec.js";
import type { SocketAcceptor, SocketServer } from "./socket.js";

export interface GatewayOptions extends Partial<ConnectionPolicy> {
  /** The socket driver of the edge's port (SOCKET_DRIVER). */
  sockets: SocketAcceptor;
  /** Who a bearer token names, presented from this client address (the process's identity cache); throws the catalogue's refusal. */
  authenticate(token: string, clientIp: string): Promise<Identity>;
  /** Proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES); empty trusts none. */
  trustedProxies?: readonly string[];
  onConnectionCountChange?: (delta: number) => void;
}

export const defaultConnectionPolicy: ConnectionPolicy = {
  authTimeoutMs: 10_000,
  // Clients are asked to ping every 30 s; three missed pings end the connection.
  idleTimeoutMs: 90_000,
  maxBufferedBytes: 1024 * 1024,
};

export function gatewayService(options: GatewayOptions): ServiceSchema {
  const policy: ConnectionPolicy = {
    authTimeoutMs: options.authTimeoutMs ?? defaultConnectionPolicy.authTimeoutMs,
    idleTimeoutMs: options.idleTimeoutMs ?? defaultConnectionPolicy.idleTimeoutMs,
    maxBufferedBytes: options.maxBufferedBytes ?? defaultConnectionPolicy.maxBufferedBytes,
  };
  const trustedProxies = options.trustedProxies?.length ? addressList(options.trustedProxies) : undefined;
  const byUser = new Map<number, Set<Connection>>();
  /** Each connection's client address, for re-checking an agent's whitelist when it changes. */
  const clientAddresses = new WeakMap<Connection, string>();
  const all = new Set<Connection>();
  let socketServer: SocketServer | undefined;
  let presenceBroker: ServiceBroker | undefined;

  // Presence is about people: agents are never offline-pushed, so their sockets are not counted.
  const userConnections = (userId: number) => [...(byUser.get(userId) ?? [])].filter((c) => c.identity?.kind === "user").length;
  const reportPresence = (userIds: Iterable<number>, full: boolean) => {
    const broker = presenceBroker;
    if (!broker) return;
    const report: PresenceReport = { nodeId: broker.nodeID, counts: [...userIds].map((userId) => ({ userId, connections: userConnections(userId) })), full };
    void Promise.resolve(broker.broadcast(PresenceEvents.report, report)).catch((err) => broker.logger.warn("presence report failed", err));
  };

  const forget = (connection: Connection) => {
    if (!all.delete(connection)) return;
    options.onConnectionCountChange?.(-1);
    const userId = connection.identity?.userId;
    if (userId === undefined) return;
    const connections = byUser.get(userId);
    connections?.delete(connection);
    if (connections?.size === 0) byUser.delete(userId);
    if (connection.identity?.kind === "user") reportPresence([userId], false);
  };

  return {
    name: "gateway",
    events: {
      // A node that just joined (or rejoined after a partition) may host a presence tracker that
      // knows nothing of this node's sockets yet.
      "$node.connected": {
        handler() {
          reportPresence([...byUser.keys()].filter((userId) => userConnections(userId) > 0), true);
        },
      },
      [BusEvents.push]: {
        handler(ctx: { params: PushEvent }) {
          const event = ctx.params;
          if ("recipients" in event) {
            // One encoding of the entry, whatever the number of recipients this node holds; each
            // recipient's frame only puts its sn in.
            let frames: SequencedFrames | undefined;
            for (const [userId, sn] of event.recipients) {
              const connections = byUser.get(userId);
              if (!connections) continue;
              frames ??= new SequencedFrames(nextPushId(), event.update as JsonObject);
              const frame = frames.withSn(sn);
              for (const connection of connections) connection.push(frame, sn);
            }
            return;
          }
          let frame: UpdateFrame | undefined;
          for (const userId of event.userIds) {
            const connections = byUser.get(userId);
            if (!connections) continue;
            // Encoded lazily and once, whatever the number of recipients this node holds.
            frame ??= new UpdateFrame(nextPushId(), event.update as JsonObject);
            for (const connection of connections) connection.push(frame);
          }
        },
      },
      [BusEvents.agentTokenRevoked]: {
        handler(ctx: { params: AgentTokenRevokedEvent }) {
          for (const connection of byUser.get(ctx.params.agentUserId) ?? []) {
            if (connection.identity?.kind === "agent") connection.fail(Errors.agentTokenRevoked, CloseCodes.revoked);
          }
        },
      },
      [BusEvents.agentWhitelistChanged]: {
        handler(ctx: { params: AgentWhitelistChangedEvent }) {
          if (ctx.params.ipWhitelist.length === 0) return;
          const allowed = addressList(ctx.params.ipWhitelist);
          for (const connection of byUser.get(ctx.params.agentUserId) ?? []) {
            const clientIp = clientAddresses.get(connection);
            if (connection.identity?.kind === "agent" && clientIp !== undefined && !listContains(allowed, clientIp)) {
              connection.fail(Errors.ipNotAllowed, CloseCodes.revoked);
            }
          }
        },
      },
      [BusEvents.sessionsRevoked]: {
        handler(ctx: { params: SessionsRevokedEvent }) {
          const revoked = new Set(ctx.params.deviceIds);
          for (const connection of byUser.get(ctx.params.userId) ?? []) {
            if (connection.identity?.kind === "user" && revoked.has(connection.identity.deviceId)) {
              connection.fail(Errors.sessionRevoked, CloseCodes.revoked);
            }
          }
        },
      },
    },
    started() {
      const broker = (presenceBroker = this.broker);
      const logger = this.logger;
      const agentFeed = (c: Connection, agentUserId: number) =>
        new AgentFeed(
          agentUserId,
          c,
          {
            backlog: (params) => broker.call(AgentDeliveryActions.backlog, params) as Promise<AgentBacklog>,
            markDelivered: async (params) => void (await broker.call(AgentDeliveryActions.markDelivered, params)),
          },
          {
            replayFailed: (err) => {
              logger.warn(`agent ${agentUserId}: backlog replay failed`, err);
              c.fail(Errors.unavailable, CloseCodes.internalError);
            },
            recordFailed: (err) => logger.warn(`agent ${agentUserId}: delivered position not recorded`, err),
          },
        );
      socketServer = options.sockets("/ws", (socket) => {
        // The client address is what an agent's IP whitelist is checked against.
        const clientIp = resolveClientAddress(socket.remoteAddress, socket.forwardedFor, trustedProxies);
        const connection: Connection = new Connection(socket, policy, {
          authenticate: (token) => options.authenticate(token, clientIp),
          onAuthenticated: (c) => {
            const userId = c.identity!.userId;
            // An agent first gets what reached its stream while it was away (see agent-feed.ts);
            // the feed is in place before the connection can hear a live push.
            const feed = c.identity!.kind === "agent" ? agentFeed(c, userId) : undefined;
            if (feed) c.attachFeed(feed);
            let connections = byUser.get(userId);
            if (!connections) byUser.set(userId, (connections = new Set()));
            connections.add(c);
            if (c.identity!.kind === "user") reportPresence([userId], false);
            feed?.start();
          },
          onClosed: forget,
        });
        all.add(connection);
        options.onConnectionCountChange?.(1);
        clientAddresses.set(connection, clientIp);
        return connection;
      });
    },
    async stopped() {
      for (const connection of [...all]) connection.fail(Errors.gatewayShuttingDown, CloseCodes.goingAway);
      await socketServer?.close();
    },
  };
}
