// The presence tracker: which users have a live WebSocket connection, for the push service to
// decide who is offline. Gateway nodes broadcast their per-user connection counts
// (shared/presence.ts), so every instance of this service holds the whole picture in memory and
// any one of them can answer. Memory rather than the ephemeral-state port: the counts of a node
// must vanish the moment the node does (Moleculer's $node.disconnected), which a TTL cannot say
// precisely, and a node that reconnects re-sends its full picture ($node.connected in the gateway).
import type { Context, ServiceSchema } from "moleculer";
import { PresenceEvents, type OnlineAmongParams, type PresenceReport } from "../shared/presence.js";

export class PresenceTracker {
  /** userId → (gateway nodeId → user connections there). */
  private readonly byUser = new Map<number, Map<string, number>>();
  /** nodeId → users it reported, so a node's departure or full report can clear them. */
  private readonly byNode = new Map<string, Set<number>>();

  apply(report: PresenceReport): void {
    if (report.full) this.dropNode(report.nodeId);
    for (const { userId, connections } of report.counts) this.set(report.nodeId, userId, connections);
  }

  dropNode(nodeId: string): void {
    for (const userId of this.byNode.get(nodeId) ?? []) this.set(nodeId, userId, 0);
    this.byNode.delete(nodeId);
  }

  isOnline(userId: number): boolean {
    return this.byUser.has(userId);
  }

  private set(nodeId: string, userId: number, connections: number): void {
    let nodes = this.byUser.get(userId);
    let users = this.byNode.get(nodeId);
    if (connections > 0) {
      if (!nodes) this.byUser.set(userId, (nodes = new Map()));
      if (!users) this.byNode.set(nodeId, (users = new Set()));
      nodes.set(nodeId, connections);
      users.add(userId);
      return;
    }
    nodes?.delete(nodeId);
    if (nodes?.size === 0) this.byUser.delete(userId);
    users?.delete(userId);
  }
}

export function presenceService(): ServiceSchema {
  const tracker = new PresenceTracker();
  return {
    name: "presence",
    events: {
      [PresenceEvents.report]: {
        handler(ctx: Context<PresenceReport>) {
          tracker.apply(ctx.params);
        },
      },
      "$node.disconnected": {
        handler(ctx: Context<{ node: { id: string } }>) {
          tracker.dropNode(ctx.params.node.id);
        },
      },
    },
    actions: {
      onlineAmong: {
        handler(ctx: Context<OnlineAmongParams>): number[] {
          return ctx.params.userIds.filter((userId) => tracker.isOnline(userId));
        },
      },
    },
  };
}
