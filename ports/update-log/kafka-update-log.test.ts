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

describe("KafkaUpdateLog on a broker of its own, new and then restarted (Kafka on 9197, ~20 s)", function () {
  this.timeout(120_000);
  const ports = { port: 9197, controllerPort: 9198 };
  let dataDir: string;

  before(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-kafka-own-"));
  });

  after(async () => {
    await stopKafka(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("takes hundreds of appends at once from a new producer on a new broker, none refused, each key in call order", async () => {
    // The idempotent producer numbers a partition's records per send; sends in flight together
    // once carried the same numbers and the broker refused them (OUT_OF_ORDER_SEQUENCE_NUMBER).
    const { bootstrap } = await startKafka(dataDir, ports);
    const log = testLog(bootstrap);
    const topics = [`burst-a-${randomUUID().slice(0, 8)}`, `burst-b-${randomUUID().slice(0, 8)}`];
    const keys = Array.from({ length: 24 }, (_, index) => `agent-${index}`);
    const sent = new Map<string, number>();
    const appends: Promise<void>[] = [];
    try {
      for (const topic of topics) await log.ensureTopic(topic, 8);
      for (let call = 0; call < 400; call++) {
        const topic = topics[call % topics.length];
        // One to three records a call, some of one key, as an inbox write announces several agents.
        const records = Array.from({ length: 1 + (call % 3) }, (_, index) => {
          const key = keys[(call * 7 + index * 5) % keys.length];
          const next = (sent.get(`${topic}/${key}`) ?? 0) + 1;
          sent.set(`${topic}/${key}`, next);
          return { key, value: new TextEncoder().encode(String(next)) };
        });
        appends.push(log.append(topic, records));
      }
      const outcomes = await Promise.allSettled(appends);
      const refused = outcomes.flatMap((outcome) => (outcome.status === "rejected" ? [String(outcome.reason)] : []));
      expect(refused.length, `appends refused, the first: ${refused[0]}`).to.equal(0);

      // Read back: per topic and key, the values 1, 2, 3… in order.
      const total = [...sent.values()].reduce((sum, count) => sum + count, 0);
      const read = new Map<string, number[]>();
      let count = 0;
      const consumers = await Promise.all(
        topics.map((topic) =>
          log.consume({
            topic,
            group: `burst-${randomUUID().slice(0, 8)}`,
            handle: async (_, records) => {
              for (const record of records) {
                const values = read.get(`${topic}/${record.key}`) ?? [];
                values.push(Number(new TextDecoder().decode(record.value)));
                read.set(`${topic}/${record.key}`, values);
                count++;
              }
            },
          }),
        ),
      );
      try {
        const deadline = Date.now() + 60_000;
        while (count < total && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      } finally {
        await Promise.all(consumers.map((consumer) => consumer.close()));
      }
      expect(count).to.equal(total);
      for (const [key, last] of sent) expect(read.get(key), key).to.deep.equal(Array.from({ length: last }, (_, index) => index + 1));
    } finally {
      await Promise.allSettled(appends);
      await log.close();
    }
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
