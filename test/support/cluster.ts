// The local cluster under test: `npm run cluster` started once for the run, its data (and its
// backing services' data, on their usual ports) under $TMPDIR/parley-test-services/cluster so a
// second run starts warm, reached only through its nginx front, and stopped at the end of the run. PARLEY_TEST_CLUSTER_URL (with
// PARLEY_TEST_CLUSTER_DIR, the cluster's DATA_DIR) points the tests at a cluster already running.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { testKeyspace, testServicesDir } from "./cassandra.js";
import { freeStablePort } from "./ports.js";

export interface TestCluster {
  /** The front, e.g. http://127.0.0.1:8090. */
  url: string;
  /** The cluster's DATA_DIR (pid files under cluster/pids). */
  dataDir: string;
  codesFile: string;
  /** Where its engines keep their data: Cassandra on its usual local port, this keyspace. */
  cassandra: { contactPoint: string; keyspace: string };
}

const root = resolve(import.meta.dirname, "../..");
let running: Promise<{ cluster: TestCluster; child?: ChildProcess }> | undefined;

async function start(): Promise<{ cluster: TestCluster; child?: ChildProcess }> {
  const existing = process.env.PARLEY_TEST_CLUSTER_URL;
  if (existing) {
    const dataDir = process.env.PARLEY_TEST_CLUSTER_DIR ?? "";
    const cassandra = { contactPoint: process.env.CASSANDRA_CONTACT_POINTS || "127.0.0.1:9042", keyspace: process.env.CASSANDRA_KEYSPACE || "parley" };
    return { cluster: { url: existing, dataDir, codesFile: join(dataDir, "codes.jsonl"), cassandra } };
  }
  const port = await freeStablePort();
  const dataDir = join(testServicesDir, "cluster");
  const codesFile = join(dataDir, `cluster-codes-${process.pid}.jsonl`);
  const keyspace = testKeyspace("cluster");
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/cluster/main.ts"], {
    cwd: root,
    env: {
      ...process.env,
      DATA_DIR: dataDir,
      HOST: "127.0.0.1",
      PORT: String(port),
      CODE_DELIVERY: `file:${codesFile}`,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      CASSANDRA_KEYSPACE: keyspace,
      CLUSTER_BASE_PORT: String(await freeBasePort()),
      GRPC_PORT: String(await freeStablePort()),
      // Limits a load test would trip over, out of reach as for every test server.
      VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "0",
      VERIFY_CODES_PER_MINUTE: "0",
      SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "0",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const deadline = Date.now() + 240_000;
  while (!/cluster: ready after/.test(output)) {
    if (child.exitCode !== null) throw new Error(`npm run cluster exited (${child.exitCode}):\n${output}`);
    if (Date.now() > deadline) {
      child.kill("SIGTERM");
      throw new Error(`npm run cluster was not ready in time:\n${output}`);
    }
    await sleep(200);
  }
  return { cluster: { url: `http://127.0.0.1:${port}`, dataDir, codesFile, cassandra: { contactPoint: "127.0.0.1:9042", keyspace } }, child };
}

/** The cluster's node ports (base +1..+16), their bus ports (+1001..+1016) and the api nodes' gRPC ports (+2001..+2016), all free. */
const freeBasePort = () => freeStablePort(Array.from({ length: 16 }, (_, i) => [1 + i, 1001 + i, 2001 + i]).flat());

export async function testCluster(): Promise<TestCluster> {
  running ??= start();
  return (await running).cluster;
}

/** Stops the cluster this run started (SIGTERM: every process, nginx and the services it started). */
export async function releaseTestCluster(): Promise<void> {
  const instance = running;
  running = undefined;
  const child = instance && (await instance.catch(() => undefined))?.child;
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

// Stopped by the module the tests load (see test/support/cassandra.ts for why).
if (typeof after === "function") after(releaseTestCluster);

/** The pid of a cluster process, e.g. "engine-1". */
export function clusterPid(cluster: TestCluster, node: string): number {
  return Number.parseInt(readFileSync(join(cluster.dataDir, "cluster", "pids", `${node}.pid`), "utf8"), 10);
}
