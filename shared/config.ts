// The operator-facing configuration: every environment variable the server reads, parsed once.
import { hostname } from "node:os";
import { resolve } from "node:path";
import { invalidAddressRule } from "./ip.js";

export type CodeDelivery =
  | { kind: "console" }
  | { kind: "file"; path: string }
  | { kind: "smtp"; url: string; from: string };

export interface ParleyConfig {
  host: string;
  port: number;
  /**
   * The cleartext HTTP/2 port an api process serves gRPC and gRPC-Web on (GRPC_PORT): gRPC needs
   * HTTP/2, which the main port's uWS front does not speak. 0 binds any free port; undefined: none.
   */
  grpcPort: number | undefined;
  /**
   * Whether GRPC_PORT was left unset (grpcPort is then the default): a default port another
   * process holds leaves gRPC off with a warning instead of failing the start, so two servers on
   * one machine started with different PORTs alone (as tests and operators do) both start.
   */
  grpcPortIsDefault: boolean;
  dataDir: string;
  publicUrl: string | undefined;
  publicWsUrl: string | undefined;
  codeDelivery: CodeDelivery;
  /** How offline notifications leave the server (PUSH_NOTIFIER and the APNS_*, FCM_* and PUSH_* settings). */
  push: PushConfig;
  webhookAllowPrivateNetworks: boolean;
  /** Webhook requests in flight at once across agents (one per agent at a time). */
  webhookConcurrency: number;
  /** Proxies (addresses or CIDR blocks) whose X-Forwarded-For is believed; empty trusts none. */
  trustedProxies: string[];
  /** Limits across identities, per minute; 0 turns a limit off (see docs/configuration.md). */
  abuseLimits: AbuseLimitsConfig;
  /** On SIGTERM/SIGINT, how long requests already in flight may take to finish before they are cut. */
  drainTimeoutMs: number;
  /**
   * How long an engine's lease on a shard (and on its fan-out id slot) lasts unless renewed; renewed
   * every third of it. What it bounds: how long a stalled engine that its peers do not take for gone
   * keeps its keys, and the lease writes per second (shorter, more).
   */
  shardLeaseMs: number;
  /** Which WebSocket implementation serves the edge's port (see gateway/socket.ts). */
  socketDriver: SocketDriver;
  /** Where the engine keeps its data: the embedded SQLite file under dataDir, or a Cassandra/ScyllaDB cluster. */
  store: StoreConfig;
  /** Log level for the broker; tests turn it down. */
  logLevel: "fatal" | "error" | "warn" | "info" | "debug";
  /** Which roles this process serves and how it reaches the other processes of a cluster. */
  cluster: ClusterConfig;
}

/**
 * What a process does: `api` serves the Connect API and media downloads, `engine` owns state (the
 * conversation and inbox actors, the domain services), `gateway` holds WebSocket connections,
 * `webhooks` sends agents' webhook deliveries. `npm start` runs all four in one process.
 */
export const roles = ["api", "engine", "gateway", "webhooks"] as const;
export type Role = (typeof roles)[number];

export interface ClusterConfig {
  roles: Role[];
  /** This process's name among the cluster's nodes; an engine's leases are held under it, so a restart under the same name takes them back at once. */
  nodeId: string;
  /** The Moleculer transporter (e.g. "redis://127.0.0.1:6379", "nats://…", "TCP"); none when the process runs every role alone. */
  transporter: string | undefined;
  /** Redis holding shared short-lived state (verification sessions, rate limits, lockouts, card actions) and presence; memory when unset. */
  redisUrl: string | undefined;
  /** Key prefix in Redis, so deployments can share one Redis. */
  redisPrefix: string;
  /** Kafka bootstrap brokers carrying the sequenced updates; in-process when unset. */
  kafkaBrokers: string[] | undefined;
  /** Topic-name prefix in Kafka, so deployments can share one cluster. */
  kafkaTopicPrefix: string;
  /** Where file bytes live: under DATA_DIR/media, or in an S3 bucket. */
  blobs: BlobsConfig;
}

export interface S3Settings {
  /** The S3 API base URL; the AWS endpoint of the region when unset. */
  endpoint: string | undefined;
  region: string;
  bucket: string;
  accessKeyId: string | undefined;
  secretAccessKey: string | undefined;
  /** Path-style URLs (bucket in the path), which most S3-compatible servers need. */
  forcePathStyle: boolean;
}

export type BlobsConfig = { kind: "disk" } | ({ kind: "s3" } & S3Settings);

/** ROLES, NODE_ID, TRANSPORTER, REDIS_URL, KAFKA_BROKERS, BLOB_STORE and S3_*; a bad value stops start-up. */
export function clusterConfig(env: NodeJS.ProcessEnv): ClusterConfig {
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === "" ? undefined : raw;
  };
  const listed = (value("ROLES") ?? roles.join(",")).split(",").map((role) => role.trim());
  const unknown = listed.filter((role) => !(roles as readonly string[]).includes(role));
  if (unknown.length > 0 || listed.length === 0) throw new Error(`ROLES must list some of ${roles.join(", ")}; got ${JSON.stringify(value("ROLES"))}`);
  const chosen = roles.filter((role) => listed.includes(role));
  const transporter = value("TRANSPORTER");
  if (!transporter && chosen.length < roles.length) throw new Error(`ROLES=${chosen.join(",")} needs TRANSPORTER: the other roles run in other processes`);
  const nodeId = value("NODE_ID") ?? (transporter ? `${hostname()}-${process.pid}` : "embedded");
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(nodeId)) throw new Error(`NODE_ID must be 1..64 of letters, digits, ".", "_" and "-"; got ${JSON.stringify(nodeId)}`);
  const kafkaBrokers = value("KAFKA_BROKERS")?.split(",").map((broker) => broker.trim());
  for (const broker of kafkaBrokers ?? []) {
    if (!contactPointPattern.test(broker)) throw new Error(`KAFKA_BROKERS: ${JSON.stringify(broker)} is not host:port`);
  }
  const redisUrl = value("REDIS_URL");
  if (redisUrl !== undefined && !/^rediss?:\/\//.test(redisUrl)) throw new Error(`REDIS_URL must start with redis:// or rediss://; got ${JSON.stringify(redisUrl)}`);
  const prefixPattern = /^[A-Za-z0-9._-]{0,32}$/;
  const redisPrefix = value("REDIS_PREFIX") ?? "parley:";
  if (!/^[A-Za-z0-9._:-]{0,32}$/.test(redisPrefix)) throw new Error(`REDIS_PREFIX must be at most 32 of letters, digits, ".", "_", ":" and "-"`);
  const kafkaTopicPrefix = value("KAFKA_TOPIC_PREFIX") ?? "parley.";
  if (!prefixPattern.test(kafkaTopicPrefix)) throw new Error(`KAFKA_TOPIC_PREFIX must be at most 32 of letters, digits, ".", "_" and "-"`);
  return { roles: chosen, nodeId, transporter, redisUrl, redisPrefix, kafkaBrokers, kafkaTopicPrefix, blobs: blobsConfig(env) };
}

function blobsConfig(env: NodeJS.ProcessEnv): BlobsConfig {
  const kind = choiceSetting(env, "BLOB_STORE", ["disk", "s3"] as const, "disk");
  if (kind === "disk") return { kind };
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === "" ? undefined : raw;
  };
  const bucket = value("S3_BUCKET");
  if (!bucket || !/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) throw new Error(`BLOB_STORE=s3 needs S3_BUCKET, an S3 bucket name (3..63 of a-z, 0-9, "." and "-"); got ${JSON.stringify(bucket)}`);
  const endpoint = value("S3_ENDPOINT");
  if (endpoint !== undefined && !/^https?:\/\/[^/]+\/?$/.test(endpoint)) throw new Error(`S3_ENDPOINT must be an http(s) base URL such as http://127.0.0.1:9000; got ${JSON.stringify(endpoint)}`);
  const forcePathStyle = value("S3_FORCE_PATH_STYLE") ?? (endpoint ? "true" : "false");
  if (forcePathStyle !== "true" && forcePathStyle !== "false") throw new Error(`S3_FORCE_PATH_STYLE must be true or false; got ${JSON.stringify(forcePathStyle)}`);
  return {
    kind,
    endpoint,
    region: value("S3_REGION") ?? "us-east-1",
    bucket,
    // Unset: the AWS SDK's own chain (AWS_ACCESS_KEY_ID, instance roles, …).
    accessKeyId: value("S3_ACCESS_KEY_ID"),
    secretAccessKey: value("S3_SECRET_ACCESS_KEY"),
    forcePathStyle: forcePathStyle === "true",
  };
}

/**
 * PUSH_NOTIFIER: the drivers offline notifications leave by (ports/push-notifier/open-push-notifier.ts),
 * a comma-separated list. A token goes to its platform's provider driver when that is listed, else
 * to the log driver when that is listed, else nowhere (counted as `no_driver`).
 */
export const pushNotifiers = ["log", "apns", "fcm"] as const;
export type PushNotifierKind = (typeof pushNotifiers)[number];

/** A credential given either as a file (…_FILE) or as the variable's own text, for secret stores that inject variables. */
export type CredentialSource = { file: string } | { text: string; variable: string };

export interface ApnsSettings {
  /** The .p8 signing key Apple issued (PKCS#8, P-256). */
  key: CredentialSource;
  keyId: string;
  teamId: string;
  /** The app's bundle id, sent as apns-topic. */
  topic: string;
  productionUrl: string;
  sandboxUrl: string;
}

export interface FcmSettings {
  /** The Google service account JSON (type, project_id, private_key, client_email, token_uri). */
  serviceAccount: CredentialSource;
  /** The Firebase project; the service account's project_id when unset. */
  projectId: string | undefined;
  url: string;
}

export interface PushConfig {
  drivers: PushNotifierKind[];
  apns: ApnsSettings | undefined;
  fcm: FcmSettings | undefined;
  /** How long a provider keeps trying to reach an offline device (APNs expiration, FCM ttl). */
  ttlSeconds: number;
  /** HTTP/2 connections per provider host and node; requests multiplex over them. */
  connectionsPerHost: number;
  /** Provider requests in flight at once per provider and node; more wait in the queue. */
  concurrency: number;
  /** Notifications a provider's queue holds per node; beyond it new ones are dropped (counted as `queue_full`). */
  queueLimit: number;
  /** How long a notification is retried (429, 5xx, network) before it is given up. */
  retryWindowMs: number;
  /** How long one provider request may take. */
  requestTimeoutMs: number;
}

function credentialSetting(env: NodeJS.ProcessEnv, name: string, needs: string): CredentialSource {
  const file = env[`${name}_FILE`]?.trim();
  const text = env[name]?.trim();
  if (file && text) throw new Error(`${needs}: set ${name}_FILE or ${name}, not both`);
  if (file) return { file: resolve(file) };
  if (text) return { text, variable: name };
  throw new Error(`${needs}: set ${name}_FILE (a file) or ${name} (its text)`);
}

function requiredSetting(env: NodeJS.ProcessEnv, name: string, needs: string): string {
  const value = env[name]?.trim();
  if (!value) throw new Error(`${needs}: ${name} is not set`);
  return value;
}

function httpsUrlSetting(env: NodeJS.ProcessEnv, name: string, fallback: string): string {
  const raw = env[name]?.trim() || fallback;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`${name} must be an https:// URL; got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "https:" || url.pathname !== "/" || url.search || url.hash) throw new Error(`${name} must be an https:// origin with no path; got ${JSON.stringify(raw)}`);
  return url.origin;
}

function pushConfig(env: NodeJS.ProcessEnv): PushConfig {
  const listed = (env.PUSH_NOTIFIER?.trim() || "log").split(",").map((name) => name.trim());
  const unknown = listed.filter((name) => !(pushNotifiers as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`PUSH_NOTIFIER must list some of ${pushNotifiers.join(", ")}; got ${JSON.stringify(env.PUSH_NOTIFIER)}`);
  const drivers = pushNotifiers.filter((name) => listed.includes(name));
  const apnsNeeds = "PUSH_NOTIFIER names apns";
  const fcmNeeds = "PUSH_NOTIFIER names fcm";
  return {
    drivers,
    apns: drivers.includes("apns")
      ? {
          key: credentialSetting(env, "APNS_KEY", apnsNeeds),
          keyId: requiredSetting(env, "APNS_KEY_ID", apnsNeeds),
          teamId: requiredSetting(env, "APNS_TEAM_ID", apnsNeeds),
          topic: requiredSetting(env, "APNS_TOPIC", apnsNeeds),
          productionUrl: httpsUrlSetting(env, "APNS_PRODUCTION_URL", "https://api.push.apple.com"),
          sandboxUrl: httpsUrlSetting(env, "APNS_SANDBOX_URL", "https://api.sandbox.push.apple.com"),
        }
      : undefined,
    fcm: drivers.includes("fcm")
      ? {
          serviceAccount: credentialSetting(env, "FCM_SERVICE_ACCOUNT", fcmNeeds),
          projectId: env.FCM_PROJECT_ID?.trim() || undefined,
          url: httpsUrlSetting(env, "FCM_URL", "https://fcm.googleapis.com"),
        }
      : undefined,
    // APNs keeps a notification at most 30 days; 0 means try once, now.
    ttlSeconds: integerSetting(env, "PUSH_TTL_SECONDS", 86_400, 0, 2_592_000),
    connectionsPerHost: integerSetting(env, "PUSH_CONNECTIONS_PER_HOST", 1, 1, 16),
    concurrency: integerSetting(env, "PUSH_CONCURRENCY", 256, 1, 10_000),
    queueLimit: integerSetting(env, "PUSH_QUEUE_LIMIT", 50_000, 1, 10_000_000),
    retryWindowMs: integerSetting(env, "PUSH_RETRY_WINDOW_MS", 30_000, 0, 3_600_000),
    requestTimeoutMs: integerSetting(env, "PUSH_REQUEST_TIMEOUT_MS", 10_000, 100, 120_000),
  };
}

export const socketDrivers = ["ws", "uws"] as const;
export type SocketDriver = (typeof socketDrivers)[number];
/** Chosen by measurement: uWS costs less CPU per push and per RPC and a fifth of the memory per socket (scripts/bench/socket-drivers.ts; see docs/benchmarks.md). */
export const defaultSocketDriver: SocketDriver = "uws";

/** Where the Cassandra store is and how it is opened (CASSANDRA_*). */
export interface CassandraSettings {
  /** host:port of the nodes the driver first contacts. */
  contactPoints: string[];
  keyspace: string;
  /** The datacenter this process runs in: LOCAL_QUORUM and LOCAL_SERIAL are counted there. */
  localDataCenter: string;
  /** Replication of the keyspace when a migration creates it (a CQL map); SimpleStrategy RF 1 when unset. */
  replication?: string;
  /** Apply missing schema migrations at start-up; false refuses a keyspace behind the build (`npm run store -- migrate` applies them). */
  migrate: boolean;
}

export type StoreConfig = { kind: "sqlite" } | ({ kind: "cassandra" } & CassandraSettings);

export const storeKinds = ["sqlite", "cassandra"] as const;

/** Why a keyspace name cannot be used, or undefined: unquoted CQL identifiers are case-insensitive and at most 48 characters. */
export function keyspaceNameProblem(name: string): string | undefined {
  if (/^[a-z][a-z0-9_]{0,47}$/.test(name)) return undefined;
  return `keyspace name ${JSON.stringify(name)} must be lowercase letters, digits and _ (at most 48), starting with a letter`;
}

// host:port, the host a name or IPv4 address, or an IPv6 address in brackets.
const contactPointPattern = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

/**
 * CASSANDRA_CONTACT_POINTS (comma-separated host:port), CASSANDRA_KEYSPACE, CASSANDRA_LOCAL_DC,
 * CASSANDRA_REPLICATION and CASSANDRA_MIGRATE, with one line per bad value (the settings must not
 * be used then). Read the same way by the server and `npm run store`.
 */
export function cassandraSettingsFromEnv(env: NodeJS.ProcessEnv): { settings: CassandraSettings; problems: string[] } {
  const problems: string[] = [];
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === "" ? undefined : raw;
  };
  const contactPoints = (value("CASSANDRA_CONTACT_POINTS") ?? "127.0.0.1:9042").split(",").map((point) => point.trim());
  for (const point of contactPoints) {
    const port = contactPointPattern.exec(point)?.[1];
    if (port === undefined) problems.push(`CASSANDRA_CONTACT_POINTS: ${JSON.stringify(point)} is not host:port (e.g. 127.0.0.1:9042, [::1]:9042)`);
    else if (Number(port) < 1 || Number(port) > 65535) problems.push(`CASSANDRA_CONTACT_POINTS: port ${port} of ${JSON.stringify(point)} is not 1..65535`);
  }
  const keyspace = value("CASSANDRA_KEYSPACE") ?? "parley";
  const keyspaceProblem = keyspaceNameProblem(keyspace);
  if (keyspaceProblem) problems.push(`CASSANDRA_KEYSPACE: ${keyspaceProblem}`);
  const replication = value("CASSANDRA_REPLICATION");
  if (replication !== undefined && !/^\{.*'class'\s*:.*\}$/s.test(replication)) {
    problems.push(`CASSANDRA_REPLICATION: ${JSON.stringify(replication)} is not a CQL replication map, e.g. {'class': 'NetworkTopologyStrategy', 'datacenter1': 3}`);
  }
  const migrate = value("CASSANDRA_MIGRATE") ?? "true";
  if (migrate !== "true" && migrate !== "false") problems.push(`CASSANDRA_MIGRATE: must be true or false; got ${JSON.stringify(migrate)}`);
  return { settings: { contactPoints, keyspace, localDataCenter: value("CASSANDRA_LOCAL_DC") ?? "datacenter1", replication, migrate: migrate !== "false" }, problems };
}

/** STORE and, for Cassandra, its settings; a bad value stops start-up. */
export function storeConfig(env: NodeJS.ProcessEnv): StoreConfig {
  const kind = choiceSetting(env, "STORE", storeKinds, "sqlite");
  if (kind === "sqlite") return { kind };
  const { settings, problems } = cassandraSettingsFromEnv(env);
  if (problems.length > 0) throw new Error(problems.join("; "));
  return { kind, ...settings };
}

export interface AbuseLimitsConfig {
  /** Verification codes one client address may have sent per minute. */
  codesPerAddress: number;
  /** Verification codes the whole server may send per minute. */
  codesGlobal: number;
  /** Secret checks (password, code) one client address may make per minute. */
  signInAttemptsPerAddress: number;
}

function parseCodeDelivery(raw: string | undefined, smtpFrom: string | undefined): CodeDelivery {
  const value = (raw ?? "console").trim();
  if (value === "console") return { kind: "console" };
  if (value.startsWith("file:")) {
    const path = value.slice("file:".length);
    if (!path) throw new Error("CODE_DELIVERY=file:<path> needs a path");
    return { kind: "file", path: resolve(path) };
  }
  if (value.startsWith("smtp://") || value.startsWith("smtps://")) {
    return { kind: "smtp", url: value, from: smtpFrom ?? "Parley <no-reply@parley.localhost>" };
  }
  throw new Error(`CODE_DELIVERY must be console, file:<path> or smtp://…; got ${JSON.stringify(value)}`);
}

/** An integer setting: `fallback` when unset, refused (start-up stops) outside min..max. */
function integerSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number, note = ""): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name} must be ${min}..${max}${note}; got ${raw}`);
  return value;
}

/** A setting that names one of `choices`: `fallback` when unset, refused (start-up stops) otherwise. */
function choiceSetting<T extends string>(env: NodeJS.ProcessEnv, name: string, choices: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!(choices as readonly string[]).includes(raw)) throw new Error(`${name} must be one of ${choices.join(", ")}; got ${JSON.stringify(raw)}`);
  return raw as T;
}

/** The port gRPC clients call when GRPC_PORT is unset: beside the default PORT. */
export const defaultGrpcPort = 8081;

/** GRPC_PORT: a port (0: any free one, as for PORT), `off` for none, unset for defaultGrpcPort. */
function grpcPortSetting(env: NodeJS.ProcessEnv): number | undefined {
  if (env.GRPC_PORT?.trim() === "off") return undefined;
  return integerSetting(env, "GRPC_PORT", defaultGrpcPort, 0, 65535, ", or off");
}

/** A limit per minute; 0 turns it off. */
const perMinute = (env: NodeJS.ProcessEnv, name: string, fallback: number) => integerSetting(env, name, fallback, 0, 1_000_000, " (0 turns the limit off)");

function parseTrustedProxies(raw: string | undefined): string[] {
  const entries = (raw ?? "").split(/[\s,]+/).filter((entry) => entry !== "");
  const invalid = invalidAddressRule(entries);
  if (invalid !== undefined) throw new Error(`TRUSTED_PROXIES must list IP addresses or CIDR blocks; got ${JSON.stringify(invalid)}`);
  return entries;
}

/** Reads the configuration from environment variables (see docs/configuration.md). */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): ParleyConfig {
  const logLevel = (env.LOG_LEVEL ?? "info") as ParleyConfig["logLevel"];
  if (!["fatal", "error", "warn", "info", "debug"].includes(logLevel)) throw new Error(`LOG_LEVEL is invalid: ${logLevel}`);
  return {
    host: env.HOST || "0.0.0.0",
    port: integerSetting(env, "PORT", 8080, 0, 65535),
    grpcPort: grpcPortSetting(env),
    grpcPortIsDefault: (env.GRPC_PORT ?? "").trim() === "",
    dataDir: resolve(env.DATA_DIR || "./data"),
    publicUrl: env.PUBLIC_URL || undefined,
    publicWsUrl: env.PUBLIC_WS_URL || undefined,
    codeDelivery: parseCodeDelivery(env.CODE_DELIVERY, env.SMTP_FROM),
    push: pushConfig(env),
    webhookAllowPrivateNetworks: env.WEBHOOK_ALLOW_PRIVATE_NETWORKS === "true",
    webhookConcurrency: integerSetting(env, "WEBHOOK_CONCURRENCY", 32, 1, 10_000),
    trustedProxies: parseTrustedProxies(env.TRUSTED_PROXIES),
    abuseLimits: {
      codesPerAddress: perMinute(env, "VERIFY_CODES_PER_ADDRESS_PER_MINUTE", 5),
      codesGlobal: perMinute(env, "VERIFY_CODES_PER_MINUTE", 120),
      signInAttemptsPerAddress: perMinute(env, "SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE", 30),
    },
    drainTimeoutMs: integerSetting(env, "DRAIN_TIMEOUT_MS", 10_000, 0, 600_000),
    shardLeaseMs: integerSetting(env, "SHARD_LEASE_MS", 30_000, 3_000, 600_000),
    socketDriver: choiceSetting(env, "SOCKET_DRIVER", socketDrivers, defaultSocketDriver),
    store: storeConfig(env),
    logLevel,
    cluster: clusterConfig(env),
  };
}
