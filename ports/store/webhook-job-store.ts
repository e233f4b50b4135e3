// The webhook queue of each WEBHOOK-mode agent, and how far its stream was handed over: one aggregate of the storage port (store.ts).
import type { QueuedWebhook, WebhookQueue } from "../../shared/agent-delivery.js";

/** A queued webhook delivery; the dispatcher's view of the queue is shared/agent-delivery.ts. */
export type WebhookJob = QueuedWebhook;

/**
 * The most jobs one agent's queue keeps: a dead endpoint under steady traffic would otherwise
 * grow it without end (each job takes about half a minute to give up). Past it the oldest jobs
 * go first; the entries stay in the agent's stream. Adapters may overshoot by a few jobs.
 */
export const maxQueuedWebhooksPerAgent = 10_000;

export interface WebhookJobStore extends WebhookQueue {
  /**
   * Queues a delivery for the agent; jobs of one agent are delivered in queue order. Beyond
   * maxQueuedWebhooksPerAgent the agent's oldest jobs are dropped.
   */
  enqueue(agentUserId: number, body: string, now: number): Promise<void>;
  /** The agent's queued jobs, oldest first. */
  pending(agentUserId: number): Promise<WebhookJob[]>;
  /** Drops every queued job of the agent (it left webhook mode); answers how many there were. */
  clearAgent(agentUserId: number): Promise<number>;
  /**
   * How far the agent's stream was handed over: written to one of its sockets, or queued for its
   * webhook. 0 when nothing was; a WebSocket connection replays the entries after it.
   */
  deliveredSn(agentUserId: number): Promise<number>;
  /** Moves the agent's delivered position forward (never back). */
  advanceDelivered(agentUserId: number, sn: number): Promise<void>;
  /** Queues the bodies and moves the delivered position forward to `throughSn`, in one write. */
  handOver(agentUserId: number, bodies: readonly string[], queuedAt: number, throughSn: number): Promise<void>;
  /** Moves the agent's delivered position back to `sn` when it is past it (never forward). */
  rewindDelivered(agentUserId: number, sn: number): Promise<void>;
}
