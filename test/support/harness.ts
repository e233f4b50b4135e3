// Starts a real server on an ephemeral port with its own data directory, and builds real clients
// (Connect in JSON or binary mode, WebSocket) against it. Codes are read from the file driver.
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AdjustableClock } from "../../shared/clock.js";
import { defaultSocketDriver, loadConfig, socketDrivers, type ParleyConfig, type SocketDriver } from "../../shared/config.js";
import { openStore } from "../../ports/store/open-store.js";
import { testBucketFor, testS3 } from "./s3.js";
import { deleteTestRedisKeys, testRedis } from "./redis.js";
import { clusterTestEnv, startTestCluster, testTopology } from "./cluster-topology.js";
import { deleteTestKafkaTopics, testKafka } from "./kafka.js";
import { MemoryEphemeralState } from "../../ports/ephemeral/memory-ephemeral-state.js";
import { MemoryPresenceRegistry } from "../../ports/presence/memory-presence-registry.js";
import type { Store } from "../../ports/store/store.js";
import { meshTransporter } from "../../moleculer.config.js";
import { startParley, type Parley, type ParleyOptions, type Role } from "../../server.js";
import { StartupTimings } from "../../startup-timings.js";
import { dataDirRemoved, prepareTestKeyspaces, serverStarted, serverStopped, testCassandra, testKeyspaceFor } from "./cassandra.js";

export { testTopology };

export type WireMode = "json" | "binary";
export const wireModes: WireMode[] = ["json", "binary"];

/**
 * The socket driver test servers use unless a test names one: PARLEY_TEST_SOCKET_DRIVER=uws (or
 * ws) runs the whole suite on that driver; the server's default otherwise.
 */
export const testSocketDriver: SocketDriver = (() => {
  const chosen = process.env.PARLEY_TEST_SOCKET_DRIVER || defaultSocketDriver;
  if (!(socketDrivers as readonly string[]).includes(chosen)) throw new Error(`PARLEY_TEST_SOCKET_DRIVER must be one of ${socketDrivers.join(", ")}; got ${chosen}`);
  return chosen as SocketDriver;
})();

/**
 * The store test servers keep their data in: PARLEY_TEST_STORE=cassandra runs every black-box test
 * against a real Cassandra (a keyspace per data directory); the embedded SQLite otherwise.
 */
export const testStore = (() => {
  const chosen = process.env.PARLEY_TEST_STORE || "sqlite";
  if (chosen !== "sqlite" && chosen !== "cassandra") throw new Error(`PARLEY_TEST_STORE must be sqlite or cassandra; got ${chosen}`);
  return chosen;
})();

/**
 * Where test servers keep file bytes: PARLEY_TEST_BLOBS=s3 puts them in a real S3 server (MinIO, a
 * bucket per data directory); local disk otherwise.
 */
export const testBlobs = (() => {
  const chosen = process.env.PARLEY_TEST_BLOBS || "disk";
  if (chosen !== "disk" && chosen !== "s3") throw new Error(`PARLEY_TEST_BLOBS must be disk or s3; got ${chosen}`);
  return chosen;
})();

/**
 * Where test servers keep short-lived shared state and presence: PARLEY_TEST_EPHEMERAL=redis puts
 * them in a real Redis (a key prefix per data directory); process memory otherwise.
 */
export const testEphemeral = (() => {
  const chosen = process.env.PARLEY_TEST_EPHEMERAL || "memory";
  if (chosen !== "memory" && chosen !== "redis") throw new Error(`PARLEY_TEST_EPHEMERAL must be memory or redis; got ${chosen}`);
  return chosen;
})();

/** The settings that put a server of this data directory on the test store, blob store and ephemeral state. */
export async function testStoreEnv(dataDir: string, timings?: StartupTimings): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  timings?.next("test keyspace");
  if (testStore === "cassandra") Object.assign(env, { STORE: "cassandra", CASSANDRA_CONTACT_POINTS: await testCassandra(), CASSANDRA_KEYSPACE: await testKeyspaceFor(dataDir) });
  timings?.next("test bucket");
  if (testBlobs === "s3") {
    const s3 = await testS3();
    Object.assign(env, { BLOB_STORE: "s3", S3_ENDPOINT: s3.endpoint, S3_REGION: s3.region, S3_BUCKET: await testBucketFor(dataDir), S3_ACCESS_KEY_ID: s3.accessKeyId, S3_SECRET_ACCESS_KEY: s3.secretAccessKey });
  }
  timings?.next("test Redis");
  // The prefix follows the data directory, so a restarted server finds what it left.
  if (testEphemeral === "redis") Object.assign(env, { REDIS_URL: await testRedis(), REDIS_PREFIX: `test:${basename(dataDir).replace(/[^A-Za-z0-9._-]/g, "_").slice(-24)}:` });
  return env;
}

// The backing services start cold in well over a test hook's 30 s on this machine; started once up
// front (a root hook: this module is loaded by the tests themselves), no test's hook pays for them.
if (typeof before === "function") {
  before(async function () {
    this.timeout(300_000);
    const cluster = testTopology === "cluster";
    await Promise.all([
      testStore === "cassandra" && testCassandra().then(prepareTestKeyspaces),
      testBlobs === "s3" && testS3(),
      (cluster || testEphemeral === "redis") && testRedis(),
      cluster && testKafka(),
    ]);
  });
}

/** A second handle on a test server's data, as another process would open it (the caller closes it). */
export function openServerStore(server: { config: ParleyConfig; dataDir: string }): Promise<Store> {
  return openStore(server.config.store, server.dataDir);
}

/** Every socket driver, for the tests that run on each of them whatever the default. */
export { socketDrivers };

/**
 * For files that test one process's own HTTP front (its parser, its timeouts) on `topology:
 * "single"` servers: they run in the SQLite pass only. In the cluster-shape pass they would start
 * the same single process again, on a store their requests never reach, for about 50 s of the
 * 25-minute budget; there they are pending.
 */
export function describeFrontOfOneProcess(title: string, suite: (this: Mocha.Suite) => void): void {
  // mocha's globals are read when a file declares its suites, not when this module loads: the
  // benchmark imports this module outside mocha (it crashed on a describe not defined).
  if (testTopology === "cluster") describe.skip(title, suite);
  else describe(title, suite);
}

export interface TestServer extends Parley {
  dataDir: string;
  codesFile: string;
  clock: AdjustableClock;
  config: ParleyConfig;
  /** Stops the server; the data directory stays for a restart. */
  restart(): Promise<TestServer>;
  /** Stops the server and removes its data directory. */
  dispose(): Promise<void>;
}

/**
 * The whole suite signs in from 127.0.0.1 against few servers, so ordinary tests run with the
 * limits across identities far out of reach; test/abuse-limits.test.ts sets low ones to prove them.
 */
export const generousAbuseLimits = {
  VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "100000",
  VERIFY_CODES_PER_MINUTE: "100000",
  SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "100000",
};

/** The server, counted as using its data directory (and so its test keyspace) until it stops. */
function whileRunning(parley: Parley, dataDir: string): Parley {
  serverStarted(dataDir);
  let stopped: Promise<void> | undefined;
  return {
    ...parley,
    stop() {
      stopped ??= parley.stop().finally(() => serverStopped(dataDir));
      return stopped;
    },
  };
}

/**
 * A test server's configuration: loopback on ephemeral ports (HTTP and gRPC), codes to `<dataDir>/codes.jsonl`,
 * the suite's socket driver and store, abuse limits out of reach; `env` adds or overrides.
 */
export async function testConfig(dataDir: string, env: Record<string, string> = {}, timings?: StartupTimings): Promise<ParleyConfig> {
  return loadConfig({
    HOST: "127.0.0.1",
    PORT: "0",
    GRPC_PORT: "0",
    DATA_DIR: dataDir,
    CODE_DELIVERY: `file:${join(dataDir, "codes.jsonl")}`,
    LOG_LEVEL: "warn",
    SOCKET_DRIVER: testSocketDriver,
    ...generousAbuseLimits,
    ...(await testStoreEnv(dataDir, timings)),
    ...env,
  });
}

export interface TestServerOptions extends Partial<ParleyOptions> {
  env?: Record<string, string>;
  dataDir?: string;
  /**
   * "single": one process even in a cluster-topology run, for tests of one node's own HTTP front
   * (its parser, timeouts, drain, proxy trust), which nginx stands in front of in a cluster.
   */
  topology?: "single";
}

/** Under a test hook's 30 s. */
const testServerStartLimitMs = 27_000;

export async function startTestServer(overrides: TestServerOptions = {}): Promise<TestServer> {
  const dataDir = overrides.dataDir ?? mkdtempSync(join(tmpdir(), "parley-test-"));
  const codesFile = join(dataDir, "codes.jsonl");
  const clock = (overrides.clock as AdjustableClock | undefined) ?? new AdjustableClock();
  const { env, topology, ...options } = overrides;
  let config: ParleyConfig;
  let started: Parley;
  if (testTopology === "cluster" && topology !== "single") {
    // A test hook has 30 s: a start that takes longer fails with where it was, not mocha's bare timeout.
    const preparing = new StartupTimings();
    preparing.next("Redis and Kafka names");
    const preparation = (async () => testConfig(dataDir, { ...(await clusterTestEnv(dataDir)), ...env }, preparing))();
    let limit: NodeJS.Timeout | undefined;
    const prepared = await Promise.race([preparation, new Promise<undefined>((resolve) => (limit = setTimeout(() => resolve(undefined), testServerStartLimitMs)))]);
    clearTimeout(limit);
    if (!prepared) throw new Error(`the test server was not prepared within ${testServerStartLimitMs / 1000} s: ${preparing.describe()}`);
    preparing.end();
    config = prepared;
    started = await startTestCluster(config, clock, options, { limitMs: testServerStartLimitMs - preparing.elapsedMs, preparation: preparing.describe() });
  } else {
    config = await testConfig(dataDir, env);
    started = await startParley({ ...options, config, clock });
  }
  const parley = whileRunning(started, dataDir);
  const server: TestServer = {
    ...parley,
    dataDir,
    codesFile,
    clock,
    config,
    async restart() {
      await parley.stop();
      return startTestServer({ ...overrides, dataDir, clock });
    },
    async dispose() {
      await parley.stop();
      if (config.cluster.redisUrl) await deleteTestRedisKeys(config.cluster.redisPrefix);
      if (config.cluster.kafkaBrokers) await deleteTestKafkaTopics(config.cluster.kafkaTopicPrefix);
      rmSync(dataDir, { recursive: true, force: true });
      dataDirRemoved();
    },
  };
  return server;
}

/**
 * Calls `action` once on every node serving it, as each node's own timer calls a per-node sweep
 * (one node in one process, each engine in a cluster); answers each node's answer.
 */
export async function callOnEveryNode<T>(server: Pick<Parley, "broker">, action: string, params: object = {}): Promise<T[]> {
  const endpoints = server.broker.registry.actions.get(action)?.endpoints ?? [];
  const nodeIds = [...new Set(endpoints.map((endpoint) => endpoint.node.id as string))].sort();
  if (nodeIds.length === 0) throw new Error(`no node serves ${action}`);
  const answers: T[] = [];
  for (const nodeID of nodeIds) answers.push((await server.broker.call(action, params, { nodeID })) as T);
  return answers;
}

export function client<S extends DescService>(server: { url: string }, service: S, mode: WireMode, token?: string): Client<S> {
  const interceptors: Interceptor[] = token
    ? [
        (next) => async (req) => {
          req.header.set("authorization", `Bearer ${token}`);
          return next(req);
        },
      ]
    : [];
  const transport = createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: mode === "binary", interceptors });
  return createClient(service, transport);
}

export interface DeliveredCode {
  identityType: string;
  identityValue: string;
  code: string;
  purpose: "login" | "reset";
  at: number;
}

/** The most recent code delivered to this identity for this purpose. */
export function lastCode(server: Pick<TestServer, "codesFile">, identityValue: string, purpose: "login" | "reset" = "login"): string {
  if (!existsSync(server.codesFile)) throw new Error("no code was delivered");
  const text = readFileSync(server.codesFile, "utf8");
  // A read can overlap the server's append of another code: a last line not ended yet is not read.
  const lines = text
    .slice(0, text.lastIndexOf("\n") + 1)
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as DeliveredCode);
  const found = lines.filter((l) => l.identityValue === identityValue && l.purpose === purpose).pop();
  if (!found) throw new Error(`no ${purpose} code for ${identityValue}`);
  return found.code;
}

let identityCounter = 0;
/** A fresh email identity, unique across the run so the per-identity code rate never collides. */
export function freshEmail(label = "user"): string {
  identityCounter += 1;
  return `${label}.${process.pid}.${Date.now()}.${identityCounter}@example.com`;
}

export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

export interface TwoNodes {
  edge: Parley;
  engine: Parley;
  codesFile: string;
  clock: AdjustableClock;
}

/** The API tier and the engine in two brokers joined by Moleculer's TCP transporter, on one data directory. */
export async function startTwoNodes(dataDir: string, name: string): Promise<TwoNodes> {
  const { nodes, codesFile, clock } = await startNodes(dataDir, name, { engine: ["engine", "webhooks"], edge: ["api", "gateway"] });
  return { edge: nodes.edge, engine: nodes.engine, codesFile, clock };
}

/**
 * Brokers joined by Moleculer's TCP transporter on one data directory and one clock, one per
 * entry of `roles` (node id `<name>-<key>`), started together.
 */
export async function startNodes<K extends string>(dataDir: string, name: string, roles: Record<K, Role[]>): Promise<{ nodes: Record<K, Parley>; codesFile: string; clock: AdjustableClock }> {
  const codesFile = join(dataDir, "codes.jsonl");
  const keys = Object.keys(roles) as K[];
  const ports = new Map<K, number>();
  for (const key of keys) ports.set(key, await freePort());
  const urls = keys.map((key) => `127.0.0.1:${ports.get(key)}/${name}-${key}`);
  const config = await testConfig(dataDir);
  const clock = new AdjustableClock();
  // What Redis holds for a real cluster's processes, these brokers share in this process.
  const shared = { ephemeral: new MemoryEphemeralState(clock), presence: new MemoryPresenceRegistry() };
  const started = await Promise.all(
    keys.map((key) =>
      startParley({ config, clock, adapters: shared, roles: roles[key], broker: { nodeID: `${name}-${key}`, transporter: meshTransporter(ports.get(key)!, urls) } }).then(
        (node) => whileRunning(node, dataDir),
      ),
    ),
  );
  const nodes = Object.fromEntries(keys.map((key, index) => [key, started[index]])) as Record<K, Parley>;
  return { nodes, codesFile, clock };
}
