// `npx tsx scripts/bench/kafka-clients.ts [--runs 3] [--smoke]`: the two installed Kafka clients,
// @platformatic/kafka and kafkajs, against the real test Kafka (test/support/kafka.ts, started if
// none runs). Per client, one after the other in this one process:
// - produce: keyed ~300-byte records with acks=all, sends of 1, 10, 100 and 1000 records, 8 sends
//   in flight; records/s and client CPU (user+system, process.cpuUsage) per record;
// - consume: a new group reads a topic of pre-written records from the start; records/s from the
//   first record to the last, CPU per record, and the time from joining to the first record;
// - latency: a consumer group reads while a producer writes 2000 records/s (10 every 5 ms); p50 and
//   p99 from the send to the consumer's callback, after a warm-up.
// Every figure is the median of --runs rounds. Partitions are given explicitly (partitionOf), as the
// update log does, so the clients' partitioners play no part.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { Admin, Consumer as PlatformaticConsumer, Producer as PlatformaticProducer, ProduceAcks, type Message } from "@platformatic/kafka";
import { Kafka, logLevel, type Consumer as KafkajsConsumer } from "kafkajs";
import { partitionOf } from "../../ports/update-log/update-log.js";
import { releaseTestKafka, testKafka } from "../../test/support/kafka.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "3" }, smoke: { type: "boolean", default: false } } });
const runs = Number(values.runs);
const smoke = values.smoke;
const partitions = 8;
const recordBytes = 300;
const keys = 1_000;
const inFlight = 8;
const batchSizes = [1, 10, 100, 1000];
const produceRecords: Record<number, number> = smoke ? { 1: 200, 10: 1_000, 100: 2_000, 1000: 4_000 } : { 1: 5_000, 10: 30_000, 100: 100_000, 1000: 150_000 };
const consumeRecords = smoke ? 5_000 : 200_000;
const latencyRate = 2_000;
const latencyTickMs = 5;
const latencyWarmupMs = smoke ? 500 : 2_000;
const latencyMeasureMs = smoke ? 1_000 : 10_000;

interface OutRecord {
  key: Buffer;
  value: Buffer;
  partition: number;
}

interface ClientUnderTest {
  name: string;
  /** One send of these records, resolved once acknowledged by all in-sync replicas. */
  send(topic: string, records: OutRecord[]): Promise<void>;
  /** Joins `group` on `topic` reading from the start; `received` gets every record's value. */
  consume(topic: string, group: string, received: (value: Buffer) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

async function platformatic(bootstrap: string): Promise<ClientUnderTest> {
  const producer = new PlatformaticProducer({ clientId: "bench-platformatic", bootstrapBrokers: [bootstrap], acks: ProduceAcks.ALL, autocreateTopics: false });
  return {
    name: "@platformatic/kafka 1.35.0",
    async send(topic, records) {
      await producer.send({ messages: records.map((record) => ({ topic, key: record.key, value: record.value, partition: record.partition })) });
    },
    async consume(topic, group, received) {
      const consumer = new PlatformaticConsumer({ clientId: "bench-platformatic", bootstrapBrokers: [bootstrap], groupId: group, maxWaitTime: 500, sessionTimeout: 10_000, heartbeatInterval: 1_000, rebalanceTimeout: 10_000 });
      const stream = await consumer.consume({ topics: [topic], mode: "committed", fallbackMode: "earliest", autocommit: 1_000 });
      stream.on("data", (message: Message) => received(message.value));
      return async () => {
        await stream.close();
        await consumer.close(true);
      };
    },
    close: () => producer.close(),
  };
}

async function kafkajs(bootstrap: string): Promise<ClientUnderTest> {
  const kafka = new Kafka({ clientId: "bench-kafkajs", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  return {
    name: "kafkajs 2.2.4",
    async send(topic, records) {
      await producer.send({ topic, acks: -1, messages: records.map((record) => ({ key: record.key, value: record.value, partition: record.partition })) });
    },
    async consume(topic, group, received) {
      const consumer: KafkajsConsumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 500, sessionTimeout: 10_000, heartbeatInterval: 1_000, rebalanceTimeout: 10_000 });
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        autoCommitInterval: 1_000,
        partitionsConsumedConcurrently: partitions,
        eachBatch: async ({ batch }) => {
          for (const message of batch.messages) if (message.value) received(message.value);
        },
      });
      return () => consumer.disconnect();
    },
    close: () => producer.disconnect(),
  };
}

function records(count: number, stamp = false): OutRecord[] {
  return Array.from({ length: count }, () => {
    const key = `user:${Math.floor(Math.random() * keys)}`;
    const value = Buffer.alloc(recordBytes, 120);
    if (stamp) value.writeDoubleLE(performance.now(), 0);
    return { key: Buffer.from(key), value, partition: partitionOf(key, partitions) };
  });
}

/** A new topic whose every partition has accepted a record from `client` (a new partition has no leader for a moment). */
async function newTopic(admin: Admin, client: ClientUnderTest, purpose: string): Promise<string> {
  const topic = `bench-${purpose}-${randomUUID().slice(0, 8)}`;
  await admin.createTopics({ topics: [topic], partitions, replicas: 1 });
  const probes = Array.from({ length: partitions }, (_, partition) => ({ key: Buffer.from("probe"), value: Buffer.alloc(recordBytes), partition }));
  for (let attempt = 0; ; attempt++) {
    try {
      await client.send(topic, probes);
      return topic;
    } catch (error) {
      if (attempt > 50) throw error;
      await sleep(100);
    }
  }
}

function phase(text: string): void {
  if (process.env.BENCH_VERBOSE) console.error(`${new Date().toISOString()} ${text}`);
}

/** CPU (user+system) in microseconds and wall time in ms spent by `work`. */
async function measured(work: () => Promise<void>): Promise<{ ms: number; cpuMicros: number }> {
  const cpu = process.cpuUsage();
  const began = performance.now();
  await work();
  const used = process.cpuUsage(cpu);
  return { ms: performance.now() - began, cpuMicros: used.user + used.system };
}

async function produce(client: ClientUnderTest, topic: string, batchSize: number, total: number): Promise<{ perSecond: number; cpuMicrosPerRecord: number }> {
  const batches = Array.from({ length: Math.ceil(total / batchSize) }, () => records(batchSize));
  let next = 0;
  const { ms, cpuMicros } = await measured(async () => {
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < batches.length) await client.send(topic, batches[next++]);
      }),
    );
  });
  const sent = batches.length * batchSize;
  return { perSecond: (sent / ms) * 1000, cpuMicrosPerRecord: cpuMicros / sent };
}

async function consume(client: ClientUnderTest, topic: string, written: number): Promise<{ perSecond: number; cpuMicrosPerRecord: number; joinMs: number }> {
  const joining = performance.now();
  let total = written;
  let count = 0;
  let first = 0;
  let last = 0;
  let cpuAtFirst: NodeJS.CpuUsage | undefined;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  // The topic holds `partitions` probe records before the measured ones.
  total += partitions;
  const stop = await client.consume(topic, `bench-${randomUUID().slice(0, 8)}`, () => {
    if (count === 0) {
      first = performance.now();
      cpuAtFirst = process.cpuUsage();
    }
    if (++count === total) {
      last = performance.now();
      done();
    }
  });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${client.name} consumed ${count} of ${total} records in 120 s`)), 120_000)));
  await Promise.race([finished, timedOut]).finally(() => clearTimeout(timer));
  const used = process.cpuUsage(cpuAtFirst);
  await stop();
  return { perSecond: ((total - 1) / (last - first)) * 1000, cpuMicrosPerRecord: (used.user + used.system) / (total - 1), joinMs: first - joining };
}

async function latency(client: ClientUnderTest, topic: string): Promise<{ p50: number; p99: number }> {
  const samples: number[] = [];
  let measuring = false;
  const stop = await client.consume(topic, `bench-${randomUUID().slice(0, 8)}`, (value) => {
    if (measuring && value.readDoubleLE(0) > 0) samples.push(performance.now() - value.readDoubleLE(0));
  });
  // Let the group settle before the clock starts.
  await client.send(topic, records(1, true));
  await sleep(1_000);
  const perTick = (latencyRate * latencyTickMs) / 1000;
  const began = performance.now();
  const sends: Promise<void>[] = [];
  for (let tick = 0; ; tick++) {
    const now = performance.now() - began;
    if (now > latencyWarmupMs + latencyMeasureMs) break;
    measuring = now > latencyWarmupMs;
    sends.push(client.send(topic, records(perTick, true)));
    const due = began + (tick + 1) * latencyTickMs;
    await sleep(Math.max(0, due - performance.now()));
  }
  await Promise.all(sends);
  await sleep(500);
  await stop();
  samples.sort((a, b) => a - b);
  const at = (q: number) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
  return { p50: at(0.5), p99: at(0.99) };
}

const median = (numbers: number[]) => [...numbers].sort((a, b) => a - b)[Math.floor(numbers.length / 2)];

async function main(): Promise<void> {
  phase("starting Kafka");
  const bootstrap = await testKafka();
  phase("Kafka ready");
  const admin = new Admin({ clientId: "bench-admin", bootstrapBrokers: [bootstrap] });
  const figures = new Map<string, Map<string, number[]>>();
  const add = (client: string, row: string, value: number) => {
    const rows = figures.get(client) ?? new Map<string, number[]>();
    figures.set(client, rows);
    rows.set(row, [...(rows.get(row) ?? []), value]);
  };
  try {
    for (let run = 0; run < runs; run++) {
      for (const open of [platformatic, kafkajs]) {
        const client = await open(bootstrap);
        for (const size of batchSizes) {
          phase(`${client.name} produce ${size}`);
          const result = await produce(client, await newTopic(admin, client, "produce"), size, produceRecords[size]);
          add(client.name, `produce, ${size}/send: records/s`, result.perSecond);
          add(client.name, `produce, ${size}/send: CPU µs/record`, result.cpuMicrosPerRecord);
        }
        phase(`${client.name} consume`);
        const readTopic = await newTopic(admin, client, "consume");
        const pending = records(consumeRecords);
        for (let i = 0; i < pending.length; i += 1000) await client.send(readTopic, pending.slice(i, i + 1000));
        const read = await consume(client, readTopic, consumeRecords);
        add(client.name, "consume (group): records/s", read.perSecond);
        add(client.name, "consume (group): CPU µs/record", read.cpuMicrosPerRecord);
        add(client.name, "consume (group): join to first record ms", read.joinMs);
        phase(`${client.name} latency`);
        const timed = await latency(client, await newTopic(admin, client, "latency"));
        add(client.name, `end to end at ${latencyRate}/s: p50 ms`, timed.p50);
        add(client.name, `end to end at ${latencyRate}/s: p99 ms`, timed.p99);
        await client.close();
        console.error(`run ${run + 1}/${runs}: ${client.name} done`);
      }
    }
  } finally {
    await admin.close();
    phase("stopping Kafka");
    await releaseTestKafka();
    phase("stopped");
  }
  const clients = [...figures.keys()];
  const rows = [...(figures.get(clients[0])?.keys() ?? [])];
  console.log(`Kafka clients, medians of ${runs} runs (${recordBytes}-byte keyed records, acks=all, ${partitions} partitions, ${inFlight} sends in flight)\n`);
  console.log(`| measure | ${clients.join(" | ")} |`);
  console.log(`|---|${clients.map(() => "---:").join("|")}|`);
  for (const row of rows) {
    const cells = clients.map((client) => {
      const value = median(figures.get(client)?.get(row) ?? [Number.NaN]);
      return value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(2);
    });
    console.log(`| ${row} | ${cells.join(" | ")} |`);
  }
}

try {
  await main();
} catch (error) {
  console.error(`kafka-clients: ${(error as Error).stack ?? error}`);
  process.exitCode = 1;
}
