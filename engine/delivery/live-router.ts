// Live pushes go only to the gateway nodes holding a connection of a recipient: the presence
// registry says which, and each such node gets one call carrying just its recipients. So a push
// costs one registry lookup and one message per gateway concerned, not one per gateway in the
// cluster (what a broadcast would cost), and adding gateways adds capacity.
//
// Pushes are best effort by design: a connection that misses one (its gateway died, a lookup
// raced its connect) finds the gap in its sn sequence and catches up with GetDifference.
//
// They leave in the order they were sent: each gateway's calls are issued in that order, over this
// node's one connection to it, and the gateway writes each to its sockets as it arrives. So a
// stream's deltas, sent after its START was, never reach a socket before it, without anybody
// waiting for the START to arrive (the lookups of later pushes run meanwhile; only the issuing
// keeps its turn).
import type { ServiceBroker } from "moleculer";
import type { FeedRelease } from "../../shared/agent-delivery.js";
import type { LiveEvent } from "../../shared/bus.js";
import type { PresenceRegistry } from "../../ports/presence/presence-registry.js";
import { pushGatewayCalls } from "../../shared/metrics.js";
import { callEngine } from "../engine-actions.js";

export interface LiveDelivery {
  /**
   * Sends the update live to the recipients' connections, after every update sent before it.
   * Resolves once every gateway concerned answered (it wrote the frames) or failed; never
   * rejects (see above).
   */
  send(event: LiveEvent): Promise<void>;
  /**
   * Parks the agent's feeds on the gateways holding its connections before a switch into WEBHOOK
   * mode (see gateway/agent-feed.ts); answers the highest sn the agent confirmed on any of them,
   * 0 when none did. A gateway that does not answer counts as none (at least once).
   */
  parkAgentFeeds(agentUserId: number): Promise<number>;
  /** Tells the agent's feeds how the switch ended; never rejects (parked feeds also end on their own). */
  releaseAgentFeeds(agentUserId: number, release: FeedRelease): Promise<void>;
}

/** How long parking waits for a gateway: its feeds' receipt wait (2 s) and the call's way there and back. */
const parkTimeoutMs = 5_000;

/** How long a push waits for a gateway the registry names but this node has not discovered yet. */
const discoveryWaitMs = 5_000;

const gatewayCallsOk = pushGatewayCalls.bind({ result: "ok" });
const gatewayCallsFailed = pushGatewayCalls.bind({ result: "error" });

export class LiveRouter implements LiveDelivery {
  /** Settles once every push sent so far was issued to its gateways. */
  private issued: Promise<void> = Promise.resolve();
  /** Gateways not discovered yet, each with the issuing of the calls waiting for it to be. */
  private readonly undiscovered = new Map<string, Promise<void>>();

  constructor(
    private readonly broker: ServiceBroker,
    private readonly presence: PresenceRegistry,
  ) {}

  /**
   * Resolves once the node is known and up, or after the wait: a gateway that just started may
   * hold connections (and be in the registry) before this node has heard of it (TCP gossip).
   */
  private discovered(nodeID: string): Promise<void> | undefined {
    const registry = this.broker.registry as unknown as { nodes: { get(id: string): { available: boolean } | undefined } };
    if (registry.nodes.get(nodeID)?.available) return undefined;
    return new Promise((resolve) => {
      const timer = setTimeout(done, discoveryWaitMs);
      timer.unref();
      const onConnected = (payload: { node?: { id?: string } }) => {
        if (payload.node?.id === nodeID) done();
      };
      function done() {
        clearTimeout(timer);
        bus.off("$node.connected", onConnected);
        resolve();
      }
      const bus = this.broker.localBus;
      bus.on("$node.connected", onConnected);
    });
  }

  async parkAgentFeeds(agentUserId: number): Promise<number> {
    const answers = await this.onGatewaysOf(agentUserId, (nodeID) =>
      callEngine(this.broker, "gateway.parkAgentFeeds", { agentUserId }, { nodeID, retries: 0, timeout: parkTimeoutMs }),
    );
    return Math.max(0, ...answers.map((answer) => answer?.confirmedSn ?? 0));
  }

  async releaseAgentFeeds(agentUserId: number, release: FeedRelease): Promise<void> {
    await this.onGatewaysOf(agentUserId, (nodeID) =>
      callEngine(this.broker, "gateway.releaseAgentFeeds", { agentUserId, release }, { nodeID, retries: 0 }),
    );
  }

  /** Calls every gateway holding a connection of the user; a failed call answers undefined (logged). */
  private async onGatewaysOf<T>(userId: number, call: (nodeID: string) => Promise<T>): Promise<(T | undefined)[]> {
    let nodes: string[];
    try {
      nodes = [...((await this.presence.gatewaysOf([userId])).get(userId) ?? [])];
    } catch (err) {
      this.broker.logger.warn(`the gateways of user ${userId} could not be looked up: ${String(err)}`);
      return [];
    }
    return Promise.all(
      nodes.map(async (nodeID) => {
        await this.discovered(nodeID);
        try {
          return await call(nodeID);
        } catch (err) {
          this.broker.logger.warn(`gateway ${nodeID} did not take a delivery mode switch of agent ${userId}: ${String(err)}`);
          return undefined;
        }
      }),
    );
  }

  send(event: LiveEvent): Promise<void> {
    const userIds = "recipients" in event ? event.recipients.map(([userId]) => userId) : event.userIds;
    const lookup = this.presence.gatewaysOf(userIds);
    // A failed lookup is reported in this push's turn; until then it must not count as unhandled.
    lookup.catch(() => undefined);
    const calls = this.issued.then(() => lookup).then((gateways) => this.issue(event, gateways));
    this.issued = calls.then(
      () => undefined,
      () => undefined,
    );
    return calls
      .then((answers) => Promise.all(answers))
      .then(
        () => undefined,
        (err: unknown) => this.broker.logger.warn(`a live push was not delivered: ${String(err)}`),
      );
  }

  /** Issues the push's call to each gateway holding some of its users, now or, for one not discovered yet, in its turn once it is. */
  private issue(event: LiveEvent, gateways: Map<number, Iterable<string>>): Promise<void>[] {
    const byGateway = new Map<string, Set<number>>();
    for (const [userId, nodes] of gateways) {
      for (const node of nodes) {
        let users = byGateway.get(node);
        if (!users) byGateway.set(node, (users = new Set()));
        users.add(userId);
      }
    }
    return [...byGateway].map(([nodeID, users]) => {
      const part: LiveEvent = "recipients" in event ? sequencedPart(event, users) : { update: event.update, userIds: event.userIds.filter((userId) => users.has(userId)) };
      const waiting = this.undiscovered.get(nodeID) ?? this.discovered(nodeID);
      if (!waiting) return this.deliver(nodeID, part);
      let answer: Promise<void> | undefined;
      const issued = waiting.then(() => void (answer = this.deliver(nodeID, part)));
      this.undiscovered.set(nodeID, issued);
      void issued.then(() => {
        if (this.undiscovered.get(nodeID) === issued) this.undiscovered.delete(nodeID);
      });
      return issued.then(() => answer);
    });
  }

  private async deliver(nodeID: string, part: LiveEvent): Promise<void> {
    try {
      await callEngine(this.broker, "gateway.deliver", part, { nodeID, retries: 0 });
    } catch (err) {
      gatewayCallsFailed.inc();
      throw err;
    }
    gatewayCallsOk.inc();
  }
}

/** The part of a sequenced push for one gateway's users. */
function sequencedPart(event: Extract<LiveEvent, { recipients: unknown }>, users: Set<number>): LiveEvent {
  const toWebhook = event.toWebhook?.filter((userId) => users.has(userId));
  return { update: event.update, recipients: event.recipients.filter(([userId]) => users.has(userId)), ...(toWebhook?.length ? { toWebhook } : {}) };
}
