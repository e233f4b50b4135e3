// nginx as the front of a Parley cluster: one address for clients, the Connect API and media
// downloads balanced over the api nodes, /ws over the gateway nodes, /healthz to one chosen node;
// optionally a second, HTTP/2 listener passing gRPC to the api nodes' gRPC ports (GRPC_PORT).
//
// Install: Debian's own nginx (bookworm: 1.22.1) unpacked into the cache by debian-packages.ts;
// nothing system-wide changes. Its compiled-in paths (/etc/nginx, /var/lib/nginx, /var/log/nginx)
// are all overridden: the config written here names every path under the run directory, and the
// binary is started with -p <runDir> -e <runDir>/error.log so even its first log line stays there.
// Run: in the foreground of a detached process (`daemon off`), so the pid we spawn is the master's
// and a failed start is seen as that process exiting; nginx writes the same pid to runDir/nginx.pid.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { maxRequestBytes } from "../../api/api-service.js";
import { connectErrorOf, errorBodyJson } from "../../api/errors.js";
import { grpcStatusHeaders } from "../../api/grpc-status.js";
import { Errors } from "../../shared/errors.js";
import { maxHeaderBytes } from "../../shared/http-limits.js";
import { isAlive, portIsOpen, runningPid, stopProcess, withLock } from "./daemon.js";
import { unpackDebianPackages } from "./debian-packages.js";

const readyTimeoutMs = 15_000;
const stopGraceMs = 10_000;

/**
 * The gateway closes a socket after 90 s without a client frame (clients ping every 30 s), so a
 * read timeout above that leaves closing to the gateway, which knows the protocol; short enough
 * that a socket to an upstream that vanished without a FIN is released in minutes.
 */
const webSocketIdleSeconds = 300;

/**
 * Idle keep-alive connections to the upstreams are dropped by nginx before the upstream drops them
 * (uWS closes a connection idle for ~10 s, node:http after 65 s): a request written into a
 * connection the upstream is closing fails, and a POST is not retried elsewhere (see below).
 */
const upstreamKeepaliveSeconds = 4;

export interface FrontOptions {
  listenHost: string;
  listenPort: number;
  /** host:port of each api node. */
  apiUpstreams: string[];
  /** host:port of each gateway node. */
  gatewayUpstreams: string[];
  /** host:port of the node whose /healthz the front answers with. */
  healthUpstream: string;
  /** A listener for gRPC on `listenHost`, balanced over the api nodes' gRPC ports; none when left out. */
  grpc?: { listenPort: number; upstreams: string[] };
  /** Where the pid file, the logs and the temporary files go. */
  runDir: string;
}

export function nginxPaths(runDir: string) {
  return {
    runDir,
    config: join(runDir, "nginx.conf"),
    pidFile: join(runDir, "nginx.pid"),
    errorLog: join(runDir, "error.log"),
    accessLog: join(runDir, "access.log"),
    stdoutLog: join(runDir, "stdout.log"),
    lockFile: join(runDir, "start.lock"),
    temp: join(runDir, "temp"),
  };
}

function serverLines(upstreams: string[]): string {
  if (upstreams.length === 0) throw new Error("an upstream group needs at least one host:port");
  for (const upstream of upstreams) {
    if (!/^[\w.-]+:\d{1,5}$|^\[[\da-fA-F:.]+\]:\d{1,5}$/.test(upstream)) throw new Error(`upstream ${JSON.stringify(upstream)} is not host:port`);
  }
  // One refused connection takes a node out for 5 s (open-source nginx has no active health
  // checks): requests go to the others meanwhile, and a restarted node is back within 5 s.
  return upstreams.map((upstream) => `    server ${upstream} max_fails=1 fail_timeout=5s;`).join("\n");
}

/** `text` inside single quotes in nginx's configuration, where `$` would start a variable. */
function nginxString(text: string): string {
  if (/[$'\\\n]/.test(text)) throw new Error(`not representable in an nginx string: ${text}`);
  return text;
}

/** `host:port` for nginx's listen directive. */
function listenOn(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * The gRPC listener: cleartext HTTP/2 with prior knowledge (nginx 1.22 serves no HTTP/1.1 on such
 * a listener, so gRPC-Web over HTTP/1.1 stays on the main listener), passed over HTTP/2 to the api
 * nodes' gRPC ports. The Host passed on names the front's main listener, so the URLs an api node
 * hands out (downloads, wsUrl) lead back here rather than to the gRPC port or the node.
 */
function grpcServerBlock(options: FrontOptions, grpc: NonNullable<FrontOptions["grpc"]>): string {
  // nginx's own refusal of an oversized body, in the form a gRPC client reads: the status and the
  // ErrorDetail an api node gives (a trailers-only answer; gRPC clients read grpc-status over 204).
  const tooLarge = grpcStatusHeaders(connectErrorOf(Errors.requestTooLarge));
  return `
  upstream parley_grpc {
    zone parley_grpc 64k;
    least_conn;
${serverLines(grpc.upstreams)}
    keepalive 64;
    # Below the api node's 65 s idle close of an HTTP/2 connection.
    keepalive_timeout 30s;
  }

  server {
    listen ${listenOn(options.listenHost, grpc.listenPort)} http2;

    grpc_set_header Host $host:${options.listenPort};
    grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    grpc_connect_timeout 2s;
    grpc_read_timeout 60s;
    grpc_send_timeout 60s;
    # As for the Connect API: a call is retried on another node only if it was never sent.
    grpc_next_upstream error timeout;
    grpc_next_upstream_tries 2;
    grpc_next_upstream_timeout 10s;

    error_page 413 = @grpc_request_too_large;
    location @grpc_request_too_large {
      default_type application/grpc;
      add_header grpc-status ${nginxString(tooLarge.get("grpc-status") ?? "")} always;
      add_header grpc-message '${nginxString(tooLarge.get("grpc-message") ?? "")}' always;
      add_header grpc-status-details-bin '${nginxString(tooLarge.get("grpc-status-details-bin") ?? "")}' always;
      return 204;
    }

    location / {
      grpc_pass grpc://parley_grpc;
    }
  }
`;
}

/** A complete nginx.conf for a front with these upstreams; it reads nothing outside `runDir`. */
export function renderFrontConfig(options: FrontOptions): string {
  const paths = nginxPaths(options.runDir);
  // nginx started by root switches its workers to `nobody`, who cannot enter a run directory
  // private to the caller (mkdtemp makes them 0700): the workers stay the caller's user.
  const user = process.getuid?.() === 0 ? `user ${userInfo().username};\n` : "";
  const listen = listenOn(options.listenHost, options.listenPort);
  return `# Written by scripts/services/nginx.ts; edits are overwritten.
${user}daemon off;
worker_processes auto;
# A proxied WebSocket holds two connections (client and gateway). The hard limit on open files
# here is 20,000 per process: each worker takes 18,000 connections, about 9,000 WebSockets.
worker_rlimit_nofile 19000;
pid ${paths.pidFile};
error_log ${paths.errorLog} warn;

events {
  worker_connections 18000;
}

http {
  default_type application/octet-stream;
  log_format front '$remote_addr "$request" $status $body_bytes_sent upstream=$upstream_addr $upstream_status $request_time';
  access_log ${paths.accessLog} front;
  client_body_temp_path ${join(paths.temp, "body")};
  proxy_temp_path ${join(paths.temp, "proxy")};
  fastcgi_temp_path ${join(paths.temp, "fastcgi")};
  uwsgi_temp_path ${join(paths.temp, "uwsgi")};
  scgi_temp_path ${join(paths.temp, "scgi")};
  server_tokens off;
  # The API's own limit (UploadFile: 5 MB as base64 in JSON is about 7 MB): a body over it is
  # refused here, with the api nodes' answer (error_page 413 below), and never crosses to a node.
  # nginx reads past the rest of a refused body, so a client still sending reads the answer. Bodies
  # are buffered whole (to a temp file past 1 MiB) before an upstream is chosen, so a slow client
  # never holds an api node's socket.
  client_max_body_size ${maxRequestBytes};
  client_body_buffer_size 1m;
  # The request head: a line up to the API's head limit, and all of the head about as much (a line
  # that outgrows the first 1 KiB buffer moves to the one large buffer, and the rest must fit
  # there). Past that nginx answers as an api node does (error_page 414 494 below); a head it lets
  # through that an api node counts over its limit gets the node's own 431, with the same body.
  client_header_buffer_size 1k;
  large_client_header_buffers 1 ${maxHeaderBytes / 1024}k;

  # "Connection: upgrade" only for an upgrade request; otherwise empty, which keeps the upstream
  # connection alive for the next request.
  map $http_upgrade $connection_upgrade {
    default upgrade;
    '' '';
  }

  # least_conn: a slow RPC (an upload, a long query) does not get more requests queued behind it.
  # zone: every worker shares the counts and the failure marks.
  upstream parley_api {
    zone parley_api 64k;
    least_conn;
${serverLines(options.apiUpstreams)}
    keepalive 64;
    keepalive_timeout ${upstreamKeepaliveSeconds}s;
  }

  # least_conn spreads long-lived sockets by how many each gateway holds now.
  upstream parley_gateway {
    zone parley_gateway 64k;
    least_conn;
${serverLines(options.gatewayUpstreams)}
  }

  upstream parley_health {
${serverLines([options.healthUpstream])}
  }

  server {
    listen ${listen};

    # Headers are set here only: a location that set any would inherit none of these.
    proxy_http_version 1.1;
    proxy_set_header Host $http_host;
    # Appends the client's address; Parley believes it only from TRUSTED_PROXIES.
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $connection_upgrade;
    proxy_connect_timeout 2s;
    # Passive failover. nginx retries on another node only what it may: a request that failed to
    # connect (never sent), and one that failed after being sent only if its method is idempotent.
    # Connect unary calls are POSTs and many change state (SendMessage), so "non_idempotent" is
    # left out: a POST that reached a node which then died is answered 502, never applied twice.
    proxy_next_upstream error timeout;
    proxy_next_upstream_tries 2;
    proxy_next_upstream_timeout 10s;

    # A body over the limit is refused here, before an api node sees it, with the answer an api
    # node gives (Connect's resource_exhausted and its ErrorDetail), not nginx's HTML page.
    error_page 413 = @request_too_large;
    location @request_too_large {
      default_type application/json;
      return 429 '${nginxString(errorBodyJson(Errors.requestTooLarge))}';
    }

    # A request line or header too large (414, and 494, which nginx answers as 400 "Request Header
    # Or Cookie Too Large"): the 431 and body an api node gives a head over its limit ("=431", or
    # nginx keeps 494's 400). nginx then reads past what the client still sends before it closes
    # (lingering close), so the client reads the answer.
    error_page 414 494 =431 /.parley-head-too-large;
    location = /.parley-head-too-large {
      internal;
      default_type application/json;
      return 431 '${nginxString(errorBodyJson(Errors.requestHeadersTooLarge))}';
    }

    # nginx's own answers when no api node answered: 502 (none could be reached, or the one sent
    # the request died; a POST is not retried, see above) and 504 (no answer within
    # proxy_read_timeout). Clients read them as Connect errors: unavailable (503) and
    # deadline_exceeded (504), each saying the call may or may not have taken effect.
    error_page 502 = @upstream_failed;
    location @upstream_failed {
      default_type application/json;
      return 503 '${nginxString(errorBodyJson(Errors.unavailable, { reason: "UPSTREAM_FAILED" }, "no Parley node answered this request; it may or may not have taken effect"))}';
    }
    error_page 504 = @upstream_timed_out;
    location @upstream_timed_out {
      default_type application/json;
      return 504 '${nginxString(errorBodyJson(Errors.deadlineExceeded, { reason: "UPSTREAM_TIMEOUT" }, "no Parley node answered this request in time; it may or may not have taken effect"))}';
    }

    # A request nginx itself refuses as malformed (a path that climbs above the root, such as
    # /media/..%2F..%2Fx) gets an error body clients read like an api node's, not nginx's HTML page.
    # An api node's own 400 passes through unchanged (proxy_intercept_errors is off).
    # (A URI, not a named location: nginx has no URI to hand a named one when the URI is the fault.)
    error_page 400 /.parley-bad-request;
    location = /.parley-bad-request {
      internal;
      default_type application/json;
      return 400 '${nginxString(errorBodyJson(Errors.invalidArgument, {}, "the front refused a malformed request"))}';
    }

    location = /healthz {
      proxy_pass http://parley_health;
    }

    location = /ws {
      proxy_pass http://parley_gateway;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout ${webSocketIdleSeconds}s;
      proxy_send_timeout ${webSocketIdleSeconds}s;
    }

    # The Connect API (POST /api.v1.<Service>/<Method>), media downloads and everything else.
    location / {
      proxy_pass http://parley_api;
      proxy_read_timeout 60s;
    }
  }
${options.grpc ? grpcServerBlock(options, options.grpc) : ""}}
`;
}

/** The nginx binary, unpacked from Debian's packages on first use. */
export function installNginx(): { binary: string; version: string } {
  const packages = unpackDebianPackages("nginx", ["nginx", "nginx-common"]);
  return { binary: join(packages.root, "usr", "sbin", "nginx"), version: packages.version };
}

function nginxArguments(paths: ReturnType<typeof nginxPaths>, configPath: string): string[] {
  return ["-p", `${paths.runDir}/`, "-e", paths.errorLog, "-c", configPath];
}

/** Refuses a config nginx would not load, with nginx's own words. */
function testConfig(binary: string, paths: ReturnType<typeof nginxPaths>, configPath: string): void {
  const result = spawnSync(binary, ["-t", "-q", ...nginxArguments(paths, configPath)], { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
  if (result.status !== 0) throw new Error(`nginx refuses ${configPath}:\n${`${result.stdout}${result.stderr}`.trim()}`);
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** The listen address of a config written by renderFrontConfig. */
function listenAddress(configPath: string): { host: string; port: number } {
  const match = /^\s*listen (\[[^\]]+\]|[^:\s]+):(\d+);/m.exec(readFileSync(configPath, "utf8"));
  if (!match) throw new Error(`${configPath} has no "listen host:port;" line`);
  return { host: match[1].replace(/^\[|\]$/g, ""), port: Number(match[2]) };
}

/** Pids of the processes whose parent is `pid` (nginx's workers). */
export function childPids(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The command name in field 2 may hold spaces; the parent pid follows its closing parenthesis.
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) children.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return children;
}

async function waitUntilListening(pid: number, configPath: string, paths: ReturnType<typeof nginxPaths>): Promise<void> {
  const { host, port } = listenAddress(configPath);
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (!isAlive(pid)) throw new Error(`nginx exited during start-up; ${paths.errorLog} ends:\n${tail(paths.errorLog, 20)}\n${tail(paths.stdoutLog, 5)}`);
    if (childPids(pid).length > 0 && (await portIsOpen(host, port))) return;
    if (Date.now() > deadline) throw new Error(`nginx did not accept connections on ${host}:${port} within ${readyTimeoutMs / 1000} s; see ${paths.errorLog}`);
    await sleep(50);
  }
}

/** A running front: its master's pid, whether this call started it, and the nginx version. */
export interface NginxInstance {
  pid: number;
  started: boolean;
  version: string;
}

/**
 * Installs nginx if needed and starts it on `configPath` with everything under `runDir`, resolving
 * once its port accepts connections. One already running for this run directory is reused.
 */
export async function startNginx(configPath: string, runDir: string): Promise<NginxInstance> {
  const paths = nginxPaths(runDir);
  mkdirSync(runDir, { recursive: true });
  return withLock(paths.lockFile, async () => {
    const { binary, version } = installNginx();
    const running = runningPid(paths.pidFile, configPath);
    if (running !== undefined) return { pid: running, started: false, version };
    for (const kind of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(paths.temp, kind), { recursive: true });
    testConfig(binary, paths, configPath);
    const output = openSync(paths.stdoutLog, "a");
    const child = spawn(binary, nginxArguments(paths, configPath), { cwd: runDir, detached: true, stdio: ["ignore", output, output] });
    closeSync(output);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${binary}`);
    child.unref();
    // nginx writes the same pid once it runs; written here too so a stop racing the start finds it.
    writeFileSync(paths.pidFile, `${pid}\n`);
    try {
      await waitUntilListening(pid, configPath, paths);
      return { pid, started: true, version };
    } catch (error) {
      await stopProcess(pid, stopGraceMs);
      rmSync(paths.pidFile, { force: true });
      throw error;
    }
  });
}

/** The config path of the front running for `runDir`, read from its command line. */
function runningFront(runDir: string): { pid: number; configPath: string } | undefined {
  const paths = nginxPaths(runDir);
  const pid = runningPid(paths.pidFile, paths.runDir);
  if (pid === undefined) return undefined;
  // nginx rewrites its command line to "nginx: master process <argv joined by spaces>".
  const commandLine = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  const configPath = / -c (\S+)/.exec(commandLine)?.[1];
  if (configPath === undefined) throw new Error(`process ${pid} of ${runDir} shows no -c in its command line: ${commandLine}`);
  return { pid, configPath };
}

/** Stops the front running for `runDir` (fast shutdown: SIGTERM, SIGKILL after 10 s) and its workers; answers whether one ran. */
export async function stopNginx(runDir: string): Promise<boolean> {
  const front = runningFront(runDir);
  if (front === undefined) return false;
  const workers = childPids(front.pid);
  await stopProcess(front.pid, stopGraceMs);
  // The master waits for its workers before it exits; one left behind by a SIGKILL is ended here.
  for (const worker of workers.filter(isAlive)) await stopProcess(worker, stopGraceMs);
  rmSync(nginxPaths(runDir).pidFile, { force: true });
  return true;
}

function shuttingDown(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("shutting down");
  } catch {
    return true;
  }
}

/**
 * Makes the front running for `runDir` load its config again (after the upstream lists changed):
 * the file is checked first, then SIGHUP; resolves once new workers run on it. Connections the old
 * workers hold (WebSockets among them) are finished by them, not cut.
 */
export async function reloadNginx(runDir: string): Promise<void> {
  const paths = nginxPaths(runDir);
  const front = runningFront(runDir);
  if (front === undefined) throw new Error(`no nginx is running for ${runDir}`);
  testConfig(installNginx().binary, paths, front.configPath);
  const before = new Set(childPids(front.pid));
  process.kill(front.pid, "SIGHUP");
  const deadline = Date.now() + readyTimeoutMs;
  // Done when new workers run and every old one has closed its listening socket: an old worker
  // keeps running while it finishes its connections, under the title "… is shutting down".
  const reloaded = () => childPids(front.pid).some((pid) => !before.has(pid)) && [...before].every((pid) => !isAlive(pid) || shuttingDown(pid));
  while (!reloaded()) {
    if (!isAlive(front.pid)) throw new Error(`nginx exited on reload; ${paths.errorLog} ends:\n${tail(paths.errorLog, 20)}`);
    if (Date.now() > deadline) throw new Error(`nginx started no new workers within ${readyTimeoutMs / 1000} s of SIGHUP; see ${paths.errorLog}`);
    await sleep(50);
  }
  await waitUntilListening(front.pid, front.configPath, paths);
}

/** Whether a front's config file differs from `config` (main.ts reloads only then). */
export function configDiffers(configPath: string, config: string): boolean {
  return !existsSync(configPath) || readFileSync(configPath, "utf8") !== config;
}
