// One real Kafka for the whole test run, started when a test first needs it on ports of its own
// (9095 for clients, 9096 for its controller: a Kafka on the standard 9092 may be the local
// cluster's), and left running when it was already running before the run. Tests never share a
// topic or a group: each names its own with uniqueName.
import { randomUUID } from "node:crypto";
import { Admin } from "@platformatic/kafka";
import { ensureKafka } from "../../scripts/services/kafka.js";
import { testServicesDir } from "./cassandra.js";

export const testKafkaPorts = { port: 9095, controllerPort: 9096 };

let running: Promise<{ bootstrap: string; stop: () => Promise<void> }> | undefined;

/** The bootstrap address (host:port) of the test Kafka, started on first need. */
export async function testKafka(): Promise<string> {
  running ??= ensureKafka(testServicesDir, testKafkaPorts);
  return (await running).bootstrap;
}

/** A topic or group name no other test or run uses. */
export function uniqueName(purpose: string): string {
  return `t-${purpose}-${randomUUID().slice(0, 8)}`;
}

/**
 * Deletes a disposed test server's topics (those named with its prefix). Each cluster-shaped test
 * server makes a webhooks topic of 32 partitions: kept, a whole run left thousands of partitions
 * on the one broker, and topic creation and metadata slowed until engines started in over 10 s.
 */
export async function deleteTestKafkaTopics(prefix: string): Promise<void> {
  const admin = new Admin({ clientId: "parley-test-cleanup", bootstrapBrokers: [await testKafka()] });
  try {
    const topics = (await admin.listTopics()).filter((topic) => topic.startsWith(prefix));
    if (topics.length > 0) await admin.deleteTopics({ topics });
  } finally {
    await admin.close();
  }
}

/** Stops the test Kafka if this run started it. */
export async function releaseTestKafka(): Promise<void> {
  const instance = running;
  running = undefined;
  if (instance) await (await instance).stop();
}

// In a mocha run the end of the run stops what the run started. Registered here, by the module the
// tests themselves load: mocha loads test files through require, so a module imported by the
// runner script would be a second instance that never saw the server start.
if (typeof after === "function") after(releaseTestKafka);
