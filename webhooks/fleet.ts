// The webhook fleet's share of the agents. Every webhooks node is a member of one consumer group
// on the webhooks topic of the update log (Kafka in a cluster), keyed by agent: the partitions a
// member holds are the agents its dispatcher serves, so each agent's queue is drained by exactly
// one node at a time, in order, and an agent whose endpoint is dead holds one delivery slot of one
// node (dispatcher.ts), never another agent's turn. When the group rebalances (a node joins, leaves
// or dies), a node lets its deliveries to the agents moving away finish before the partitions go.
//
// Kafka's client may hand a partition to its new member before the old one has let it go, so the
// partitions alone do not make one node per agent: each delivery also holds the agent's lock in
// the shared ephemeral state (Redis in a cluster), taken with one atomic set-if-absent and
// released only by its holder. A node that dies holding it delays that agent by the lock's
// lifetime, never another agent.
//
// The records are the engine's word that an agent's queue grew (the inbox appends them once the
// entries and their jobs are durable, in one write): the queue in the store stays the truth, so a
// record lost with a crash delays a delivery until the dispatcher's poll, and a record read twice
// wakes the dispatcher twice.
import { randomBytes } from "node:crypto";
import type { EphemeralState } from "../ports/ephemeral/ephemeral-state.js";
import { partitionOf, type LogConsumer, type UpdateLog } from "../ports/update-log/update-log.js";
import type { AgentSlice } from "../shared/agent-delivery.js";

export const WebhookTopic = {
  /** Partitions of the webhooks topic: the most webhooks nodes that can share the agents. */
  partitions: 32,
} as const;

export const webhookTopicName = (prefix: string) => `${prefix}webhooks`;
/**
 * The fleet's consumer group carries the deployment's prefix too: deployments sharing a Kafka (or
 * the clusters of a test run) must not share a group, where every member's join or departure
 * would stall the others' deliveries through a rebalance.
 */
export const webhookFleetGroup = (prefix: string) => `${prefix}webhook-fleet`;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The record telling the fleet that the agent's queue grew. */
export const webhookQueuedRecord = (agentUserId: number) => ({ key: String(agentUserId), value: encoder.encode(JSON.stringify({ agentUserId })) });

/** The agent a webhookQueuedRecord names; undefined for a record that is not one (it only wakes the dispatcher). */
export function queuedAgentOf(record: { value: Uint8Array }): number | undefined {
  try {
    const { agentUserId } = JSON.parse(decoder.decode(record.value)) as { agentUserId?: unknown };
    return Number.isSafeInteger(agentUserId) && (agentUserId as number) > 0 ? (agentUserId as number) : undefined;
  } catch {
    return undefined;
  }
}

export interface FleetDispatcher {
  /** Jobs were queued for these agents elsewhere: looks at their queues now. */
  announced(agentUserIds: readonly number[]): void;
  wake(): void;
  /** Resolves once no delivery to an agent `leaving` names is in flight. */
  settle(leaving: AgentSlice): Promise<void>;
}

/** A delivery lock outlives the longest delivery (the request's answer limit and the queue writes around it). */
export const deliveryLockMs = (requestTimeoutMs: number) => requestTimeoutMs + 30_000;

/** The agent's delivery lock in the shared ephemeral state; see above. */
export function deliveryLocks(ephemeral: EphemeralState, lockMs: number) {
  return async (agentUserId: number): Promise<(() => Promise<void>) | undefined> => {
    const key = `webhook-delivery:${agentUserId}`;
    const holder = randomBytes(9).toString("base64url");
    if (!(await ephemeral.setIfAbsent(key, holder, lockMs))) return undefined;
    return async () => void (await ephemeral.deleteIfEquals(key, holder));
  };
}

export class WebhookFleetMember {
  private readonly held = new Set<number>();
  private consumer: LogConsumer | undefined;

  constructor(
    private readonly log: UpdateLog,
    private readonly topic: string,
    private readonly group: string,
  ) {}

  /** The agents this node serves now. */
  readonly slice: AgentSlice = (agentUserId) => this.held.has(partitionOf(String(agentUserId), WebhookTopic.partitions));

  async join(dispatcher: FleetDispatcher, onError: (err: unknown) => void): Promise<void> {
    await this.log.ensureTopic(this.topic, WebhookTopic.partitions);
    this.consumer = await this.log.consume({
      group: this.group,
      topic: this.topic,
      handle: async (_partition, records) => dispatcher.announced(records.map(queuedAgentOf).filter((agentUserId) => agentUserId !== undefined)),
      assigned: (partitions) => {
        for (const partition of partitions) this.held.add(partition);
        // Queues of agents that moved here may hold jobs nobody announced to this node.
        dispatcher.wake();
      },
      revoked: async (partitions) => {
        const leaving = new Set(partitions);
        for (const partition of partitions) this.held.delete(partition);
        await dispatcher.settle((agentUserId) => leaving.has(partitionOf(String(agentUserId), WebhookTopic.partitions)));
      },
      failed: (err) => onError(err),
    });
  }

  async leave(): Promise<void> {
    await this.consumer?.close();
    this.consumer = undefined;
  }
}
