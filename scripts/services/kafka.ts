// A real single-node Apache Kafka 4.4 in KRaft mode (one process that is broker and controller) for
// tests and the local cluster, run from the `org.apache.kafka:kafka_2.13` jars on Maven Central: the
// distribution's tarball is not reachable here, and its bin/ and config/ are not in the jars, so the
// server.properties, the logging setup and the java command line are written here. Kafka 4.x brokers
// need Java 17, this machine's JDK. The jars bring slf4j without a binding; log4j-slf4j-impl is
// resolved beside them so the broker's log lands in logs/server.log instead of nowhere.
//
// Install: the jars are resolved once per version into ${XDG_CACHE_HOME:-~/.cache}/parley/ (java-jars.ts).
// Run: everything under <dataDir>/services/kafka (conf/, data/, logs/, the pid file). The storage is
// formatted on first start with a cluster id derived from that directory, so a restart finds its own.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Admin } from "@platformatic/kafka";
import { isAlive, portIsOpen, runningPid, stopProcess, withLock, stopRecorded } from "./daemon.js";
import { checkJava17, installJars, javaExecutable, tail } from "./java-jars.js";

/** The newest release on Maven Central when this was written (2026-11); its classes are Java 17's. */
export const kafkaVersion = "4.4.0";
const log4jVersion = "2.25.5";
export const kafkaHost = "127.0.0.1";
export const kafkaPort = 9092;
const readyTimeoutMs = 90_000;
const stopGraceMs = 30_000;

// The machine has 2 cores shared with Cassandra and the tests: a small heap, G1 with the short
// pauses upstream's kafka-run-class uses, and die on OOM rather than limp.
const jvmFlags = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExitOnOutOfMemoryError", "-XX:+PerfDisableSharedMem", "-Djava.awt.headless=true"];

/** Where one Kafka listens: clients on `port`, its own controller quorum on `controllerPort`. */
export interface KafkaPorts {
  port: number;
  controllerPort: number;
}

function portsOf(options: Partial<KafkaPorts> = {}): KafkaPorts {
  const port = options.port ?? kafkaPort;
  return { port, controllerPort: options.controllerPort ?? port + 1 };
}

/** The directories of one Kafka instance under a data directory. */
export function kafkaPaths(dataDir: string) {
  const home = join(dataDir, "services", "kafka");
  return {
    home,
    conf: join(home, "conf"),
    config: join(home, "conf", "server.properties"),
    log4j: join(home, "conf", "log4j2.xml"),
    data: join(home, "data"),
    formatted: join(home, "data", "meta.properties"),
    logs: join(home, "logs"),
    serverLog: join(home, "logs", "server.log"),
    stdoutLog: join(home, "logs", "stdout.log"),
    pidFile: join(home, "kafka.pid"),
    lockFile: join(home, "start.lock"),
  };
}

type KafkaPaths = ReturnType<typeof kafkaPaths>;

/** Resolves the Kafka jars into the shared cache (once per version) and answers their directory. */
export function installKafka(): string {
  return installJars("kafka", kafkaVersion, [`org.apache.kafka:kafka_2.13:${kafkaVersion}`, `org.apache.logging.log4j:log4j-slf4j-impl:${log4jVersion}`]);
}

/**
 * A KRaft cluster id (16 bytes, base64url) fixed by the data directory. It may begin with "-", so
 * it is passed as --cluster-id=<id> (as a separate argument the tool would read it as an option).
 */
function clusterId(paths: KafkaPaths): string {
  return createHash("sha256").update(paths.home).digest().subarray(0, 16).toString("base64url");
}

function serverProperties(paths: KafkaPaths, ports: KafkaPorts): string {
  return `# Written by scripts/services/kafka.ts at every start; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@${kafkaHost}:${ports.controllerPort}
listeners=PLAINTEXT://${kafkaHost}:${ports.port},CONTROLLER://${kafkaHost}:${ports.controllerPort}
advertised.listeners=PLAINTEXT://${kafkaHost}:${ports.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=${paths.data}
# Topics are created with their partition count (UpdateLog.ensureTopic); a producer naming a topic
# that does not exist is an error, not a topic with the default count.
auto.create.topics.enable=false
num.partitions=8
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# One node: no reason to wait for more members before the first rebalance of a group (default 3 s).
group.initial.rebalance.delay.ms=0
# Tests use short consumer sessions; the broker's floor (default 6 s) would refuse them.
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=168
log.segment.bytes=67108864
`;
}

function log4jXml(paths: KafkaPaths): string {
  return `<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="${paths.serverLog}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="org.apache.kafka.controller" level="info"/>
    <Root level="info"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
`;
}

function javaArguments(lib: string, paths: KafkaPaths, mainClass: string, args: string[]): string[] {
  return [...jvmFlags, `-Dlog4j2.configurationFile=file://${paths.log4j}`, `-Dkafka.logs.dir=${paths.logs}`, "-cp", join(lib, "*"), mainClass, ...args];
}

/** Formats the storage the first time (KRaft refuses to start on an unformatted log dir). */
function formatStorage(java: string, lib: string, paths: KafkaPaths): void {
  if (existsSync(paths.formatted)) return;
  const result = spawnSync(java, javaArguments(lib, paths, "kafka.tools.StorageTool", ["format", `--cluster-id=${clusterId(paths)}`, "--config", paths.config, "--ignore-formatted"]), { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", timeout: 120_000 });
  if (result.status !== 0) throw new Error(`kafka-storage format failed (${result.error?.message ?? `exit ${result.status}`}):\n${result.stdout}${result.stderr}`);
}

/** Resolves once the broker answers a metadata request listing itself. */
async function probeMetadata(port: number): Promise<void> {
  const admin = new Admin({ clientId: "parley-services-probe", bootstrapBrokers: [`${kafkaHost}:${port}`], retries: false, timeout: 2_000 });
  try {
    const metadata = await admin.metadata({ topics: [] });
    if (metadata.brokers.size === 0) throw new Error("the broker answered metadata without brokers");
  } finally {
    await admin.close().catch(() => undefined);
  }
}

async function waitUntilReady(pid: number, paths: KafkaPaths, ports: KafkaPorts): Promise<void> {
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (!isAlive(pid)) {
      throw new Error(`Kafka exited during start-up; ${paths.stdoutLog} ends:\n${tail(paths.stdoutLog, 20)}\n${paths.serverLog} ends:\n${tail(paths.serverLog, 20)}`);
    }
    try {
      return await probeMetadata(ports.port);
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`Kafka did not answer metadata on ${kafkaHost}:${ports.port} within ${readyTimeoutMs / 1000} s (${(error as Error).message}); see ${paths.serverLog}`, { cause: error });
    }
    await sleep(250);
  }
}

/** A running Kafka: its pid, whether this call started it, and its bootstrap address. */
export interface KafkaInstance {
  pid: number;
  started: boolean;
  bootstrap: string;
}

/**
 * Installs if needed and starts Kafka with its data under `dataDir`/services/kafka, resolving once
 * it answers a metadata request. One already running for this data directory is reused.
 */
export async function startKafka(dataDir: string, options: Partial<KafkaPorts> = {}): Promise<KafkaInstance> {
  const ports = portsOf(options);
  const paths = kafkaPaths(dataDir);
  const bootstrap = `${kafkaHost}:${ports.port}`;
  mkdirSync(paths.home, { recursive: true });
  return withLock(paths.lockFile, async () => {
    const running = runningPid(paths.pidFile, paths.config);
    if (running !== undefined) {
      await waitUntilReady(running, paths, ports);
      return { pid: running, started: false, bootstrap };
    }
    for (const port of [ports.port, ports.controllerPort]) {
      if (await portIsOpen(kafkaHost, port)) {
        throw new Error(`${kafkaHost}:${port} is taken by a process that was not started for ${paths.home} (another Kafka, or \`npm run services -- up\` with another DATA_DIR?); stop it first`);
      }
    }
    const lib = installKafka();
    const java = javaExecutable();
    checkJava17(java, `Kafka ${kafkaVersion}`);
    for (const dir of [paths.conf, paths.data, paths.logs]) mkdirSync(dir, { recursive: true });
    writeFileSync(paths.config, serverProperties(paths, ports));
    writeFileSync(paths.log4j, log4jXml(paths));
    formatStorage(java, lib, paths);
    const output = openSync(paths.stdoutLog, "a");
    const child = spawn(java, javaArguments(lib, paths, "kafka.Kafka", [paths.config]), { cwd: paths.home, detached: true, stdio: ["ignore", output, output] });
    closeSync(output);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${java}`);
    child.unref();
    writeFileSync(paths.pidFile, `${pid}\n`);
    try {
      await waitUntilReady(pid, paths, ports);
      return { pid, started: true, bootstrap };
    } catch (error) {
      await stopProcess(pid, stopGraceMs);
      rmSync(paths.pidFile, { force: true });
      throw error;
    }
  });
}

/** Stops the Kafka started for `dataDir` (SIGTERM, SIGKILL after 30 s); answers whether one was running. */
export async function stopKafka(dataDir: string): Promise<boolean> {
  const paths = kafkaPaths(dataDir);
  return stopRecorded(paths.pidFile, paths.config, stopGraceMs);
}

/**
 * For tests that need Kafka: starts it (or reuses the one running for `dataDir`) and answers the
 * bootstrap address; `stop` stops it only if this call started it.
 */
export async function ensureKafka(dataDir: string, options: Partial<KafkaPorts> = {}): Promise<{ bootstrap: string; stop: () => Promise<void> }> {
  const instance = await startKafka(dataDir, options);
  return {
    bootstrap: instance.bootstrap,
    stop: async () => {
      if (instance.started) await stopKafka(dataDir);
    },
  };
}
