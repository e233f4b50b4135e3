// Kafka for `npm run services`: a real Kafka 4.4 (KRaft, one node) on ports of this test's own
// (9192, controller 9193), so neither the test Kafka nor a local cluster's is disturbed. Needs
// Java 17 and Maven, or the jars already cached (~45 MB); a start takes ~3-5 s, a stop < 1 s.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { Admin } from "@platformatic/kafka";
import { expect } from "chai";
import { processesMentioning } from "../../test/support/services-cli.js";
import { isAlive, portIsOpen } from "./daemon.js";
import { ensureKafka, kafkaPaths, startKafka, stopKafka } from "./kafka.js";

const ports = { port: 9192, controllerPort: 9193 };
const run = promisify(execFile);
const repositoryRoot = resolve(import.meta.dirname, "../..");


async function brokersOf(bootstrap: string): Promise<string[]> {
  const admin = new Admin({ clientId: "kafka-service-test", bootstrapBrokers: [bootstrap], retries: false });
  try {
    const metadata = await admin.metadata({ topics: [] });
    return [...metadata.brokers.values()].map((broker) => `${broker.host}:${broker.port}`);
  } finally {
    await admin.close();
  }
}

describe("the kafka service (real Kafka 4.4, KRaft)", function () {
  this.timeout(180_000);
  let dataDir: string;

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-services-"));
  });

  afterEach(async () => {
    await stopKafka(dataDir).catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("starts a broker advertising 127.0.0.1, reuses it on a second start, and leaves nothing after stop", async () => {
    const paths = kafkaPaths(dataDir);
    const first = await startKafka(dataDir, ports);
    expect(first).to.include({ started: true, bootstrap: "127.0.0.1:9192" });
    expect(isAlive(first.pid)).to.equal(true);
    expect(await brokersOf(first.bootstrap)).to.deep.equal(["127.0.0.1:9192"]);
    expect(existsSync(paths.formatted)).to.equal(true);
    // The broker's log goes to server.log (a binding for slf4j is installed); "Kafka Server started"
    // may come a moment after the broker first answers, so an earlier line is checked.
    expect(readFileSync(paths.serverLog, "utf8")).to.include("KafkaConfig values");

    const second = await startKafka(dataDir, ports);
    expect(second).to.deep.equal({ pid: first.pid, started: false, bootstrap: "127.0.0.1:9192" });

    expect(await stopKafka(dataDir)).to.equal(true);
    expect(isAlive(first.pid)).to.equal(false);
    for (const port of [ports.port, ports.controllerPort]) expect(await portIsOpen("127.0.0.1", port)).to.equal(false);
    expect(processesMentioning(paths.config)).to.deep.equal([]);
    expect(existsSync(paths.pidFile)).to.equal(false);
    expect(await stopKafka(dataDir)).to.equal(false);
  });

  it("restarts on the storage it formatted, keeping its topics", async () => {
    const { bootstrap } = await startKafka(dataDir, ports);
    const admin = new Admin({ clientId: "kafka-service-test", bootstrapBrokers: [bootstrap] });
    await admin.createTopics({ topics: ["kept"], partitions: 3, replicas: 1 });
    await admin.close();
    await stopKafka(dataDir);

    const again = await startKafka(dataDir, ports);
    expect(again.started).to.equal(true);
    const reopened = new Admin({ clientId: "kafka-service-test", bootstrapBrokers: [bootstrap] });
    try {
      const metadata = await reopened.metadata({ topics: ["kept"] });
      expect(metadata.topics.get("kept")?.partitionsCount).to.equal(3);
    } finally {
      await reopened.close();
    }
  });

  it("refuses to start where its port is taken by a Kafka of another data directory", async () => {
    await startKafka(dataDir, ports);
    const other = mkdtempSync(join(tmpdir(), "parley-services-"));
    try {
      const failure = await startKafka(other, ports).then(
        () => undefined,
        (error: Error) => error.message,
      );
      expect(failure).to.match(/127\.0\.0\.1:9192 is taken by a process that was not started for/);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("gives tests a bootstrap address through ensureKafka, whose stop leaves alone a Kafka it did not start", async () => {
    const owner = await ensureKafka(dataDir, ports);
    expect(owner.bootstrap).to.equal("127.0.0.1:9192");
    const pid = Number(readFileSync(kafkaPaths(dataDir).pidFile, "utf8"));
    const borrower = await ensureKafka(dataDir, ports);
    await borrower.stop();
    expect(isAlive(pid)).to.equal(true);
    await owner.stop();
    expect(isAlive(pid)).to.equal(false);
  });

  it("is the kafka entry of `npm run services` (its down stops nothing it did not start)", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "scripts/services/main.ts", "down", "kafka"], { cwd: repositoryRoot, env: { ...process.env, DATA_DIR: dataDir }, timeout: 60_000 });
    expect(stdout).to.equal("kafka: was not running\n");
  });
});
