// What every engine service is built from, chosen once at start-up (see server.ts).
import type { ParleyConfig } from "../shared/config.js";
import type { Clock } from "../shared/clock.js";
import type { CodeSender } from "../ports/code-delivery/code-sender.js";
import type { EphemeralState } from "../ports/ephemeral/ephemeral-state.js";
import type { FanOuts } from "./delivery/fan-out.js";
import type { Ownership } from "./ownership.js";
import type { PresenceRegistry } from "../ports/presence/presence-registry.js";
import type { PushNotifier } from "../ports/push-notifier/push-notifier.js";
import type { LiveDelivery } from "./delivery/live-router.js";
import type { Store } from "../ports/store/store.js";

export interface EngineDeps {
  config: ParleyConfig;
  clock: Clock;
  store: Store;
  ephemeral: EphemeralState;
  codeSender: CodeSender;
  pushNotifier: PushNotifier;
  /** Delivers recorded events to the update streams (the outbox's engine side). */
  fanOuts: FanOuts;
  /** This node's leases on conversations and update streams, and the fences its writes carry. */
  ownership: Ownership;
  /** Which users have live connections, on which gateway nodes. */
  presence: PresenceRegistry;
  /** Live pushes to the gateways holding the recipients. */
  live: LiveDelivery;
  /** Tells the webhook fleet that the agent's queue grew (webhooks/fleet.ts); never throws. */
  webhookQueued(agentUserId: number): void;
}
