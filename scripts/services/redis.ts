// A real Redis for tests and the local cluster: Debian's redis-server package (7.0 on bookworm),
// fetched with `apt-get download` and unpacked with `dpkg -x` into the cache (debian-packages.ts),
// so nothing outside the cache changes (no system service, no user, no /etc/redis) and
// `apt-get install` is never run. The two libraries the binary needs that a Debian base lacks
// (jemalloc, lzf) are unpacked beside it and found through LD_LIBRARY_PATH; the rest (libc,
// libssl, libsystemd, libatomic) are on every Debian system.
//
// Run: everything under <dataDir>/services/redis (redis.conf, the append-only files, the log, the
// pid file). Persistence is the append-only file with fsync every second, so a restart keeps what
// was written up to a second before it; SIGTERM makes Redis flush it before it exits.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { isAlive, portIsOpen, runningPid, stopProcess, withLock, stopRecorded } from "./daemon.js";
import { unpackDebianPackages } from "./debian-packages.js";

export const redisHost = "127.0.0.1";
export const defaultRedisPort = 6379;
/** The Debian packages unpacked: the server, its tools (the binary lives there), and the libraries a base system lacks. */
const packages = ["redis-server", "redis-tools", "liblzf1", "libjemalloc2"];
const readyTimeoutMs = 30_000;
const stopGraceMs = 15_000;

export interface RedisOptions {
  port?: number;
}

/** The files of one Redis instance under a data directory. */
export function redisPaths(dataDir: string) {
  const home = join(dataDir, "services", "redis");
  return {
    home,
    config: join(home, "redis.conf"),
    data: join(home, "data"),
    log: join(home, "redis.log"),
    pidFile: join(home, "redis.pid"),
    lockFile: join(home, "start.lock"),
  };
}

/** The server binary and the library directory it needs, unpacked once into the cache. */
export interface RedisInstall {
  version: string;
  server: string;
  libraryPath: string;
}

/**
 * Unpacks Redis into the shared cache once (debian-packages.ts) and answers it. The folder and the
 * package list are the transporter benchmark's too (scripts/bench/transporters.ts), so both use one copy.
 */
export function installRedis(): RedisInstall {
  const unpacked = unpackDebianPackages("redis-server", packages);
  // Shown without its epoch ("5:" or, from a cached folder name, "5_").
  return { version: unpacked.version.replace(/^\d+[:_]/, ""), server: join(unpacked.root, "usr", "bin", "redis-server"), libraryPath: unpacked.libraryPath };
}

function redisConf(paths: ReturnType<typeof redisPaths>, port: number): string {
  return `# Written by scripts/services/redis.ts at every start; edits are overwritten.
bind ${redisHost}
port ${port}
protected-mode yes
daemonize no
supervised no
# Keeps the command line (with this file's path) in /proc, which is how the pid file is checked.
set-proc-title no
dir ${paths.data}
logfile ${paths.log}
loglevel notice
appendonly yes
appendfsync everysec
appenddirname appendonly
save ""
databases 16
`;
}

/** The port a config written by redisConf listens on. */
function configuredPort(config: string): number | undefined {
  try {
    const port = /^port (\d+)$/m.exec(readFileSync(config, "utf8"))?.[1];
    return port === undefined ? undefined : Number(port);
  } catch {
    return undefined;
  }
}

/** Sends PING and resolves with the first line answered ("+PONG", or "-LOADING …" while the append-only file is read). */
export function pingRedis(host: string, port: number, timeoutMs = 1_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let received = "";
    const finish = (error: Error | undefined, line?: string) => {
      socket.destroy();
      if (error) reject(error);
      else resolve(line as string);
    };
    socket.setTimeout(timeoutMs, () => finish(new Error(`no answer to PING from ${host}:${port} within ${timeoutMs} ms`)));
    socket.on("error", (error) => finish(error));
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk) => {
      received += chunk.toString("utf8");
      const end = received.indexOf("\r\n");
      if (end >= 0) finish(undefined, received.slice(0, end));
    });
    socket.on("end", () => finish(new Error(`${host}:${port} closed the connection before answering PING`)));
  });
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

async function waitUntilReady(pid: number, port: number, paths: ReturnType<typeof redisPaths>): Promise<void> {
  const deadline = Date.now() + readyTimeoutMs;
  let last: string;
  for (;;) {
    if (!isAlive(pid)) throw new Error(`Redis exited during start-up; ${paths.log} ends:\n${tail(paths.log, 20)}`);
    try {
      last = await pingRedis(redisHost, port);
      if (last === "+PONG") return;
    } catch (error) {
      last = (error as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`Redis did not answer PING on ${redisHost}:${port} within ${readyTimeoutMs / 1000} s (last: ${last}); see ${paths.log}`);
    await sleep(50);
  }
}

/** A running Redis: its pid, port, whether this call started it, and the package version. */
export interface RedisInstance {
  pid: number;
  port: number;
  started: boolean;
  version: string;
}

/**
 * Installs if needed and starts Redis with its data under `dataDir`/services/redis, resolving once
 * it answers PING. One already running for this data directory is reused (on another port: an error).
 */
export async function startRedis(dataDir: string, options: RedisOptions = {}): Promise<RedisInstance> {
  const port = options.port ?? defaultRedisPort;
  const paths = redisPaths(dataDir);
  mkdirSync(paths.home, { recursive: true });
  return withLock(paths.lockFile, async () => {
    const install = installRedis();
    const running = runningPid(paths.pidFile, paths.config);
    if (running !== undefined) {
      const runningPort = configuredPort(paths.config);
      if (runningPort !== port) throw new Error(`the Redis of ${paths.home} already runs on port ${runningPort}, not ${port}; stop it first`);
      await waitUntilReady(running, port, paths);
      return { pid: running, port, started: false, version: install.version };
    }
    if (await portIsOpen(redisHost, port)) {
      throw new Error(`${redisHost}:${port} is taken by a process that was not started for ${paths.home} (another Redis, or \`npm run services -- up\` with another DATA_DIR?); stop it or choose another port`);
    }
    mkdirSync(paths.data, { recursive: true });
    writeFileSync(paths.config, redisConf(paths, port));
    const output = openSync(paths.log, "a");
    const child = spawn(install.server, [paths.config], {
      cwd: paths.home,
      detached: true,
      stdio: ["ignore", output, output],
      env: { ...process.env, LD_LIBRARY_PATH: install.libraryPath },
    });
    closeSync(output);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${install.server}`);
    child.unref();
    writeFileSync(paths.pidFile, `${pid}\n`);
    try {
      await waitUntilReady(pid, port, paths);
      return { pid, port, started: true, version: install.version };
    } catch (error) {
      await stopProcess(pid, stopGraceMs);
      rmSync(paths.pidFile, { force: true });
      throw error;
    }
  });
}

/** Stops the Redis started for `dataDir` (SIGTERM: Redis flushes its append-only file and exits); answers whether one was running. */
export async function stopRedis(dataDir: string): Promise<boolean> {
  const paths = redisPaths(dataDir);
  return stopRecorded(paths.pidFile, paths.config, stopGraceMs);
}

/**
 * Stops the Redis of `dataDir` and starts it again on the same port and data, after `downMs` (fault
 * tests: clients see the connection drop, and for downMs nothing answers).
 */
export async function restartRedis(dataDir: string, options: RedisOptions & { downMs?: number } = {}): Promise<RedisInstance> {
  await stopRedis(dataDir);
  if (options.downMs) await sleep(options.downMs);
  return startRedis(dataDir, options);
}

/** The redis:// URL of a Redis on this machine. */
export const redisUrl = (port: number, db = 0) => `redis://${redisHost}:${port}/${db}`;

/**
 * For tests that need Redis: starts it (or reuses the one running for `dataDir`) and answers its
 * URL; `stop` stops it only if this call started it.
 */
export async function ensureRedis(dataDir: string, options: RedisOptions = {}): Promise<{ url: string; port: number; stop: () => Promise<void> }> {
  const instance = await startRedis(dataDir, options);
  return {
    url: redisUrl(instance.port),
    port: instance.port,
    stop: async () => {
      if (instance.started) await stopRedis(dataDir);
    },
  };
}
