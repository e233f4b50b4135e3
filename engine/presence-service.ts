// The presence service: which of some users have a live connection anywhere, for the push service
// to decide who is offline. Gateways keep the presence registry current (gateway-service.ts); any
// engine answers from it, so no engine holds a copy of every gateway's connections, only of the
// answers it needed lately (`cache`), which the gateways' announcements keep true.
import type { Context, ServiceSchema } from "moleculer";
import { PresenceEvents, type OnlineAmongParams, type PresenceChangedEvent, type PresenceNodeResetEvent } from "../shared/presence.js";
import type { CachedPresenceRegistry } from "../ports/presence/cached-presence-registry.js";
import type { PresenceRegistry } from "../ports/presence/presence-registry.js";
import type { EngineActions } from "./engine-actions.js";
import type { ActionsOf } from "../shared/actions.js";

export function presenceService(presence: PresenceRegistry, cache?: CachedPresenceRegistry): ServiceSchema {
  return {
    name: "presence",
    events: cache
      ? {
          [PresenceEvents.changed]: {
            handler(ctx: Context<PresenceChangedEvent>) {
              cache.changed(ctx.params.node, ctx.params.counts);
            },
          },
          [PresenceEvents.nodeReset]: {
            handler(ctx: Context<PresenceNodeResetEvent>) {
              cache.nodeReset(ctx.params.node);
            },
          },
          // Announcements of a node this one lost sight of may be lost too: its entries are asked again.
          "$node.disconnected": {
            handler(ctx: Context<{ node: { id: string } }>) {
              cache.nodeReset(ctx.params.node.id);
            },
          },
          "$node.connected": {
            handler(ctx: Context<{ node: { id: string } }>) {
              cache.nodeReset(ctx.params.node.id);
            },
          },
        }
      : {},
    actions: {
      onlineAmong: {
        async handler(ctx: Context<OnlineAmongParams>): Promise<number[]> {
          return [...(await presence.gatewaysOf(ctx.params.userIds)).keys()];
        },
      },
    } satisfies ActionsOf<EngineActions, "presence">,
  };
}
