// A real single-node Apache Cassandra 5.0 for tests and the local cluster, run from the
// `org.apache.cassandra:cassandra-all` jars on Maven Central: the distribution's bin/ and conf/ are
// not in those jars, so the configuration, the logging setup and the java command line are written
// here. Cassandra 5.0 is the first release that runs on Java 17 (this machine's JDK); it needs the
// JPMS exports/opens of the distribution's conf/jvm17-server.options.
//
// Install: the jars are resolved once per version into ${XDG_CACHE_HOME:-~/.cache}/parley/ (java-jars.ts).
// Run: everything under <dataDir>/services/cassandra (conf/, data/, commitlog/, logs/, the pid file).
import { spawn } from "node:child_process";
import { mkdirSync, openSync, closeSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { probeCql, type CqlSupported } from "./cql-probe.js";
import { isAlive, portIsOpen, runningPid, stopProcess, withLock, stopRecorded } from "./daemon.js";
import { checkJava17, installJars, javaExecutable, tail } from "./java-jars.js";

/** The newest 5.0.x on Maven Central when this was written. */
export const cassandraVersion = "5.0.9";
export const cassandraHost = "127.0.0.1";
export const cassandraPort = 9042;
/** Cassandra also listens here for other nodes (gossip), even alone. */
const storagePort = 7000;
const mainClass = "org.apache.cassandra.service.CassandraDaemon";
const readyTimeoutMs = 120_000;
const stopGraceMs = 30_000;

// From conf/jvm17-server.options of Cassandra 5.0: the JDK internals Cassandra (and Chronicle,
// jamm, Netty inside it) reach into. Without them start-up fails with IllegalAccessError.
const jpmsFlags = [
  "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
  "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
  "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
  "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
  "--add-exports=java.sql/java.sql=ALL-UNNAMED",
  "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
  "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
  "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
  "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
  "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
  "--add-opens=java.base/java.io=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
  "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
  "--add-opens=java.base/java.lang=ALL-UNNAMED",
  "--add-opens=java.base/java.util=ALL-UNNAMED",
  "-Djdk.attach.allowAttachSelf=true",
];

// Sized for a small shared machine: a 1 GiB heap, G1 as upstream, and die on OOM rather than limp.
const heapFlags = ["-Xms512m", "-Xmx1g", "-Xss256k", "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxGCPauseMillis=300", "-XX:+ExitOnOutOfMemoryError", "-XX:+PerfDisableSharedMem"];

// As upstream: Netty may use Unsafe for direct buffers, with the pre-4.1.75 allocator defaults.
const nettyFlags = ["-Dio.netty.tryReflectionSetAccessible=true", "-Dio.netty.allocator.useCacheForAllThreads=true", "-Dio.netty.allocator.maxOrder=11"];

/** The directories of one Cassandra instance under a data directory. */
export function cassandraPaths(dataDir: string) {
  const home = join(dataDir, "services", "cassandra");
  return {
    home,
    conf: join(home, "conf"),
    config: join(home, "conf", "cassandra.yaml"),
    logback: join(home, "conf", "logback.xml"),
    logs: join(home, "logs"),
    systemLog: join(home, "logs", "system.log"),
    stdoutLog: join(home, "logs", "stdout.log"),
    pidFile: join(home, "cassandra.pid"),
    lockFile: join(home, "start.lock"),
    storage: ["data", "commitlog", "saved_caches", "hints", "cdc_raw"].map((name) => join(home, name)),
  };
}

/** Resolves the Cassandra jars into the shared cache (once per version) and answers their directory. */
export function installCassandra(): string {
  return installJars("cassandra", cassandraVersion, [`org.apache.cassandra:cassandra-all:${cassandraVersion}`]);
}

function cassandraYaml(paths: ReturnType<typeof cassandraPaths>): string {
  const [data, commitlog, savedCaches, hints, cdcRaw] = paths.storage;
  return `# Written by scripts/services/cassandra.ts at every start; edits are overwritten.
cluster_name: parley-local
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
dynamic_snitch: false
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "${cassandraHost}:${storagePort}"
listen_address: ${cassandraHost}
storage_port: ${storagePort}
rpc_address: ${cassandraHost}
start_native_transport: true
native_transport_port: ${cassandraPort}
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
storage_compatibility_mode: NONE
data_file_directories:
  - ${data}
commitlog_directory: ${commitlog}
saved_caches_directory: ${savedCaches}
hints_directory: ${hints}
cdc_raw_directory: ${cdcRaw}
# A TRUNCATE or DROP keeps no snapshot: the tests empty a keyspace for every test server they
# start, and a snapshot each time cost about 2 s per start and filled the disk with copies.
auto_snapshot: false
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
concurrent_compactors: 1
key_cache_size: 8MiB
counter_cache_size: 0MiB
prepared_statements_cache_size: 8MiB
`;
}

function logbackXml(paths: ReturnType<typeof cassandraPaths>): string {
  return `<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${paths.systemLog}</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
`;
}

function javaArguments(lib: string, paths: ReturnType<typeof cassandraPaths>): string[] {
  return [
    ...heapFlags,
    ...jpmsFlags,
    ...nettyFlags,
    // Cassandra measures memtable and cache sizes through jamm's instrumentation agent, as bin/cassandra does.
    `-javaagent:${join(lib, "jamm-0.4.0.jar")}`,
    "-Dcassandra-foreground=yes",
    `-Dcassandra.config=file://${paths.config}`,
    `-Dcassandra.storagedir=${paths.home}`,
    `-Dcassandra.logdir=${paths.logs}`,
    `-Dlogback.configurationFile=file://${paths.logback}`,
    // One node: there is no gossip to wait for (saves the ~30 s settle loop).
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-cp",
    join(lib, "*"),
    mainClass,
  ];
}

async function waitUntilReady(pid: number, paths: ReturnType<typeof cassandraPaths>): Promise<CqlSupported> {
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (!isAlive(pid)) {
      throw new Error(`Cassandra exited during start-up; ${paths.stdoutLog} ends:\n${tail(paths.stdoutLog, 20)}\n${paths.systemLog} ends:\n${tail(paths.systemLog, 20)}`);
    }
    try {
      return await probeCql(cassandraHost, cassandraPort);
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`Cassandra did not answer CQL on ${cassandraHost}:${cassandraPort} within ${readyTimeoutMs / 1000} s (${(error as Error).message}); see ${paths.systemLog}`, { cause: error });
    }
    await sleep(250);
  }
}

/** A running Cassandra: its pid, whether this call started it, and what its CQL port reported. */
export interface CassandraInstance {
  pid: number;
  started: boolean;
  supported: CqlSupported;
}

/**
 * Installs if needed and starts Cassandra with its data under `dataDir`/services/cassandra,
 * resolving once it answers CQL. One already running for this data directory is reused.
 */
export async function startCassandra(dataDir: string): Promise<CassandraInstance> {
  const paths = cassandraPaths(dataDir);
  mkdirSync(paths.home, { recursive: true });
  return withLock(paths.lockFile, async () => {
    const running = runningPid(paths.pidFile, paths.config);
    if (running !== undefined) return { pid: running, started: false, supported: await waitUntilReady(running, paths) };
    for (const port of [cassandraPort, storagePort]) {
      if (await portIsOpen(cassandraHost, port)) {
        throw new Error(`${cassandraHost}:${port} is taken by a process that was not started for ${paths.home} (another Cassandra, or \`npm run services -- up\` with another DATA_DIR?); stop it first`);
      }
    }
    const lib = installCassandra();
    const java = javaExecutable();
    // 5.0 supports 11 and 17, and the flags above are 17's.
    checkJava17(java, `Cassandra ${cassandraVersion}`);
    for (const dir of [paths.conf, paths.logs, ...paths.storage]) mkdirSync(dir, { recursive: true });
    writeFileSync(paths.config, cassandraYaml(paths));
    writeFileSync(paths.logback, logbackXml(paths));
    const output = openSync(paths.stdoutLog, "a");
    const child = spawn(java, javaArguments(lib, paths), { cwd: paths.home, detached: true, stdio: ["ignore", output, output] });
    closeSync(output);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${java}`);
    child.unref();
    writeFileSync(paths.pidFile, `${pid}\n`);
    try {
      return { pid, started: true, supported: await waitUntilReady(pid, paths) };
    } catch (error) {
      await stopProcess(pid, stopGraceMs);
      rmSync(paths.pidFile, { force: true });
      throw error;
    }
  });
}

/** Stops the Cassandra started for `dataDir` (SIGTERM, SIGKILL after 30 s); answers whether one was running. */
export async function stopCassandra(dataDir: string): Promise<boolean> {
  const paths = cassandraPaths(dataDir);
  return stopRecorded(paths.pidFile, paths.config, stopGraceMs);
}

/**
 * For tests that need Cassandra: starts it (or reuses the one running for `dataDir`) and answers
 * the contact point; `stop` stops it only if this call started it.
 */
export async function ensureCassandra(dataDir: string): Promise<{ contactPoint: string; stop: () => Promise<void> }> {
  const instance = await startCassandra(dataDir);
  return {
    contactPoint: `${cassandraHost}:${cassandraPort}`,
    stop: async () => {
      if (instance.started) await stopCassandra(dataDir);
    },
  };
}
