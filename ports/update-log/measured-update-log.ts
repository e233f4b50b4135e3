// The update log as the server uses it: any driver, with its appends timed and its consumers'
// lag and failures exposed at /metrics (shared/metrics.ts). Kept out of the drivers so that both
// report the same series the same way.
import { updateLogAppendDuration, updateLogAppendedRecords, updateLogConsumerErrors, updateLogConsumerLag } from "../../shared/metrics.js";
import type { ConsumeOptions, LogConsumer, UpdateLog } from "./update-log.js";

const appended = updateLogAppendDuration.bind({ result: "ok" });
const refused = updateLogAppendDuration.bind({ result: "error" });

export function measuredUpdateLog(log: UpdateLog): UpdateLog {
  return {
    ensureTopic: (topic, partitions) => log.ensureTopic(topic, partitions),
    async append(topic, records) {
      const startedAt = performance.now();
      try {
        await log.append(topic, records);
      } catch (err) {
        refused.observeSince(startedAt);
        throw err;
      }
      appended.observeSince(startedAt);
      updateLogAppendedRecords.inc(records.length);
    },
    async consume(options: ConsumeOptions): Promise<LogConsumer> {
      const errors = updateLogConsumerErrors.bind({ group: options.group });
      const consumer = await log.consume({
        ...options,
        failed(error, partition) {
          errors.inc();
          options.failed?.(error, partition);
        },
      });
      const unsample = updateLogConsumerLag.sample({ group: options.group }, () => consumer.lag());
      return {
        lag: () => consumer.lag(),
        async close() {
          unsample();
          await consumer.close();
        },
      };
    },
    close: () => log.close(),
  };
}
