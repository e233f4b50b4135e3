// The WebSocket gateway: holds the connections of this node and delivers what the engine
// broadcasts (new updates, revoked sessions) to the connections it concerns.
import type { Server } from "node:http";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceSchema } from "moleculer";
import { BusEvents, type PushEvent, type SessionsRevokedEvent } from "../shared/bus.js";
import { Errors } from "../shared/errors.js";
import { CloseCodes, Connection, nextPushId, type ConnectionPolicy, type Identity } from "./connection.js";
import { PushFrame } from "./frame-codec.js";
import type { SocketServer } from "./socket.js";
import { attachWsServer } from "./ws-socket-server.js";

export interface GatewayOptions extends Partial<ConnectionPolicy> {
  server: Server;
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
  const byUser = new Map<number, Set<Connection>>();
  const all = new Set<Connection>();
  let socketServer: SocketServer | undefined;

  const forget = (connection: Connection) => {
    if (!all.delete(connection)) return;
    options.onConnectionCountChange?.(-1);
    const userId = connection.identity?.userId;
    if (userId === undefined) return;
    const connections = byUser.get(userId);
    connections?.delete(connection);
    if (connections?.size === 0) byUser.delete(userId);
  };

  return {
    name: "gateway",
    events: {
      [BusEvents.push]: {
        handler(ctx: { params: PushEvent }) {
          const connections = byUser.get(ctx.params.userId);
          if (!connections) return;
          const frame = new PushFrame(nextPushId(), ctx.params.update as JsonObject);
          for (const connection of connections) connection.push(frame);
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
      const broker = this.broker;
      socketServer = attachWsServer(options.server, "/ws", (socket) => {
        const connection = new Connection(socket, policy, {
          authenticate: (token) => broker.call("accounts.authenticate", { token }) as Promise<Identity>,
          onAuthenticated: (c) => {
            const userId = c.identity!.userId;
            let connections = byUser.get(userId);
            if (!connections) byUser.set(userId, (connections = new Set()));
            connections.add(c);
          },
          onClosed: forget,
        });
        all.add(connection);
        options.onConnectionCountChange?.(1);
        return connection;
      });
    },
    async stopped() {
      for (const connection of [...all]) connection.fail(Errors.gatewayShuttingDown, CloseCodes.goingAway);
      await socketServer?.close();
    },
  };
}
