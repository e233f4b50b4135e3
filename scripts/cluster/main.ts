// `npm run cluster`: the card's deployment on this machine. It starts the real backing services
// (`npm run services -- up cassandra kafka redis s3`), prepares them (keyspace, bucket), starts the
// Parley processes by role with their pid files under DATA_DIR/cluster/pids, a health aggregator,
// and nginx in front on HOST:PORT balancing the Connect API and /ws (and gRPC on HOST:GRPC_PORT
// over the api nodes' gRPC ports). A Parley process that exits
// without being asked is started again (as an orchestrator would). SIGTERM or SIGINT stops the
// Parley processes gracefully, then nginx, then the backing services this run started.
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { loadConfig } from "../../shared/config.js";
import { portIsOpen, stopProcess } from "../services/daemon.js";
import { clusterLayout, type ClusterNode } from "./layout.js";
import { bundleServer } from "./bundle.js";
import { prepareBackingServices, backingServices } from "./backing.js";
import { renderFrontConfig, startNginx, stopNginx } from "../services/nginx.js";

const config = loadConfig(process.env);
const layout = clusterLayout(process.env, config);
const clusterDir = join(config.dataDir, "cluster");
const pidDir = join(clusterDir, "pids");
const logDir = join(clusterDir, "logs");
mkdirSync(pidDir, { recursive: true });
mkdirSync(logDir, { recursive: true });

const log = (line: string) => console.log(`cluster: ${line}`);

/** The backing services that were not running before this run: the ones it stops. */
const startedServices: string[] = [];

async function upServices(): Promise<void> {
  for (const service of backingServices) {
    const wasRunning = await portIsOpen("127.0.0.1", service.port);
    const status = await run(["npm", "run", "--silent", "services", "--", "up", service.name], { DATA_DIR: config.dataDir });
    if (status !== 0) throw new Error(`npm run services -- up ${service.name} failed (exit ${status})`);
    if (!wasRunning) startedServices.push(service.name);
  }
  await prepareBackingServices(layout, config.cluster.kafkaTopicPrefix);
}

function run(command: string[], env: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(command[0], command.slice(1), { stdio: "inherit", env: { ...process.env, ...env } });
    child.on("error", reject);
    child.on("exit", (code) => resolve(code ?? 1));
  });
}

interface Running {
  node: ClusterNode;
  child: ChildProcess | undefined;
  /** Set once we asked it to stop: its exit is not a crash. */
  stopping: boolean;
  restarts: number;
}

const running = new Map<string, Running>();
let shuttingDown = false;

function pidFile(node: ClusterNode): string {
  return join(pidDir, `${node.name}.pid`);
}

const repositoryRoot = resolve(import.meta.dirname, "..", "..");

let serverBundle = "";

function startNode(entry: Running): void {
  const { node } = entry;
  const out = createWriteStream(join(logDir, `${node.name}.log`), { flags: "a" });
  const child = spawn(process.execPath, ["--enable-source-maps", serverBundle], { env: { ...process.env, ...node.env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  entry.child = child;
  writeFileSync(pidFile(node), `${child.pid}\n`);
  child.on("exit", (code, signal) => {
    rmSync(pidFile(node), { force: true });
    if (entry.child !== child) return;
    entry.child = undefined;
    if (entry.stopping || shuttingDown) return;
    entry.restarts += 1;
    log(`${node.name} exited (${signal ?? `code ${code}`}); starting it again (log: ${join(logDir, `${node.name}.log`)})`);
    setTimeout(() => {
      if (!shuttingDown) startNode(entry);
    }, layout.restartDelayMs).unref();
  });
}

/** Undefined when the node answers /healthz 200; else why not (its 503 body, or that it did not answer). */
async function whyUnhealthy(node: ClusterNode): Promise<string | undefined> {
  try {
    const answer = await fetch(`http://127.0.0.1:${node.port}/healthz`, { signal: AbortSignal.timeout(2_000) });
    return answer.status === 200 ? undefined : (await answer.text()).trim() || `answered ${answer.status}`;
  } catch {
    return "not answering";
  }
}

async function healthOf(node: ClusterNode): Promise<boolean> {
  return (await whyUnhealthy(node)) === undefined;
}

/**
 * /healthz of the whole cluster: 200 while it can serve sends. That takes an api node and an
 * engine that answer, and no engine that answers but cannot serve what is placed on it (kept
 * from its shards by another holder, or unable to renew its leases): a dead engine's keys move to
 * the others, so an engine that is down makes the cluster incomplete (`down`) but not unable.
 */
function startHealthAggregator(): Promise<Server> {
  const server = createServer((req, res) => {
    void Promise.all(layout.nodes.map(async (node) => [node, await whyUnhealthy(node)] as const)).then((states) => {
      const down = states.filter(([, why]) => why !== undefined).map(([node]) => node.name);
      const why = Object.fromEntries(states.filter(([, reason]) => reason !== undefined).map(([node, reason]) => [node.name, reason]));
      const answering = (role: string) => states.filter(([node, reason]) => node.role === role && reason === undefined).length > 0;
      const stuckEngines = states.filter(([node, reason]) => node.role === "engine" && reason !== undefined && reason !== "not answering");
      const canServeSends = answering("api") && answering("engine") && stuckEngines.length === 0;
      res.writeHead(canServeSends ? 200 : 503, { "content-type": "application/json" });
      res.end(JSON.stringify({ healthy: canServeSends, down, why }));
    });
  });
  return new Promise((resolve) => server.listen(layout.healthPort, "127.0.0.1", () => resolve(server)));
}

async function waitHealthy(timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const states = await Promise.all(layout.nodes.map(healthOf));
    if (states.every(Boolean)) return;
    if (Date.now() > deadline) {
      const down = layout.nodes.filter((_, i) => !states[i]).map((node) => node.name);
      throw new Error(`not ready after ${timeoutMs / 1000} s: ${down.join(", ")} (logs under ${logDir})`);
    }
    await sleep(250);
  }
}

let health: Server | undefined;

async function stopAll(): Promise<void> {
  shuttingDown = true;
  await stopNginx(layout.frontDir).catch((err: unknown) => log(`stopping nginx failed: ${String(err)}`));
  // Client-facing nodes first (their requests drain), then the engines and the webhook fleet.
  for (const roles of [["api", "gateway"], ["engine", "webhooks"]]) {
    await Promise.all(
      [...running.values()]
        .filter((entry) => roles.includes(entry.node.role))
        .map(async (entry) => {
          entry.stopping = true;
          if (entry.child?.pid) await stopProcess(entry.child.pid, config.drainTimeoutMs + 15_000);
        }),
    );
  }
  await new Promise<void>((resolve) => (health ? health.close(() => resolve()) : resolve()));
  if (startedServices.length > 0) await run(["npm", "run", "--silent", "services", "--", "down", ...startedServices.reverse()], { DATA_DIR: config.dataDir });
}

let signals = 0;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    signals += 1;
    if (signals > 1) return;
    log(`${signal}: stopping`);
    stopAll().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error("cluster: stopping failed", err);
        process.exit(1);
      },
    );
  });
}

try {
  const began = performance.now();
  serverBundle = await bundleServer(join(repositoryRoot, ".build", "main.mjs"));
  await upServices();
  for (const node of layout.nodes) {
    const entry: Running = { node, child: undefined, stopping: false, restarts: 0 };
    running.set(node.name, entry);
    // Engines first: the API and gateway nodes wait for the engine services before they serve.
    startNode(entry);
  }
  health = await startHealthAggregator();
  await waitHealthy(180_000);
  const confPath = join(layout.frontDir, "nginx.conf");
  mkdirSync(layout.frontDir, { recursive: true });
  writeFileSync(
    confPath,
    renderFrontConfig({
      listenHost: config.host,
      listenPort: config.port,
      apiUpstreams: layout.nodes.filter((node) => node.role === "api").map((node) => `127.0.0.1:${node.port}`),
      gatewayUpstreams: layout.nodes.filter((node) => node.role === "gateway").map((node) => `127.0.0.1:${node.port}`),
      healthUpstream: `127.0.0.1:${layout.healthPort}`,
      grpc:
        layout.grpcPort === undefined
          ? undefined
          : { listenPort: layout.grpcPort, upstreams: layout.nodes.filter((node) => node.role === "api").map((node) => `127.0.0.1:${node.env.GRPC_PORT}`) },
      runDir: layout.frontDir,
    }),
  );
  await startNginx(confPath, layout.frontDir);
  const seconds = ((performance.now() - began) / 1000).toFixed(1);
  const grpc = layout.grpcPort === undefined ? "" : `, gRPC on ${config.host}:${layout.grpcPort}`;
  log(`ready after ${seconds} s on http://${config.host}:${config.port}${grpc} (${layout.nodes.map((node) => node.name).join(", ")}; pids in ${pidDir}, logs in ${logDir})`);
} catch (err) {
  console.error(`cluster: ${(err as Error).message}`);
  await stopAll();
  process.exit(1);
}
