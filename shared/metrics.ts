// Process metrics served at GET /metrics (Prometheus text). One registry per process.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

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
