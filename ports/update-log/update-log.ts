// The update log port: durable, partitioned, ordered per key, consumed by groups that split the
// partitions among their members. It carries the webhook fleet's wake-ups (which agents' queues
// have work, keyed by agent, so one fleet node owns each agent); the update streams themselves
// are the store's (store.updates), and live updates go to the gateways by call.
// Drivers: memory (embedded mode, unit tests) and Kafka (cluster mode). Both pick a record's
// partition with partitionOf, so a key lands on the same partition whichever driver wrote it and
// whatever process runs.
//
// Delivery is at least once: a partition's position is committed only after the handle of its
// records resolved, so a crash, a leave or a handle that throws gives the records again. A handle
// that throws is given the same records again (from the first uncommitted one, possibly with more
// after them) after the driver's retry delay; the partition makes no progress until it resolves,
// the group's other partitions go on. Handles must therefore be idempotent.

/** A record as read back: where it sits in the log. */
export interface LogRecord {
  key: string;
  value: Uint8Array;
  partition: number;
  offset: bigint;
}

export interface ConsumeOptions {
  group: string;
  topic: string;
  /**
   * Gets the partition's records in offset order, one call at a time per partition (partitions run
   * concurrently); the position moves past them once it resolves. Throwing retries them.
   */
  handle(partition: number, records: LogRecord[]): Promise<void>;
  /** The partitions this member newly holds (their handles start after it returns). */
  assigned?(partitions: number[]): void;
  /** The partitions this member no longer holds; called once their handles in flight have settled. */
  revoked?(partitions: number[]): Promise<void> | void;
  /** A handle that threw (its records are retried), or a consumer error (partition undefined). */
  failed?(error: unknown, partition: number | undefined): void;
}

export interface UpdateLog {
  /** Creates the topic when missing; the partition count is fixed at creation, and an existing topic with another count is an error. */
  ensureTopic(topic: string, partitions: number): Promise<void>;
  /** Appends records to an existing topic; resolves once the log acknowledged every one durably. Records with the same key keep their order. */
  append(topic: string, records: { key: string; value: Uint8Array }[]): Promise<void>;
  /** Joins a consumer group on the topic (see ConsumeOptions); resolves once joined, before any partition may be assigned. */
  consume(options: ConsumeOptions): Promise<LogConsumer>;
  /** Closes the producer side; consumers are closed by their own close. */
  close(): Promise<void>;
}

export interface LogConsumer {
  /**
   * How far this member is behind: the records of the partitions it holds now that follow its
   * group's committed positions (records being handled count until their position is committed).
   */
  lag(): Promise<number>;
  /** Leaves the group: waits for the handles in flight, commits, reports the partitions revoked, and hands them to the other members. */
  close(): Promise<void>;
}

const seed = 0x9747b28c;
const m = 0x5bd1e995;

/**
 * Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), so partitionOf agrees with the
 * Java client's default partitioner and with Kafka's own tools.
 */
export function murmur2(data: Uint8Array): number {
  const length = data.length;
  let h = seed ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  switch (length & 3) {
    case 3:
      h ^= data[whole + 2] << 16;
    // falls through
    case 2:
      h ^= data[whole + 1] << 8;
    // falls through
    case 1:
      h ^= data[whole];
      h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

const encoder = new TextEncoder();

/** The partition of a key among `partitions`: the Java client's (murmur2 of the UTF-8 key, made positive, modulo the count). */
export function partitionOf(key: string, partitions: number): number {
  return (murmur2(encoder.encode(key)) & 0x7fffffff) % partitions;
}
