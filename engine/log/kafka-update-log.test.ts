// The update log conformance suite on a real Kafka (test/support/kafka.ts), with group timings short
// enough that joins, leaves and rebalances take well under a second; and what only a real broker
// can do: go away and come back.
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { startKafka, stopKafka } from "../../scripts/services/kafka.js";
import { testKafka } from "../../test/support/kafka.js";
import { KafkaUpdateLog, type KafkaUpdateLogOptions } from "./kafka-update-log.js";
import { describeUpdateLogConformance } from "./update-log-conformance.js";

const retryDelayMs = 100;

function testLog(bootstrap: string, overrides: Partial<KafkaUpdateLogOptions> = {}): KafkaUpdateLog {
  return new KafkaUpdateLog({
    bootstrap: [bootstrap],
    clientId: `conformance-${randomUUID().slice(0, 8)}`,
    retryDelayMs,
    maxWaitMs: 100,
    group: { sessionTimeoutMs: 3_000, heartbeatIntervalMs: 200, rebalanceTimeoutMs: 3_000 },
    ...overrides,
  });
}

describeUpdateLogConformance("kafka", async () => {
  const log = testLog(await testKafka());
  return { log, retryDelayMs, cleanup: () => log.close() };
});

describe("KafkaUpdateLog on a broker that restarts (its own Kafka on 9197, ~15 s)", function () {
  this.timeout(120_000);
  const ports = { port: 9197, controllerPort: 9198 };
  let dataDir: string;

  before(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-kafka-restart-"));
  });

  after(async () => {
    await stopKafka(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("a consumer reports the lost broker, joins again once it is back, and reads what is appended after", async () => {
    const { bootstrap } = await startKafka(dataDir, ports);
    const log = testLog(bootstrap);
    const topic = `restart-${randomUUID().slice(0, 8)}`;
    await log.ensureTopic(topic, 2);
    const seen: string[] = [];
    const failures: unknown[] = [];
    const consumer = await log.consume({
      topic,
      group: `restart-${randomUUID().slice(0, 8)}`,
      handle: async (_, records) => void seen.push(...records.map((record) => new TextDecoder().decode(record.value))),
      failed: (error) => void failures.push(error),
    });
    const until = async (check: () => boolean) => {
      const deadline = Date.now() + 60_000;
      while (!check() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    };
    try {
      await log.append(topic, [{ key: "a", value: new TextEncoder().encode("before") }]);
      await until(() => seen.length >= 1);
      expect(seen).to.deep.equal(["before"]);

      await stopKafka(dataDir);
      await until(() => failures.length > 0);
      expect(failures.length).to.be.greaterThan(0);
      await startKafka(dataDir, ports);
      await log.append(topic, [{ key: "a", value: new TextEncoder().encode("after") }]);
      await until(() => seen.includes("after"));
      expect(seen).to.deep.equal(["before", "after"]);
    } finally {
      await consumer.close();
      await log.close();
    }
  });
});
