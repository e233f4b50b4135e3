// The update log conformance suite on a real Kafka (test/support/kafka.ts), with group timings short
// enough that joins, leaves and rebalances take well under a second.
import { randomUUID } from "node:crypto";
import { testKafka } from "../../test/support/kafka.js";
import { KafkaUpdateLog } from "./kafka-update-log.js";
import { describeUpdateLogConformance } from "./update-log-conformance.js";

describeUpdateLogConformance("kafka", async () => {
  const retryDelayMs = 100;
  const log = new KafkaUpdateLog({
    bootstrap: [await testKafka()],
    clientId: `conformance-${randomUUID().slice(0, 8)}`,
    retryDelayMs,
    maxWaitMs: 100,
    group: { sessionTimeoutMs: 3_000, heartbeatIntervalMs: 200, rebalanceTimeoutMs: 3_000 },
  });
  return { log, retryDelayMs, cleanup: () => log.close() };
});
