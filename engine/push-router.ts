// Live pushes go only to the gateway nodes holding a connection of a recipient: the presence
// registry says which, and each such node gets one call carrying just its recipients. So a push
// costs one registry lookup and one message per gateway concerned, not one per gateway in the
// cluster (what a broadcast would cost), and adding gateways adds capacity.
//
// Pushes are best effort by design: a connection that misses one (its gateway died, a lookup
// raced its connect) finds the gap in its sn sequence and catches up with GetDifference.
import type { ServiceBroker } from "moleculer";
import { GatewayActions, type PushEvent } from "../shared/bus.js";
import type { PresenceRegistry } from "./presence/presence-registry.js";

export interface Pushes {
  /** Sends the update live to the recipients' connections; never throws (see above). */
  send(event: PushEvent): void;
}

export class PushRouter implements Pushes {
  constructor(
    private readonly broker: ServiceBroker,
    private readonly presence: PresenceRegistry,
  ) {}

  send(event: PushEvent): void {
    this.route(event).catch((err: unknown) => this.broker.logger.warn(`a live push was not delivered: ${String(err)}`));
  }

  private async route(event: PushEvent): Promise<void> {
    const userIds = "recipients" in event ? event.recipients.map(([userId]) => userId) : event.userIds;
    const byGateway = new Map<string, Set<number>>();
    for (const [userId, nodes] of await this.presence.gatewaysOf(userIds)) {
      for (const node of nodes) {
        let users = byGateway.get(node);
        if (!users) byGateway.set(node, (users = new Set()));
        users.add(userId);
      }
    }
    const sends = [...byGateway].map(([nodeID, users]) => {
      const part: PushEvent = "recipients" in event ? { update: event.update, recipients: event.recipients.filter(([userId]) => users.has(userId)) } : { update: event.update, userIds: event.userIds.filter((userId) => users.has(userId)) };
      return this.broker.call(GatewayActions.deliver, part, { nodeID, retries: 0 });
    });
    await Promise.all(sends);
  }
}
