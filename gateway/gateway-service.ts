// The WebSocket gateway: holds the connections of this node, tells the presence registry whose they
// are, and delivers to them what the engine sends this node (engine/delivery/live-router.ts) or broadcasts
// (revoked sessions and tokens).
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceBroker, ServiceSchema } from "moleculer";
import { type FeedRelease, type ParkAgentFeedsParams, type ParkedAgentFeeds, type ReleaseAgentFeedsParams } from "../shared/agent-delivery.js";
import { BusEvents, type AgentTokenRevokedEvent, type AgentWhitelistChangedEvent, type LiveEvent, type SessionsRevokedEvent } from "../shared/bus.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { addressList, listContains, resolveClientAddress } from "../shared/ip.js";
import type { PresenceRegistry } from "../ports/presence/presence-registry.js";
import { PresenceEvents, type PresenceChangedEvent, type PresenceNodeResetEvent } from "../shared/presence.js";
import { AgentFeed } from "./agent-feed.js";
import { CloseCodes, Connection, type ConnectionPolicy, type Identity } from "./connection.js";
import { nextPushId, SequencedFrames, UpdateFrame } from "./frame-codec.js";
import type { SocketAcceptor, SocketServer } from "./socket.js";
import { gatewayBackloggedConnections, gatewaySendBacklog } from "../shared/metrics.js";
import { backgroundFailed } from "../shared/background.js";
import { callAction, type Actions, type ActionsOf } from "../shared/actions.js";

export interface GatewayOptions extends Partial<ConnectionPolicy> {
  /** The socket driver of the edge's port (SOCKET_DRIVER). */
  sockets: SocketAcceptor;
  /** Who a bearer token names, presented from this client address (the process's identity cache); throws the catalogue's refusal. */
  authenticate(token: string, clientIp: string): Promise<Identity>;
  /** Proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES); empty trusts none. */
  trustedProxies?: readonly string[];
  onConnectionCountChange?: (delta: number) => void;
  /** Where this node says which users it holds connections of (the push router reads it). */
  presence: PresenceRegistry;
}

export const PresencePolicy = {
  /** How often a gateway says it is alive; its entries stop counting three periods after it stops. */
  heartbeatMs: 5_000,
  ttlMs: 15_000,
} as const;

/**
 * How long an agent's feeds stay parked for a mode switch whose release never came (the engine
 * died between the two): they then read the agent's mode again (see agent-feed.ts).
 */
export const parkTimeoutMs = 15_000;

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
  let heartbeat: NodeJS.Timeout | undefined;
  let unsampleBacklog: (() => void)[] = [];
  /** Agents whose feeds a mode switch parked, each with the timer that releases them if it never ends. */
  const parkedAgents = new Map<number, NodeJS.Timeout>();

  const agentFeedsOf = (agentUserId: number): AgentFeed[] =>
    [...(byUser.get(agentUserId) ?? [])].flatMap((connection) => (connection.identity?.kind === "agent" && connection.agentFeed ? [connection.agentFeed] : []));

  const releaseAgentFeeds = (agentUserId: number, release: FeedRelease) => {
    clearTimeout(parkedAgents.get(agentUserId));
    parkedAgents.delete(agentUserId);
    for (const feed of agentFeedsOf(agentUserId)) feed.release(release);
  };

  // The engines keep a copy of the answers they needed: each change reported is announced to them
  // (engine/presence-service.ts), before the connection that made it hears its answer.
  const announcePresence = (broker: ServiceBroker, counts: PresenceChangedEvent["counts"]) =>
    void broker.broadcast(PresenceEvents.changed, { node: broker.nodeID, counts } satisfies PresenceChangedEvent, "presence").catch((err: unknown) => broker.logger.warn(`presence announcement failed: ${String(err)}`));
  const announceNodeReset = (broker: ServiceBroker) =>
    void broker.broadcast(PresenceEvents.nodeReset, { node: broker.nodeID } satisfies PresenceNodeResetEvent, "presence").catch((err: unknown) => broker.logger.warn(`presence announcement failed: ${String(err)}`));

  // Agents' connections count too: pushes reach them through the same registry (and agents are
  // never offline-pushed, so counting them as online changes nothing there).
  const reportPresence = (userId: number) => {
    const broker = presenceBroker;
    if (!broker) return;
    const counts = [{ userId, connections: byUser.get(userId)?.size ?? 0 }];
    options.presence.report(broker.nodeID, counts).then(
      () => announcePresence(broker, counts),
      (err: unknown) => broker.logger.warn(`presence report failed: ${String(err)}`),
    );
  };

  /** Takes the connection out of pushes' reach; answers whether it was in. */
  const unlist = (connection: Connection): boolean => {
    const userId = connection.identity?.userId;
    const connections = userId === undefined ? undefined : byUser.get(userId);
    if (!connections?.delete(connection)) return false;
    if (connections.size === 0) byUser.delete(userId!);
    return true;
  };

  const forget = (connection: Connection) => {
    if (!all.delete(connection)) return;
    options.onConnectionCountChange?.(-1);
    if (unlist(connection)) reportPresence(connection.identity!.userId);
  };

  const deliver = (event: LiveEvent) => {
    if ("recipients" in event) {
      // One encoding of the entry, whatever the number of recipients this node holds; each
      // recipient's frame only puts its sn in.
      let frames: SequencedFrames | undefined;
      const toWebhook = event.toWebhook && new Set(event.toWebhook);
      for (const [userId, sn] of event.recipients) {
        const connections = byUser.get(userId);
        if (!connections) continue;
        frames ??= new SequencedFrames(nextPushId(), event.update as JsonObject);
        const frame = frames.withSn(sn);
        for (const connection of connections) connection.push(frame, sn, toWebhook?.has(userId) ?? false);
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
  };

  return {
    name: "gateway",
    events: {
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
    actions: {
      deliver: {
        handler(ctx: { params: LiveEvent }) {
          deliver(ctx.params);
          return null;
        },
      },
      parkAgentFeeds: {
        async handler(ctx: { params: ParkAgentFeedsParams }): Promise<ParkedAgentFeeds> {
          const { agentUserId } = ctx.params;
          clearTimeout(parkedAgents.get(agentUserId));
          const timer = setTimeout(() => releaseAgentFeeds(agentUserId, { toWebhook: false }), parkTimeoutMs);
          timer.unref();
          parkedAgents.set(agentUserId, timer);
          const confirmed = await Promise.all(agentFeedsOf(agentUserId).map((feed) => feed.park()));
          return { confirmedSn: Math.max(0, ...confirmed) };
        },
      },
      releaseAgentFeeds: {
        handler(ctx: { params: ReleaseAgentFeedsParams }) {
          releaseAgentFeeds(ctx.params.agentUserId, ctx.params.release);
          return null;
        },
      },
    } satisfies ActionsOf<Actions, "gateway">,
    async started() {
      const broker = (presenceBroker = this.broker);
      // Entries of an earlier life of this node (a crash) describe connections that are gone.
      await options.presence.dropNode(broker.nodeID);
      announceNodeReset(broker);
      // A beat that finds this node's entries gone (its beats lapsed: Redis restarted, or this
      // process stalled) reports every connection again.
      const beat = async () => {
        try {
          if (await options.presence.heartbeat(broker.nodeID, PresencePolicy.ttlMs)) return;
          const counts = [...byUser].map(([userId, connections]) => ({ userId, connections: connections.size }));
          if (counts.length > 0) {
            await options.presence.report(broker.nodeID, counts);
            announcePresence(broker, counts);
          }
        } catch (err) {
          // The next beat tries again (and reports every connection, should the entries be gone).
          backgroundFailed("presence_heartbeat", err, broker.logger, "presence heartbeat");
        }
      };
      await beat();
      heartbeat = setInterval(() => void beat(), PresencePolicy.heartbeatMs);
      heartbeat.unref();
      unsampleBacklog = [
        gatewaySendBacklog.sample({}, () => {
          let bytes = 0;
          for (const connection of all) bytes += connection.backlogBytes;
          return bytes;
        }),
        gatewayBackloggedConnections.sample({}, () => {
          let backlogged = 0;
          for (const connection of all) if (!connection.hasRoom) backlogged += 1;
          return backlogged;
        }),
      ];
      const logger = this.logger;
      const agentFeed = (c: Connection, agentUserId: number) =>
        new AgentFeed(
          agentUserId,
          c,
          {
            backlog: (params) => callAction(broker, "sync.agentBacklog", params),
            markDelivered: async (params) => void (await callAction(broker, "sync.markDelivered", params)),
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
          register: async (c) => {
            const userId = c.identity!.userId;
            // An agent first gets what reached its stream while it was away (see agent-feed.ts);
            // the feed is in place before the connection can hear a live push.
            if (c.identity!.kind === "agent") {
              const feed = agentFeed(c, userId);
              c.attachFeed(feed);
              // A connection that arrives while a switch is under way waits for its end too.
              if (parkedAgents.has(userId)) void feed.park();
            }
            let connections = byUser.get(userId);
            if (!connections) byUser.set(userId, (connections = new Set()));
            connections.add(c);
            try {
              const counts = [{ userId, connections: connections.size }];
              await options.presence.report(broker.nodeID, counts);
              announcePresence(broker, counts);
            } catch (err) {
              unlist(c);
              logger.warn(`presence report failed: ${String(err)}`);
              throw new ParleyError(Errors.unavailable, { reason: "PRESENCE_UNAVAILABLE" }, "connections cannot be registered now; try again");
            }
          },
          onAuthenticated: (c) => c.startFeed(),
          onClosed: forget,
        });
        all.add(connection);
        options.onConnectionCountChange?.(1);
        clientAddresses.set(connection, clientIp);
        return connection;
      });
    },
    async stopped() {
      clearInterval(heartbeat);
      for (const timer of parkedAgents.values()) clearTimeout(timer);
      for (const unsample of unsampleBacklog) unsample();
      for (const connection of [...all]) connection.fail(Errors.gatewayShuttingDown, CloseCodes.goingAway);
      await socketServer?.close();
      // Its connections are gone: pushes stop coming here at once, not when the heartbeat lapses.
      await options.presence.dropNode(this.broker.nodeID).then(
        () => announceNodeReset(this.broker),
        (err: unknown) => this.broker.logger.warn(`presence cleanup failed: ${String(err)}`),
      );
    },
  };
}
