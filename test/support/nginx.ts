// nginx fronts for tests of several Parley nodes: each call starts its own front on a free port
// with its files under $TMPDIR/parley-test-services (testServicesDir), and the end of the run stops
// every front the run started and still running.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { reloadNginx, renderFrontConfig, startNginx, stopNginx } from "../../scripts/services/nginx.js";
import { freeStablePort } from "./ports.js";
import { testServicesDir } from "./cassandra.js";

export interface TestFrontUpstreams {
  /** host:port of each api node. */
  api: string[];
  /** host:port of each gateway node; the api nodes when left out. */
  gateway?: string[];
  /** host:port of the node answering /healthz; the first api node when left out. */
  health?: string;
  /** host:port of each api node's gRPC port: the front then also listens for gRPC (HTTP/2). */
  grpc?: string[];
}

export interface TestFront {
  /** http://127.0.0.1:<port> */
  url: string;
  port: number;
  /** The front's gRPC listener, when the upstreams named gRPC ports. */
  grpcPort: number | undefined;
  runDir: string;
  /** Points the running front at other nodes (SIGHUP); open WebSockets stay on their old node. */
  reload(upstreams: TestFrontUpstreams): Promise<void>;
  stop(): Promise<void>;
}

const running = new Set<string>();

export async function startTestFront(upstreams: TestFrontUpstreams): Promise<TestFront> {
  mkdirSync(testServicesDir, { recursive: true });
  const runDir = mkdtempSync(join(testServicesDir, "nginx-"));
  const configPath = join(runDir, "nginx.conf");
  const port = await freeStablePort(upstreams.grpc ? [0, 1] : [0]);
  const grpcPort = upstreams.grpc ? port + 1 : undefined;
  const write = (chosen: TestFrontUpstreams) =>
    writeFileSync(
      configPath,
      renderFrontConfig({
        listenHost: "127.0.0.1",
        listenPort: port,
        apiUpstreams: chosen.api,
        gatewayUpstreams: chosen.gateway ?? chosen.api,
        healthUpstream: chosen.health ?? chosen.api[0],
        grpc: grpcPort !== undefined && chosen.grpc ? { listenPort: grpcPort, upstreams: chosen.grpc } : undefined,
        runDir,
      }),
    );
  write(upstreams);
  running.add(runDir);
  try {
    await startNginx(configPath, runDir);
  } catch (error) {
    await stopTestFront(runDir);
    throw error;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    grpcPort,
    runDir,
    reload: async (chosen) => {
      write(chosen);
      await reloadNginx(runDir);
    },
    stop: () => stopTestFront(runDir),
  };
}

async function stopTestFront(runDir: string): Promise<void> {
  running.delete(runDir);
  await stopNginx(runDir);
  rmSync(runDir, { recursive: true, force: true });
}

export async function stopTestFronts(): Promise<void> {
  for (const runDir of [...running]) await stopTestFront(runDir);
}

// In a mocha run the end of the run stops what the run started. Registered here, by the module the
// tests themselves load: mocha loads test files through require, so a module imported by the
// runner script would be a second instance that never saw the front start.
if (typeof after === "function") after(stopTestFronts);
