// The presence service: which of some users have a live connection anywhere, for the push service
// to decide who is offline. Gateways keep the presence registry current (gateway-service.ts); any
// engine answers from it, so no engine holds a copy of every gateway's connections.
import type { Context, ServiceSchema } from "moleculer";
import type { OnlineAmongParams } from "../shared/presence.js";
import type { PresenceRegistry } from "./presence/presence-registry.js";

export function presenceService(presence: PresenceRegistry): ServiceSchema {
  return {
    name: "presence",
    actions: {
      onlineAmong: {
        async handler(ctx: Context<OnlineAmongParams>): Promise<number[]> {
          return [...(await presence.gatewaysOf(ctx.params.userIds)).keys()];
        },
      },
    },
  };
}
