// A real S3-compatible server for tests and the local cluster: MinIO, built from source with
// `go install` through the Go module proxy (there is no MinIO binary on these machines' registries).
// MinIO checks SigV4 signatures and presigned-URL expiry as AWS does, which s3rver does not.
//
// Install: `go install github.com/minio/minio@<pinned version>` once per version into
// ${XDG_CACHE_HOME:-~/.cache}/parley/s3/<version>/bin (go-install.ts). MinIO's release tags (RELEASE.2025-…) are not semantic versions, so the proxy serves
// MinIO only under pseudo-versions: the pin below is one.
// Run: one single-drive server with its objects under <dataDir>/services/s3/data (the pid file and
// log beside them), the web console off, fixed local credentials. `up` creates no bucket.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { isAlive, portIsOpen, runningPid, stopProcess, withLock, stopRecorded } from "./daemon.js";
import { installGoTool, type GoTool } from "./go-install.js";

export const minioModule = "github.com/minio/minio";
/** MinIO's master of 2026-02-12, the newest version on the Go module proxy when this was written; builds with Go ≥ 1.24. */
export const minioVersion = "v0.0.0-20260212201848-7aac2a2c5b7c";
export const s3Host = "127.0.0.1";
export const defaultS3Port = 9000;
/** MinIO answers SigV4 for any region name; the SDK needs one. */
export const s3Region = "us-east-1";
const readyTimeoutMs = 60_000;
const stopGraceMs = 15_000;

export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

/**
 * The local server's one account: `parley` / `parley-secret` unless S3_ACCESS_KEY_ID and
 * S3_SECRET_ACCESS_KEY say otherwise (the same variables the server reads, so one environment
 * serves both). MinIO wants at least 3 and 8 characters.
 */
export function s3Credentials(env: NodeJS.ProcessEnv = process.env): S3Credentials {
  const accessKeyId = env.S3_ACCESS_KEY_ID?.trim() || "parley";
  const secretAccessKey = env.S3_SECRET_ACCESS_KEY?.trim() || "parley-secret";
  if (accessKeyId.length < 3 || secretAccessKey.length < 8) throw new Error("MinIO needs an access key of at least 3 characters and a secret of at least 8");
  return { accessKeyId, secretAccessKey };
}

/** The directories of one S3 server under a data directory. */
export function s3Paths(dataDir: string) {
  const home = join(dataDir, "services", "s3");
  return {
    home,
    data: join(home, "data"),
    log: join(home, "minio.log"),
    pidFile: join(home, "s3.pid"),
    lockFile: join(home, "start.lock"),
  };
}

const minio: GoTool = {
  tool: "s3",
  packagePath: minioModule,
  version: minioVersion,
  binary: "minio",
  // CGO off as MinIO's own release builds: a static binary that needs no C toolchain.
  env: { CGO_ENABLED: "0" },
  needs: "Go ≥ 1.24 is needed to build MinIO",
};

/** Builds MinIO into the shared cache (once per version) and answers the binary's path. */
export function installS3(): Promise<string> {
  return installGoTool(minio);
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** MinIO's liveness endpoint: 200 once the S3 API serves requests, no credentials needed. */
async function answersHealth(port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://${s3Host}:${port}/minio/health/live`, { signal: AbortSignal.timeout(2_000) });
    await response.body?.cancel();
    return response.ok;
  } catch {
    return false;
  }
}

async function waitUntilReady(pid: number, port: number, paths: ReturnType<typeof s3Paths>): Promise<void> {
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (!isAlive(pid)) throw new Error(`MinIO exited during start-up; ${paths.log} ends:\n${tail(paths.log, 20)}`);
    if (await answersHealth(port)) return;
    if (Date.now() > deadline) throw new Error(`MinIO did not answer http://${s3Host}:${port}/minio/health/live within ${readyTimeoutMs / 1000} s; see ${paths.log}`);
    await sleep(100);
  }
}

/** A running S3 server: its pid, port, whether this call started it. */
export interface S3Instance {
  pid: number;
  port: number;
  started: boolean;
  endpoint: string;
}

/**
 * Builds if needed and starts MinIO on `port` with its objects under `dataDir`/services/s3,
 * resolving once it answers its health check. One already running for this data directory is
 * reused (on the port it was started with).
 */
export async function startS3(dataDir: string, options: { port?: number; env?: NodeJS.ProcessEnv } = {}): Promise<S3Instance> {
  const port = options.port ?? defaultS3Port;
  const credentials = s3Credentials(options.env);
  const paths = s3Paths(dataDir);
  mkdirSync(paths.home, { recursive: true });
  const binary = await installS3();
  return withLock(paths.lockFile, async () => {
    const running = runningPid(paths.pidFile, paths.data);
    if (running !== undefined) {
      const runningPort = Number(/--address \S+:(\d+)/.exec(readFileSync(`/proc/${running}/cmdline`, "utf8").split("\0").join(" "))?.[1] ?? port);
      await waitUntilReady(running, runningPort, paths);
      return { pid: running, port: runningPort, started: false, endpoint: `http://${s3Host}:${runningPort}` };
    }
    if (await portIsOpen(s3Host, port)) {
      throw new Error(`${s3Host}:${port} is taken by a process that was not started for ${paths.home} (another S3 server, or \`npm run services -- up s3\` with another DATA_DIR?); stop it first`);
    }
    mkdirSync(paths.data, { recursive: true });
    const output = openSync(paths.log, "a");
    const child = spawn(binary, ["server", paths.data, "--address", `${s3Host}:${port}`, "--quiet"], {
      cwd: paths.home,
      detached: true,
      stdio: ["ignore", output, output],
      env: {
        ...process.env,
        MINIO_ROOT_USER: credentials.accessKeyId,
        MINIO_ROOT_PASSWORD: credentials.secretAccessKey,
        // No console (it would take a second, random port) and no calls home for updates.
        MINIO_BROWSER: "off",
        MINIO_UPDATE: "off",
      },
    });
    closeSync(output);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${binary}`);
    child.unref();
    writeFileSync(paths.pidFile, `${pid}\n`);
    try {
      await waitUntilReady(pid, port, paths);
      return { pid, port, started: true, endpoint: `http://${s3Host}:${port}` };
    } catch (error) {
      await stopProcess(pid, stopGraceMs);
      rmSync(paths.pidFile, { force: true });
      throw error;
    }
  });
}

/** Stops the S3 server started for `dataDir` (SIGTERM, SIGKILL after 15 s); answers whether one was running. */
export async function stopS3(dataDir: string): Promise<boolean> {
  const paths = s3Paths(dataDir);
  return stopRecorded(paths.pidFile, paths.data, stopGraceMs);
}

/**
 * For tests that need S3: starts it (or reuses the one running for `dataDir`) and answers its
 * endpoint and credentials; `stop` stops it only if this call started it.
 */
export async function ensureS3(dataDir: string, options: { port?: number } = {}): Promise<{ endpoint: string; region: string; credentials: S3Credentials; stop: () => Promise<void> }> {
  const instance = await startS3(dataDir, options);
  return {
    endpoint: instance.endpoint,
    region: s3Region,
    credentials: s3Credentials(),
    stop: async () => {
      if (instance.started) await stopS3(dataDir);
    },
  };
}
