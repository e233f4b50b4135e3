// The local cluster's shape: how many processes of each role, their ports, and the environment
// each one starts with. Every Parley process is configured exactly as one process of a real
// deployment would be (docs/cluster.md), only on this machine's loopback.
import { join } from "node:path";
import type { ParleyConfig, Role } from "../../shared/config.js";
import { defaultS3Port, s3Credentials, s3Host, s3Region } from "../services/s3.js";

export interface ClusterNode {
  /** `<role>-<n>`: its NODE_ID, pid file and log name. */
  name: string;
  role: Role;
  port: number;
  env: Record<string, string>;
}

export interface ClusterLayout {
  nodes: ClusterNode[];
  /** The health aggregator nginx sends /healthz to. */
  healthPort: number;
  /** The front's gRPC listener (GRPC_PORT), passing to the api nodes' gRPC ports; undefined with GRPC_PORT=off. */
  grpcPort: number | undefined;
  /** nginx's configuration, pid and logs. */
  frontDir: string;
  restartDelayMs: number;
  cassandra: { contactPoint: string; keyspace: string };
  redisUrl: string;
  kafkaBrokers: string;
  s3: { endpoint: string; bucket: string; accessKeyId: string; secretAccessKey: string; region: string };
}

const roleOrder: Role[] = ["engine", "webhooks", "api", "gateway"];
const countVariables: Record<Role, [name: string, fallback: number, min: number]> = {
  api: ["CLUSTER_API_NODES", 2, 1],
  engine: ["CLUSTER_ENGINE_NODES", 2, 1],
  gateway: ["CLUSTER_GATEWAY_NODES", 2, 1],
  webhooks: ["CLUSTER_WEBHOOK_NODES", 1, 1],
};

function count(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max = 32): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name} must be ${min}..${max}; got ${raw}`);
  return value;
}

/** An api node's gRPC port, 2000 above its HTTP port. */
function apiGrpcPort(httpPort: number): number {
  const port = httpPort + 2000;
  if (port > 65535) throw new Error(`CLUSTER_BASE_PORT is too high for the api nodes' gRPC ports (${port} > 65535); lower it, or set GRPC_PORT=off`);
  return port;
}

export function clusterLayout(env: NodeJS.ProcessEnv, config: ParleyConfig): ClusterLayout {
  if (config.grpcPort === 0) throw new Error("GRPC_PORT=0: the cluster's front listens for gRPC on a fixed port; name one, or off");
  // Room above it for the nodes' HTTP ports, 1000 higher their bus ports, 2000 higher the api
  // nodes' gRPC ports.
  const basePort = count(env, "CLUSTER_BASE_PORT", 18_000, 1024, 64_000);
  const frontHost = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
  const frontUrl = `http://${frontHost}:${config.port}`;
  const s3 = { endpoint: `http://${s3Host}:${defaultS3Port}`, region: s3Region, ...s3Credentials(env) };
  const layout: ClusterLayout = {
    nodes: [],
    healthPort: basePort,
    grpcPort: config.grpcPort,
    frontDir: join(config.dataDir, "cluster", "front"),
    restartDelayMs: 1_000,
    cassandra: { contactPoint: "127.0.0.1:9042", keyspace: env.CASSANDRA_KEYSPACE || "parley" },
    redisUrl: "redis://127.0.0.1:6379",
    kafkaBrokers: "127.0.0.1:9092",
    s3: { endpoint: s3.endpoint, bucket: env.S3_BUCKET || "parley-media", accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, region: s3.region },
  };
  let port = basePort;
  for (const role of roleOrder) {
    const [variable, fallback, min] = countVariables[role];
    for (let n = 1; n <= count(env, variable, fallback, min); n++) {
      const name = `${role}-${n}`;
      port += 1;
      layout.nodes.push({
        name,
        role,
        port,
        env: {
          ROLES: role,
          NODE_ID: name,
          HOST: "127.0.0.1",
          PORT: String(port),
          GRPC_PORT: role === "api" && config.grpcPort !== undefined ? String(apiGrpcPort(port)) : "off",
          DATA_DIR: join(config.dataDir, "cluster", "nodes", name),
          TRANSPORTER: "",
          STORE: "cassandra",
          CASSANDRA_CONTACT_POINTS: layout.cassandra.contactPoint,
          CASSANDRA_KEYSPACE: layout.cassandra.keyspace,
          REDIS_URL: layout.redisUrl,
          KAFKA_BROKERS: layout.kafkaBrokers,
          BLOB_STORE: "s3",
          S3_ENDPOINT: layout.s3.endpoint,
          S3_BUCKET: layout.s3.bucket,
          S3_REGION: layout.s3.region,
          S3_ACCESS_KEY_ID: layout.s3.accessKeyId,
          S3_SECRET_ACCESS_KEY: layout.s3.secretAccessKey,
          // Clients reach every node through the front, so the URLs handed out name it.
          PUBLIC_URL: env.PUBLIC_URL || frontUrl,
          PUBLIC_WS_URL: env.PUBLIC_WS_URL || `ws://${frontHost}:${config.port}/ws`,
          TRUSTED_PROXIES: env.TRUSTED_PROXIES || "127.0.0.1",
        },
      });
    }
  }
  // A static TCP mesh (see transporterOf in moleculer.config.ts): each node's bus port is its HTTP port + 1000.
  const mesh = `tcp://${layout.nodes.map((node) => `127.0.0.1:${node.port + 1000}/${node.name}`).join(",")}`;
  for (const node of layout.nodes) node.env.TRANSPORTER = env.CLUSTER_TRANSPORTER || mesh;
  return layout;
}
