// The cluster topology for black-box tests (PARLEY_TEST_TOPOLOGY=cluster): a test server is the
// local cluster's shape, 2 api, 2 engine, 2 gateway and 1 webhooks node, each its own Moleculer
// broker joined to the others by the static TCP mesh, on the real backing services (the store and
// blob store the suite names, presence in Redis, the webhook fleet on Kafka), behind an nginx front
// that balances the API and /ws exactly as `npm run cluster` does. The nodes run inside the test
// process so that the tests keep moving one engine clock; that is also why the short-lived
// ephemeral state (rate limits, lockouts, verification sessions) is one memory instance shared by
// the nodes: Redis's expiry cannot follow a moved clock (the Redis driver passes the same
// conformance suite, and the cluster tests run it for real).
import { basename } from "node:path";
import { AdjustableClock } from "../../shared/clock.js";
import { MemoryEphemeralState } from "../../ports/ephemeral/memory-ephemeral-state.js";
import { meshTransporter } from "../../moleculer.config.js";
import { startParley, type Parley, type ParleyOptions, type Role } from "../../server.js";
import { StartupTimings } from "../../startup-timings.js";
import type { ParleyConfig } from "../../shared/config.js";
import { testKafka } from "./kafka.js";
import { startTestFront } from "./nginx.js";
import { freeStablePort } from "./ports.js";
import { testRedis } from "./redis.js";

/** What a test server is: the cluster's shape with PARLEY_TEST_TOPOLOGY=cluster, one process otherwise. */
export const testTopology = (() => {
  const chosen = process.env.PARLEY_TEST_TOPOLOGY || "single";
  if (chosen !== "single" && chosen !== "cluster") throw new Error(`PARLEY_TEST_TOPOLOGY must be single or cluster; got ${chosen}`);
  return chosen;
})();

/** The local cluster's processes by node name, as scripts/cluster/layout.ts starts them. */
export const clusterTopology: Record<string, Role[]> = {
  api1: ["api"],
  api2: ["api"],
  engine1: ["engine"],
  engine2: ["engine"],
  gateway1: ["gateway"],
  gateway2: ["gateway"],
  webhooks1: ["webhooks"],
};

export interface TestCluster extends Parley {
  /** The nodes by name: a test that must reach one node (or stop it) finds it here. */
  nodes: Record<string, Parley>;
}

/** What a cluster's nodes share beyond the store: the names follow the data directory, so a restarted cluster finds what it left. */
export async function clusterTestEnv(dataDir: string): Promise<Record<string, string>> {
  const name = basename(dataDir).replace(/[^A-Za-z0-9._-]/g, "_").slice(-24);
  return {
    REDIS_URL: await testRedis(),
    REDIS_PREFIX: `test:${name}:`,
    KAFKA_BROKERS: await testKafka(),
    KAFKA_TOPIC_PREFIX: `t.${name}.`,
    // nginx in front forwards the client's address; the nodes believe it only from loopback.
    TRUSTED_PROXIES: "127.0.0.1",
  };
}

/**
 * Starts the topology on `config` (every node shares it but for its roles, its node id and an
 * ephemeral HTTP port) and the front; `stop` stops the front, then the nodes.
 */
/**
 * `limit`: how long the nodes may take to start, so that a start that hangs fails with where each
 * node is (and what came before it, `preparation`) rather than with a test hook's bare timeout.
 */
export async function startTestCluster(
  config: ParleyConfig,
  clock: AdjustableClock,
  options: Partial<ParleyOptions>,
  limit: { limitMs: number; preparation: string } = { limitMs: 25_000, preparation: "" },
): Promise<TestCluster> {
  const names = Object.keys(clusterTopology);
  const meshBase = await freeStablePort(names.map((_, index) => index));
  const nodeId = (name: string) => `${basename(config.dataDir)}-${name}`;
  const mesh = names.map((name, index) => `127.0.0.1:${meshBase + index}/${nodeId(name)}`);
  const ephemeral = options.adapters?.ephemeral ?? new MemoryEphemeralState(clock);
  const timings = names.map(() => new StartupTimings());
  const starting = Promise.allSettled(
    names.map((name, index) =>
      startParley({
        ...options,
        config,
        clock,
        roles: clusterTopology[name],
        adapters: { ...options.adapters, ephemeral },
        broker: { nodeID: nodeId(name), transporter: meshTransporter(meshBase + index, mesh) },
        startupTimings: timings[index],
      }),
    ),
  );
  let timer: NodeJS.Timeout | undefined;
  const starts = await Promise.race([starting, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), Math.max(limit.limitMs, 1_000))))]);
  clearTimeout(timer);
  if (!starts) {
    const where = names.map((name, index) => `${name} ${timings[index].describe()}`).join("\n  ");
    // The nodes still starting would otherwise run on, unowned, through the rest of the run.
    void starting.then((late) => Promise.all(late.map((start) => (start.status === "fulfilled" ? start.value.stop() : undefined))));
    const before = limit.preparation ? ` (its preparation ${limit.preparation})` : "";
    throw new Error(`the cluster's nodes did not all start within ${(limit.limitMs / 1000).toFixed(1)} s${before}:\n  ${where}`);
  }
  const failure = starts.find((start): start is PromiseRejectedResult => start.status === "rejected");
  if (failure) {
    // The nodes that did start would otherwise outlive the failed test server.
    await Promise.all(starts.map((start) => (start.status === "fulfilled" ? start.value.stop() : undefined)));
    throw failure.reason;
  }
  const started = starts.map((start) => (start as PromiseFulfilledResult<Parley>).value);
  // Each node started only once it heard from every other (settleWithMesh), so the whole is ready.
  const nodes = Object.fromEntries(names.map((name, index) => [name, started[index]]));
  const hostPort = (node: Parley) => `127.0.0.1:${node.port}`;
  const withRole = (role: Role) => names.filter((name) => clusterTopology[name].includes(role)).map((name) => hostPort(nodes[name]));
  const grpcPorts = names.flatMap((name) => (nodes[name].grpcPort === undefined ? [] : [`127.0.0.1:${nodes[name].grpcPort}`]));
  const front = await startTestFront({ api: withRole("api"), gateway: withRole("gateway"), health: hostPort(nodes.api1), grpc: grpcPorts.length > 0 ? grpcPorts : undefined }).catch(async (error: unknown) => {
    await Promise.all(started.map((node) => node.stop()));
    throw error;
  });
  let stopping: Promise<void> | undefined;
  return {
    nodes,
    // Calls a test makes on the bus are routed from an api node, as a request would be.
    broker: nodes.api1.broker,
    port: front.port,
    url: front.url,
    grpcPort: front.grpcPort,
    stop() {
      stopping ??= (async () => {
        await front.stop();
        // The edge first, so nothing new reaches the engines while they hand their leases back.
        const stopRole = (role: Role) => Promise.all(names.filter((name) => clusterTopology[name].includes(role)).map((name) => nodes[name].stop()));
        await stopRole("api");
        await stopRole("gateway");
        await stopRole("webhooks");
        await stopRole("engine");
      })();
      return stopping;
    },
  };
}
