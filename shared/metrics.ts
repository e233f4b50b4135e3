// Process metrics served at GET /metrics (Prometheus text). One registry per process. Every metric
// is listed in docs/METRICS.md; ops/grafana/parley.json charts them (its test keeps the two in step).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { BoundCounter, BoundHistogram, SampledGauge } from "./metric-series.js";

export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry, prefix: "parley_" });

export const rpcRequests = new Counter({
  name: "parley_rpc_requests_total",
  help: "RPCs answered, by procedure and Connect code",
  labelNames: ["procedure", "code"] as const,
  registers: [metricsRegistry],
});

export const rpcDuration = new Histogram({
  name: "parley_rpc_duration_seconds",
  help: "Time to answer an RPC, by procedure",
  labelNames: ["procedure"] as const,
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
  registers: [metricsRegistry],
});

export const openSockets = new Gauge({
  name: "parley_websocket_connections",
  help: "Open WebSocket connections on this node",
  registers: [metricsRegistry],
});

// Every series carries the role(s) and node id of the process, so one dashboard splits any panel
// by role or node whatever the scrape configuration calls the targets. A deployment runs one node
// per process; tests run several in one process, whose series then name them all.
const hostedNodes = new Set<{ nodeId: string; roles: readonly string[] }>();

function labelWithHostedNodes(): void {
  const nodes = [...hostedNodes];
  const roles = [...new Set(nodes.flatMap((node) => node.roles))].sort();
  const nodeIds = [...new Set(nodes.map((node) => node.nodeId))].sort();
  metricsRegistry.setDefaultLabels(nodes.length === 0 ? {} : { role: roles.join(","), node_id: nodeIds.join(",") });
}

/** Labels every series with this node's roles and id while it runs; answers the call that takes them back. */
export function labelMetricsWithNode(nodeId: string, roles: readonly string[]): () => void {
  const node = { nodeId, roles: [...roles] };
  hostedNodes.add(node);
  labelWithHostedNodes();
  return () => {
    hostedNodes.delete(node);
    labelWithHostedNodes();
  };
}

// Gateway.

export const gatewayPushFrames = new BoundCounter(metricsRegistry, {
  name: "parley_gateway_push_frames_total",
  help: "UPDATE frames queued on this gateway's WebSocket connections (live pushes and agents' backlog replays)",
  labelNames: [],
}).bind({});

export const gatewayPushBytes = new BoundCounter(metricsRegistry, {
  name: "parley_gateway_push_bytes_total",
  help: "Bytes of the UPDATE frames queued on this gateway's WebSocket connections",
  labelNames: [],
}).bind({});

export const gatewayConnectionCloses = new BoundCounter(metricsRegistry, {
  name: "parley_gateway_connection_closes_total",
  help: "WebSocket connections this gateway closed, by reason (peer: the client or the network closed it)",
  labelNames: ["reason"],
});

export const gatewaySendBacklog = new SampledGauge(metricsRegistry, {
  name: "parley_gateway_send_backlog_bytes",
  help: "Bytes queued on this gateway's WebSocket connections and not yet written to the network",
  labelNames: [],
});

export const gatewayBackloggedConnections = new SampledGauge(metricsRegistry, {
  name: "parley_gateway_backlogged_connections",
  help: "WebSocket connections whose send backlog is past half the slow-consumer limit",
  labelNames: [],
});

// Engine: live pushes, event fan-out, streams.

export const pushGatewayCalls = new BoundCounter(metricsRegistry, {
  name: "parley_push_gateway_calls_total",
  help: "Calls carrying live pushes from this engine to a gateway node, by result (ok, error)",
  labelNames: ["result"],
});

export const presenceLookups = new BoundCounter(metricsRegistry, {
  name: "parley_presence_lookups_total",
  help: "Users whose gateways this engine looked up for a push or an offline check, by where the answer came from (cache: the engine's copy, registry: Redis)",
  labelNames: ["answered"],
});

export const fanOutsDelivered = new BoundCounter(metricsRegistry, {
  name: "parley_fanouts_delivered_total",
  help: "Event fan-outs appended to every recipient's update stream, by delivery (first: right after the change; again: finishing one cut short)",
  labelNames: ["delivery"],
});

export const fanOutFailures = new BoundCounter(metricsRegistry, {
  name: "parley_fanout_failures_total",
  help: "Fan-out deliveries that failed and stay recorded in the outbox to be finished again",
  labelNames: [],
}).bind({});

export const fanOutsInFlight = new SampledGauge(metricsRegistry, {
  name: "parley_fanouts_in_flight",
  help: "Event fan-outs this engine is appending to update streams now",
  labelNames: [],
});

export const fanOutUnfinishedScopes = new SampledGauge(metricsRegistry, {
  name: "parley_fanout_unfinished_scopes",
  help: "Conversations and accounts with a fan-out that failed on this engine and waits in the outbox",
  labelNames: [],
});

export const streamsOpen = new SampledGauge(metricsRegistry, {
  name: "parley_streams_open",
  help: "Agents' streamed messages open (started, not ended) in this engine's memory",
  labelNames: [],
});

export const streamsStarted = new BoundCounter(metricsRegistry, {
  name: "parley_streams_started_total",
  help: "Streamed messages started (SendMessage with a STREAM body)",
  labelNames: [],
}).bind({});

export const streamsEnded = new BoundCounter(metricsRegistry, {
  name: "parley_streams_ended_total",
  help: "Streamed messages ended, by outcome (end: EndStream; error: ErrorStream; abandoned: no delta for the idle timeout; recalled)",
  labelNames: ["outcome"],
});

// Webhooks.

export const webhookAttempts = new BoundCounter(metricsRegistry, {
  name: "parley_webhook_attempts_total",
  help: "Webhook delivery attempts, by result (delivered, retried, dead: dropped after the last retry, cancelled: cut off by shutdown) and status class (2xx..5xx, timeout, network, refused: not sent to a private address or a refused URL)",
  labelNames: ["result", "status_class"],
});

export const webhookRequestDuration = new BoundHistogram(metricsRegistry, {
  name: "parley_webhook_request_duration_seconds",
  help: "Time of one webhook request, connection included, by result (delivered, failed)",
  labelNames: ["result"],
  buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
});

export const webhookDeliveryDelay = new BoundHistogram(metricsRegistry, {
  name: "parley_webhook_delivery_delay_seconds",
  help: "Time from a webhook job's queueing to its delivery, retries included",
  labelNames: [],
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
}).bind({});

export const webhookAgents = new SampledGauge(metricsRegistry, {
  name: "parley_webhook_agents",
  help: "Agents this webhooks node is serving, by state (delivering: a request in flight; awaiting_retry: its head job failed here and waits for its retry)",
  labelNames: ["state"],
});

export const webhookSlots = new SampledGauge(metricsRegistry, {
  name: "parley_webhook_slots",
  help: "Webhook requests this node may have in flight at once (WEBHOOK_CONCURRENCY)",
  labelNames: [],
});

// Offline push (engine): requests to APNs and FCM.

export const pushSent = new BoundCounter(metricsRegistry, {
  name: "parley_push_sent_total",
  help: "Notifications a provider accepted, by provider (apns, fcm)",
  labelNames: ["provider"],
});

export const pushFailed = new BoundCounter(metricsRegistry, {
  name: "parley_push_failed_total",
  help: "Notifications that reached no device, by provider and reason (unregistered, bad_token: the token is removed; rate_limited, provider_error, timeout, network: given up after retries; auth, bad_request: refused; queue_full, no_driver, driver_error)",
  labelNames: ["provider", "reason"],
});

export const pushRetries = new BoundCounter(metricsRegistry, {
  name: "parley_push_retries_total",
  help: "Provider requests retried after passing trouble, by provider and reason (rate_limited, provider_error, timeout, network, auth: a credential renewed)",
  labelNames: ["provider", "reason"],
});

export const pushRemovedTokens = new BoundCounter(metricsRegistry, {
  name: "parley_push_removed_tokens_total",
  help: "Device tokens removed from the store because their provider called them unregistered or invalid, by provider",
  labelNames: ["provider"],
});

export const pushRequestDuration = new BoundHistogram(metricsRegistry, {
  name: "parley_push_request_duration_seconds",
  help: "Time of one provider request until its answer, by provider",
  labelNames: ["provider"],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
});

export const pushQueueDepth = new SampledGauge(metricsRegistry, {
  name: "parley_push_queue_depth",
  help: "Notifications waiting on this node for a provider request slot or a retry, by provider",
  labelNames: ["provider"],
});

// The update log (Kafka in a cluster, process memory embedded).

export const updateLogAppendDuration = new BoundHistogram(metricsRegistry, {
  name: "parley_update_log_append_duration_seconds",
  help: "Time to append records to the update log until acknowledged (Kafka: acks=all), by result (ok, error)",
  labelNames: ["result"],
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
});

export const updateLogAppendedRecords = new BoundCounter(metricsRegistry, {
  name: "parley_update_log_appended_records_total",
  help: "Records appended to the update log",
  labelNames: [],
}).bind({});

export const updateLogConsumerLag = new SampledGauge(metricsRegistry, {
  name: "parley_update_log_consumer_lag_records",
  help: "Records in the partitions this node's consumer holds that its group has not handled yet, by consumer group",
  labelNames: ["group"],
});

export const updateLogConsumerErrors = new BoundCounter(metricsRegistry, {
  name: "parley_update_log_consumer_errors_total",
  help: "Consumer failures (a handle that threw, a lost broker connection), by consumer group",
  labelNames: ["group"],
});

// Background work (shared/background.ts).

export const backgroundFailures = new BoundCounter(metricsRegistry, {
  name: "parley_background_failures_total",
  help: "Failures of work a process does outside any request (recovery at start, sweeps, lease renewals, queue loops, heartbeats), by task and reason (ownership, timeout, unreachable, error); each is logged and retried, never ends the process",
  labelNames: ["task", "reason"],
});

// The store.

export const storeQueryDuration = new BoundHistogram(metricsRegistry, {
  name: "parley_store_query_duration_seconds",
  help: "Time of one store query, by store (sqlite, cassandra) and kind (sqlite: read, write, transaction; cassandra: read, write, batch, lwt, lwt_batch)",
  labelNames: ["store", "kind"],
  buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
});

export const storeQueryErrors = new BoundCounter(metricsRegistry, {
  name: "parley_store_query_errors_total",
  help: "Store queries that failed, by store and kind (SQLite constraint violations, which the adapter uses to detect taken names, are not counted)",
  labelNames: ["store", "kind"],
});

/** The time and error series of one store's queries of one kind, bound when its adapter opens. */
export function storeQueryMeasure(store: "sqlite" | "cassandra", kind: string) {
  return { time: storeQueryDuration.bind({ store, kind }), errors: storeQueryErrors.bind({ store, kind }) };
}

export type StoreQueryMeasure = ReturnType<typeof storeQueryMeasure>;
