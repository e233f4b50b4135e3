// The update log on Apache Kafka through @platformatic/kafka (pure JavaScript; see
// scripts/bench/kafka-clients.ts for why this client). Records are placed by partitionOf (the Java
// client's murmur2 partitioner) with an explicit partition, so the memory driver, this one and any
// Java producer agree. Appends are idempotent-producer sends with acks=all, one send in flight
// at a time per log, carrying what queued up meanwhile (sendQueued says why).
//
// Consuming: one Kafka consumer (one group member) per consume call, classic group protocol,
// positions committed per partition after its handle resolved, never automatically. The client
// rejoins a rebalance on its own, without waiting for our handles: between the rebalance and the
// moment our handle in flight settles, the partition's new owner may already read it (from the
// last committed position). So with Kafka "one handle at a time per partition" holds within a
// member; across a rebalance the promise is at-least-once, not exclusivity. A member that closes
// is still in the group until its handles settled and committed, so its successor starts after them.
import { Admin, Consumer, Producer, ProduceAcks, type Message, type MessagesStream, type MessageToProduce } from "@platformatic/kafka";
import { partitionOf, type ConsumeOptions, type LogConsumer, type LogRecord, type UpdateLog } from "./update-log.js";

/**
 * Group membership timing. The defaults are for production: a member that stops heartbeating is
 * dropped after 30 s, heartbeats every 3 s, and a rebalance waits up to 60 s for members to rejoin
 * (longer than the slowest handle should take). Tests use a few hundred milliseconds.
 */
export interface KafkaGroupTimings {
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  rebalanceTimeoutMs: number;
}

export const productionGroupTimings: KafkaGroupTimings = { sessionTimeoutMs: 30_000, heartbeatIntervalMs: 3_000, rebalanceTimeoutMs: 60_000 };

export interface KafkaUpdateLogOptions {
  /** host:port of one or more brokers. */
  bootstrap: string[];
  clientId: string;
  /** How long a partition waits before its failed records are handled again. */
  retryDelayMs?: number;
  /** At most this many records per handle call. */
  maxBatch?: number;
  /** Records fetched but not handled yet, across partitions, above which fetching pauses. */
  maxBuffered?: number;
  /** How long a fetch waits at the broker for new records (what an idle consumer's close may wait). */
  maxWaitMs?: number;
  /**
   * Records waiting to be sent, above which an append is refused at once: the producer retries a
   * send to an unreachable broker without end, and appends nobody awaits (webhook announcements)
   * must not pile up in memory meanwhile.
   */
  maxQueuedRecords?: number;
  group?: KafkaGroupTimings;
}

const maxSendBytes = 256 * 1024;

function errorId(error: unknown, id: string): boolean {
  const found = (error as { findBy?: (property: string, value: unknown) => unknown }).findBy?.("apiId", id);
  return found !== undefined && found !== null;
}

/** The client's errors nest the broker's answers (AggregateError of per-partition errors): all of them, for a log line. */
export function kafkaErrorText(error: unknown): string {
  const nested = error as { message?: string; apiId?: string; errors?: unknown[]; cause?: unknown };
  const own = `${nested.apiId ? `${nested.apiId}: ` : ""}${nested.message ?? String(error)}`;
  const inner = [...(nested.errors ?? []), ...(nested.cause === undefined ? [] : [nested.cause])].map(kafkaErrorText);
  return inner.length > 0 ? `${own} (${inner.join("; ")})` : own;
}

/**
 * How long a topic just created may stay unknown to the metadata the brokers answer with. Usually
 * well under a second; a clean-clone CI run on this 2-core machine, with Cassandra busy beside
 * the broker, once saw a topic still unknown after 5 s. Creating a topic is rare (at start), so
 * waiting longer costs nothing.
 */
const topicPropagationMs = 30_000;

class UnknownTopicError extends Error {
  constructor(topic: string, cause?: unknown) {
    super(`topic ${topic} does not exist (ensureTopic creates it)`, { cause });
  }
}

/** An append whose records wait in the send queue. */
interface QueuedAppend {
  /** Its records not acknowledged yet. */
  unsent: number;
  failed: boolean;
  resolve: () => void;
  reject: (error: unknown) => void;
}

interface QueuedRecord {
  message: MessageToProduce;
  bytes: number;
  append: QueuedAppend;
}

export class KafkaUpdateLog implements UpdateLog {
  private readonly options: Required<KafkaUpdateLogOptions>;
  private readonly admin: Admin;
  private producer: Producer | undefined;
  /** Records waiting for the send in flight to end (see sendQueued). */
  private readonly queued: QueuedRecord[] = [];
  private sending: Promise<void> | undefined;
  private closed = false;
  /** Partition counts, fixed at a topic's creation, so cached for good. */
  private readonly partitionCounts = new Map<string, number>();

  constructor(options: KafkaUpdateLogOptions) {
    this.options = { retryDelayMs: 1_000, maxBatch: 500, maxBuffered: 5_000, maxWaitMs: 500, maxQueuedRecords: 10_000, group: productionGroupTimings, ...options };
    this.admin = new Admin({ clientId: `${options.clientId}-admin`, bootstrapBrokers: options.bootstrap });
  }

  async ensureTopic(topic: string, partitions: number): Promise<void> {
    if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`a topic needs a whole number of partitions, at least 1 (got ${partitions})`);
    try {
      await this.admin.createTopics({ topics: [topic], partitions, replicas: -1 });
    } catch (error) {
      if (!errorId(error, "TOPIC_ALREADY_EXISTS")) throw error;
    }
    // A topic just created reaches the metadata the brokers answer with a moment later.
    const knownBy = performance.now() + topicPropagationMs;
    for (;;) {
      try {
        const existing = await this.partitionCount(topic);
        if (existing !== partitions) throw new Error(`topic ${topic} exists with ${existing} partitions, not ${partitions}`);
        return;
      } catch (error) {
        if (!(error instanceof UnknownTopicError) || performance.now() > knownBy) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  private async partitionCount(topic: string): Promise<number> {
    const known = this.partitionCounts.get(topic);
    if (known !== undefined) return known;
    let metadata;
    try {
      metadata = await this.admin.metadata({ topics: [topic], forceUpdate: true, autocreateTopics: false });
    } catch (error) {
      // The client reports the broker's UNKNOWN_TOPIC_OR_PARTITION as its own "Unknown topic <name>." error.
      if (errorId(error, "UNKNOWN_TOPIC_OR_PARTITION") || (error instanceof Error && error.message.startsWith("Unknown topic "))) throw new UnknownTopicError(topic, error);
      throw error;
    }
    const count = metadata.topics.get(topic)?.partitionsCount;
    if (!count) throw new UnknownTopicError(topic);
    this.partitionCounts.set(topic, count);
    return count;
  }

  async append(topic: string, records: { key: string; value: Uint8Array }[]): Promise<void> {
    if (records.length === 0) return;
    const partitions = await this.partitionCount(topic);
    if (this.queued.length + records.length > this.options.maxQueuedRecords) {
      throw new Error(`producing to ${topic} refused: ${this.queued.length} record(s) already wait for the log (is it reachable?)`);
    }
    await new Promise<void>((resolve, reject) => {
      const append: QueuedAppend = { unsent: records.length, failed: false, resolve, reject };
      for (const { key, value } of records) {
        const message = { topic, key: Buffer.from(key), value: Buffer.from(value.buffer, value.byteOffset, value.byteLength), partition: partitionOf(key, partitions) };
        this.queued.push({ message, bytes: key.length + value.byteLength, append });
      }
      this.pump();
    });
  }

  /** Starts sending what is queued unless a send loop runs (it takes records queued meanwhile). */
  private pump(): void {
    if (this.sending) return;
    this.sending = this.sendQueued()
      .catch((error: unknown) => {
        // Not the broker's answer (sendQueued catches those): whatever is queued would wait for good.
        for (const append of new Set(this.queued.splice(0).map((record) => record.append))) append.reject(error);
      })
      .finally(() => {
        this.sending = undefined;
        // Records queued after the loop found the queue empty and before this ran.
        if (this.queued.length > 0) this.pump();
      });
  }

  /**
   * Sends what is queued, one send at a time, each taking what queued up meanwhile (up to ~256
   * KiB: the broker refuses a request over message.max.bytes, 1 MiB by default). One at a time
   * because the idempotent producer numbers a partition's records from the sequence it had when
   * the send began and moves it on only once the broker answered: two sends in flight to one
   * partition carry the same numbers, and the broker refuses the second
   * (OUT_OF_ORDER_SEQUENCE_NUMBER; every webhook announcement of a busy engine on a fresh broker
   * was refused so). Records queue in call order, so a key keeps its order.
   */
  private async sendQueued(): Promise<void> {
    while (this.queued.length > 0) {
      if (this.closed) {
        const failure = new Error("the update log was closed before these records were sent");
        for (const append of new Set(this.queued.splice(0).map((record) => record.append))) append.reject(failure);
        return;
      }
      let bytes = 0;
      let count = 0;
      while (count < this.queued.length && (count === 0 || bytes + this.queued[count].bytes <= maxSendBytes)) bytes += this.queued[count++].bytes;
      const batch = this.queued.splice(0, count).filter((record) => !record.append.failed);
      if (batch.length === 0) continue;
      // Idempotent: a send retried after a lost answer is written once, in order.
      this.producer ??= new Producer({ clientId: `${this.options.clientId}-producer`, bootstrapBrokers: this.options.bootstrap, acks: ProduceAcks.ALL, idempotent: true, autocreateTopics: false });
      try {
        await this.producer.send({ messages: batch.map((record) => record.message) });
      } catch (error) {
        const topics = [...new Set(batch.map((record) => record.message.topic))].join(", ");
        const failure = new Error(`producing ${batch.length} record(s) to ${topics} failed: ${kafkaErrorText(error)}`, { cause: error });
        // An append fails whole: its records still queued are not sent after the ones that failed.
        for (const append of new Set(batch.map((record) => record.append))) {
          append.failed = true;
          append.reject(failure);
        }
        continue;
      }
      for (const { append } of batch) if (--append.unsent === 0 && !append.failed) append.resolve();
    }
  }

  async consume(options: ConsumeOptions): Promise<LogConsumer> {
    await this.partitionCount(options.topic);
    const member = new KafkaMember(this.options, options);
    await member.start();
    return member;
  }

  async close(): Promise<void> {
    // Not waiting for the sends: a broker that is gone would hold the close for good. What is
    // still queued fails (sendQueued), what is in flight fails with the producer.
    this.closed = true;
    await Promise.all([this.producer?.close(), this.admin.close()]);
  }
}

/** Closes the consumer's streams and leaves its group (rather than timing out of it, so the others take its partitions at once). */
function leave(consumer: Consumer): Promise<void> {
  return new Promise((resolve, reject) => consumer.close(true, (error) => (error ? reject(error) : resolve())));
}

/** A partition this member holds: the records fetched but not yet handled, and the loop that handles them. */
interface HeldPartition {
  queue: Message[];
  /** The offset after the last record queued: records before it, fetched again after a rebalance, are skipped. */
  next: bigint | undefined;
  active: boolean;
  /** Records arrived. */
  wake: () => void;
  /** Ends the loop once its handle in flight settled. */
  stop: () => void;
  loop: Promise<void>;
}

class KafkaMember implements LogConsumer {
  private consumer: Consumer;
  private stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  private readonly held = new Map<number, HeldPartition>();
  private buffered = 0;
  private closing: Promise<void> | undefined;
  /** Assignment changes are applied one at a time, in the order the group announced them. */
  private changes = Promise.resolve();
  private recovering: Promise<void> = Promise.resolve();

  constructor(
    private readonly settings: Required<KafkaUpdateLogOptions>,
    private readonly options: ConsumeOptions,
  ) {
    this.consumer = this.newConsumer();
  }

  private newConsumer(): Consumer {
    const consumer = new Consumer({
      clientId: `${this.settings.clientId}-${this.options.group}`,
      bootstrapBrokers: this.settings.bootstrap,
      groupId: this.options.group,
      autocommit: false,
      sessionTimeout: this.settings.group.sessionTimeoutMs,
      heartbeatInterval: this.settings.group.heartbeatIntervalMs,
      rebalanceTimeout: this.settings.group.rebalanceTimeoutMs,
      maxWaitTime: this.settings.maxWaitMs,
    });
    consumer.on("consumer:group:join", ({ assignments }) => {
      // A consumer replaced after a failure may still announce its last join.
      if (consumer !== this.consumer) return;
      this.enqueueChange(assignments?.find((assignment) => assignment.topic === this.options.topic)?.partitions ?? []);
    });
    return consumer;
  }

  async start(): Promise<void> {
    const stream = await this.consumer.consume({ topics: [this.options.topic], mode: "committed", fallbackMode: "earliest", autocommit: false });
    this.stream = stream;
    stream.on("data", (message: Message) => this.received(message));
    stream.once("error", (error: unknown) => {
      this.options.failed?.(error, undefined);
      // Nothing awaits the recovery but close(): a failure of it must be reported, not left unhandled.
      this.recovering = this.recover().catch((failure: unknown) => this.options.failed?.(failure, undefined));
    });
  }

  /**
   * The client gives up on a stream whose broker went away (a restart, a network cut) and does not
   * read again by itself: this member then gives its partitions up, leaves, and joins again with a
   * new consumer, retrying every retry delay until the broker answers or the member is closed.
   */
  private async recover(): Promise<void> {
    if (this.closing) return;
    await this.changes;
    // A revoked callback that fails must not keep the member from joining again.
    await this.release([...this.held.keys()].sort((a, b) => a - b)).catch((error: unknown) => this.options.failed?.(error, undefined));
    const stale = this.consumer;
    const staleStream = this.stream;
    this.stream = undefined;
    this.buffered = 0;
    await staleStream?.close().catch(() => undefined);
    await leave(stale).catch(() => undefined);
    while (!this.closing) {
      await new Promise((resolve) => setTimeout(resolve, this.settings.retryDelayMs));
      if (this.closing) return;
      this.consumer = this.newConsumer();
      try {
        await this.start();
        return;
      } catch (error) {
        this.options.failed?.(error, undefined);
        await leave(this.consumer).catch(() => undefined);
      }
    }
  }

  private enqueueChange(partitions: number[]): void {
    this.changes = this.changes.then(() => this.reassign(new Set(partitions))).catch((error: unknown) => this.options.failed?.(error, undefined));
  }

  private async reassign(wanted: Set<number>): Promise<void> {
    if (this.closing) return;
    const lost = [...this.held.keys()].filter((partition) => !wanted.has(partition));
    await this.release(lost);
    const gained = [...wanted].filter((partition) => !this.held.has(partition)).sort((a, b) => a - b);
    if (gained.length === 0) return;
    this.options.assigned?.(gained);
    for (const partition of gained) this.hold(partition);
  }

  private async release(partitions: number[]): Promise<void> {
    if (partitions.length === 0) return;
    await Promise.all(
      partitions.map(async (partition) => {
        const state = this.held.get(partition);
        if (!state) return;
        this.unbuffer(state.queue.length);
        state.queue = [];
        state.stop();
        await state.loop;
        this.held.delete(partition);
      }),
    );
    await this.options.revoked?.(partitions);
  }

  private received(message: Message): void {
    const state = this.held.get(message.partition);
    // A partition given away since this record was fetched, or a record queued already and fetched
    // again from the committed position after a rebalance.
    if (!state?.active || (state.next !== undefined && message.offset < state.next)) return;
    state.next = message.offset + 1n;
    state.queue.push(message);
    this.buffered++;
    if (this.buffered >= this.settings.maxBuffered && !this.stream?.isPaused()) this.stream?.pause();
    state.wake();
  }

  private unbuffer(count: number): void {
    this.buffered -= count;
    if (this.buffered < this.settings.maxBuffered / 2 && this.stream?.isPaused()) this.stream.resume();
  }

  private hold(partition: number): void {
    let arrived = () => {};
    let stopped = () => {};
    const state: HeldPartition = {
      queue: [],
      next: undefined,
      active: true,
      wake: () => arrived(),
      stop: () => {
        state.active = false;
        arrived();
        stopped();
      },
      loop: Promise.resolve(),
    };
    // A retry waits its delay whatever arrives meanwhile; only a release cuts it short.
    const pause = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        stopped = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    state.loop = (async () => {
      while (state.active) {
        if (state.queue.length === 0) {
          await new Promise<void>((resolve) => (arrived = resolve));
          continue;
        }
        const messages = state.queue.slice(0, this.settings.maxBatch);
        const records: LogRecord[] = messages.map((message) => ({ key: message.key.toString("utf8"), value: new Uint8Array(message.value), partition, offset: message.offset }));
        try {
          await this.options.handle(partition, records);
        } catch (error) {
          this.options.failed?.(error, partition);
          if (state.active) await pause(this.settings.retryDelayMs);
          continue;
        }
        // A release empties the queue itself (and unbuffers what it held).
        if (state.active) {
          state.queue.splice(0, messages.length);
          this.unbuffer(messages.length);
        }
        // Committed even when released meanwhile: on a close we are still the member, and after a
        // rebalance every offset below any committed one was handled by someone.
        try {
          await messages[messages.length - 1].commit();
        } catch (error) {
          // Handled but not committed (the group is rebalancing): whoever holds the partition next
          // gets these records again, which at-least-once allows.
          this.options.failed?.(error, partition);
        }
      }
    })();
    this.held.set(partition, state);
  }

  async lag(): Promise<number> {
    const { topic } = this.options;
    const partitions = [...this.held.keys()];
    if (partitions.length === 0) return 0;
    // The log end of each partition, less the position the client last committed or fetched from (-1: not assigned here).
    const lags = await this.consumer.getLag({ topics: [topic], partitions: { [topic]: partitions } });
    let behind = 0;
    for (const lag of lags.get(topic) ?? []) if (lag > 0n) behind += Number(lag);
    return behind;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.recovering;
      await this.changes;
      await this.release([...this.held.keys()].sort((a, b) => a - b));
      await this.stream?.close();
      await leave(this.consumer);
    })();
    return this.closing;
  }
}
