// Opens the update log the configuration names (the port is update-log.ts): Kafka where brokers
// are given (KAFKA_BROKERS, a cluster), in memory where one process runs everything.
import { KafkaUpdateLog, type KafkaUpdateLogOptions } from "./kafka-update-log.js";
import { MemoryUpdateLog } from "./memory-update-log.js";
import type { UpdateLog } from "./update-log.js";

export function openUpdateLog(kafkaBrokers: string[] | undefined, kafka: Omit<KafkaUpdateLogOptions, "bootstrap">): UpdateLog {
  return kafkaBrokers ? new KafkaUpdateLog({ ...kafka, bootstrap: kafkaBrokers }) : new MemoryUpdateLog();
}
