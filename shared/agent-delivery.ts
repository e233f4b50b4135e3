// How events leave the platform for agents, as the engine and the gateway agree on it without
// importing each other: the inbox actions a WebSocket connection uses to catch an agent up, and
// the durable webhook queue the dispatcher drains (server.ts hands it the store's).
import type { UpdateJson } from "./gen/api/v1/updates_pb.js";

export interface DeliveryModeChangedParams {
  userId: number;
}

export interface AgentBacklogParams {
  userId: number;
  /** Entries after this sn; when absent, after the agent's delivered position. */
  afterSn?: number;
  limit: number;
}

export interface AgentBacklog {
  /** The position the page starts after (the delivered position when none was given). */
  afterSn: number;
  /** Update wire forms (snUpdate with its sn, plus the users and groups it references), in sn order. */
  updates: UpdateJson[];
  /** Whether the stream goes on after this page: read again after its last sn. */
  hasMore: boolean;
  /**
   * The agent is in WEBHOOK mode: its entries go to the webhook, the page is empty and `afterSn`
   * is the delivered position (through which the webhook took them).
   */
  byWebhook?: boolean;
}

/**
 * How a delivery mode switch ended, as the engine tells the gateways whose agent feeds it parked
 * (gateway/agent-feed.ts): the webhook took the agent's entries through `through`, or the socket
 * carries them again.
 */
export type FeedRelease = { toWebhook: true; through: number } | { toWebhook: false };

export interface ParkAgentFeedsParams {
  agentUserId: number;
}

export interface ParkedAgentFeeds {
  /** The highest sn the agent confirmed on any of this gateway's connections (0: none). */
  confirmedSn: number;
}

export interface ReleaseAgentFeedsParams {
  agentUserId: number;
  release: FeedRelease;
}

export interface MarkDeliveredParams {
  userId: number;
  sn: number;
}

export interface QueuedWebhook {
  jobId: number;
  agentUserId: number;
  /** The exact JSON body to POST. */
  body: string;
  /** Failed attempts so far. */
  attempts: number;
  nextAttemptAt: number;
  /** When the job was queued (engine clock): how long its delivery took is measured from it. */
  queuedAt: number;
}

/** What names a queued job: a partitioned queue keeps each agent's jobs together. */
export type QueuedJobKey = Pick<QueuedWebhook, "agentUserId" | "jobId">;

/** The part of the durable webhook queue the dispatcher needs (engine/store's WebhookJobStore fits). */
/**
 * The agents one webhook-fleet node serves: those whose partition of the webhooks topic its
 * consumer holds (see webhooks/fleet.ts).
 */
export type AgentSlice = (agentUserId: number) => boolean;

export interface WebhookQueue {
  /** For each agent not in `busyAgents` (and in `slice`, when given), its oldest job if that job is due at `now`; at most `limit`. */
  due(now: number, busyAgents: readonly number[], limit: number, slice?: AgentSlice): Promise<QueuedWebhook[]>;
  /** Removes a delivered (or abandoned) job. */
  remove(job: QueuedJobKey): Promise<void>;
  /** Records a failed attempt and when to try again. */
  reschedule(job: QueuedJobKey, attempts: number, nextAttemptAt: number): Promise<void>;
  /**
   * Another process queued jobs for these agents (the engine's announcement reached the fleet):
   * the next `due` looks at their queues. A store whose `due` reads every queue anyway ignores it.
   */
  announced(agentUserIds: readonly number[]): void;
}

/** Where an agent's webhook deliveries go right now. */
export interface WebhookTarget {
  url: string;
  secretKey: string;
}

/** Reads an agent's current webhook target; undefined when it is not (any more) in WEBHOOK mode. */
export type WebhookTargetResolver = (agentUserId: number) => Promise<WebhookTarget | undefined>;
