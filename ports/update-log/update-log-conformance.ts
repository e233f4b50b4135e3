// The promises of the update log port, as one mocha suite every driver must pass. Each test works
// on topics and groups of its own names (a shared Kafka keeps what earlier tests and runs wrote).
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "chai";
import { partitionOf, type ConsumeOptions, type LogConsumer, type LogRecord, type UpdateLog } from "./update-log.js";

export interface UpdateLogUnderTest {
  log: UpdateLog;
  /** How long a failed handle waits before its records come again (the driver was opened with it). */
  retryDelayMs: number;
  cleanup(): Promise<void>;
}

const partitions = 4;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Polls until `check` holds; the timeout is only a safety net for a broken driver. */
async function eventually(what: string, check: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

/** A group member that records what it was given and which partitions it holds. */
class Recorder {
  readonly records: LogRecord[] = [];
  readonly held = new Set<number>();
  readonly calls: { partition: number; offsets: bigint[] }[] = [];
  readonly failures: { error: unknown; partition: number | undefined }[] = [];
  /** Most handle calls in flight at once for one partition. */
  maxConcurrentPerPartition = 0;
  private readonly inFlight = new Map<number, number>();
  consumer: LogConsumer | undefined;

  constructor(private readonly behaviour: (partition: number, records: LogRecord[]) => Promise<void> = async () => {}) {}

  options(topic: string, group: string): ConsumeOptions {
    return {
      topic,
      group,
      handle: async (partition, records) => {
        const now = (this.inFlight.get(partition) ?? 0) + 1;
        this.inFlight.set(partition, now);
        this.maxConcurrentPerPartition = Math.max(this.maxConcurrentPerPartition, now);
        this.calls.push({ partition, offsets: records.map((record) => record.offset) });
        try {
          await sleep(1);
          await this.behaviour(partition, records);
          this.records.push(...records);
        } finally {
          this.inFlight.set(partition, (this.inFlight.get(partition) ?? 1) - 1);
        }
      },
      assigned: (assigned) => {
        for (const partition of assigned) this.held.add(partition);
      },
      revoked: (revoked) => {
        for (const partition of revoked) this.held.delete(partition);
      },
      failed: (error, partition) => {
        this.failures.push({ error, partition });
      },
    };
  }

  values(): string[] {
    return this.records.map((record) => decoder.decode(record.value));
  }
}

function batch(prefix: string, count: number, keys: number): { key: string; value: Uint8Array }[] {
  return Array.from({ length: count }, (_, i) => ({ key: `key-${i % keys}`, value: encoder.encode(`${prefix}-${i}`) }));
}

/** Every record of each partition exactly once, offsets 0.. in order: nothing lost, nothing skipped. */
function expectCompletePartitions(records: LogRecord[], expectedCount: number): void {
  const offsets = new Map<number, Set<bigint>>();
  for (const record of records) {
    const seen = offsets.get(record.partition) ?? new Set();
    seen.add(record.offset);
    offsets.set(record.partition, seen);
  }
  let total = 0;
  for (const seen of offsets.values()) {
    total += seen.size;
    expect([...seen].sort((a, b) => (a < b ? -1 : 1))).to.deep.equal(Array.from({ length: seen.size }, (_, i) => BigInt(i)));
  }
  expect(total).to.equal(expectedCount);
}

export function describeUpdateLogConformance(name: string, open: () => Promise<UpdateLogUnderTest>): void {
  describe(`update log conformance: ${name}`, function () {
    this.timeout(60_000);
    let subject: UpdateLogUnderTest;
    let log: UpdateLog;
    let topic: string;
    const consumers: LogConsumer[] = [];
    const unique = (label: string) => `${label}-${randomUUID().slice(0, 8)}`;

    async function join(recorder: Recorder, group: string): Promise<Recorder> {
      recorder.consumer = await log.consume(recorder.options(topic, group));
      consumers.push(recorder.consumer);
      return recorder;
    }

    beforeEach(async () => {
      subject = await open();
      log = subject.log;
      topic = unique("conformance");
      await log.ensureTopic(topic, partitions);
    });

    afterEach(async () => {
      await Promise.all(consumers.splice(0).map((consumer) => consumer.close()));
      await subject.cleanup();
    });

    it("ensureTopic is idempotent for the same count and refuses another count; append refuses a missing topic", async () => {
      await log.ensureTopic(topic, partitions);
      let refused: unknown;
      await log.ensureTopic(topic, partitions + 1).catch((error: unknown) => (refused = error));
      expect(String(refused)).to.match(/partitions/);
      let missing: unknown;
      await log.append(unique("missing"), batch("x", 1, 1)).catch((error: unknown) => (missing = error));
      expect(missing).to.be.instanceOf(Error);
    });

    it("places each key on partitionOf's partition and gives one key's records in append order, one handle at a time per partition", async () => {
      const reader = await join(new Recorder(), unique("order"));
      const sent = batch("order", 400, 13);
      for (let i = 0; i < sent.length; i += 50) await log.append(topic, sent.slice(i, i + 50));
      await eventually("every record is handled", () => reader.records.length >= sent.length);
      expect(reader.records).to.have.length(sent.length);
      for (const record of reader.records) expect(record.partition).to.equal(partitionOf(record.key, partitions));
      for (let key = 0; key < 13; key++) {
        const expected = sent.filter((record) => record.key === `key-${key}`).map((record) => decoder.decode(record.value));
        expect(reader.records.filter((record) => record.key === `key-${key}`).map((record) => decoder.decode(record.value))).to.deep.equal(expected);
      }
      expectCompletePartitions(reader.records, sent.length);
      expect(reader.maxConcurrentPerPartition).to.equal(1);
      for (const call of reader.calls) expect(call.offsets).to.deep.equal([...call.offsets].sort((a, b) => (a < b ? -1 : 1)));
    });

    it("takes an append larger than one broker request (3 MiB on one key) and keeps its order", async () => {
      const reader = await join(new Recorder(), unique("large"));
      const filler = "x".repeat(1024);
      const sent = Array.from({ length: 3_000 }, (_, i) => ({ key: "one-key", value: encoder.encode(`${i}:${filler}`) }));
      await log.append(topic, sent);
      await eventually("every record is handled", () => reader.records.length >= sent.length);
      expect(reader.records.map((record) => Number(decoder.decode(record.value).split(":")[0]))).to.deep.equal(sent.map((_, i) => i));
    });

    it("commits a partition's position only after its handle resolved: a member that left is followed from there, nothing lost", async () => {
      const group = unique("commit");
      const first = await join(new Recorder(), group);
      await log.append(topic, batch("before", 40, 8));
      await eventually("the first member handled the first records", () => first.records.length >= 40);
      await first.consumer?.close();

      await log.append(topic, batch("after", 40, 8));
      const second = await join(new Recorder(), group);
      await eventually("the second member handled the later records", () => second.values().filter((value) => value.startsWith("after")).length >= 40);
      expect(second.values().filter((value) => value.startsWith("before"))).to.deep.equal([]);
      expectCompletePartitions([...first.records, ...second.records], 80);
    });

    it("gives the records of a handle that threw again after the retry delay, while the other partitions go on", async () => {
      const failing = partitionOf("key-0", partitions);
      let failuresLeft = 2;
      const reader = await join(
        new Recorder(async (partition) => {
          if (partition === failing && failuresLeft-- > 0) throw new Error("receiver down");
        }),
        unique("retry"),
      );
      const sent = batch("retry", 40, 8);
      await log.append(topic, sent);
      await eventually("every record is handled", () => reader.records.length >= sent.length);
      expectCompletePartitions(reader.records, sent.length);
      expect(reader.failures.map((failure) => failure.partition)).to.deep.equal([failing, failing]);
      expect(String(reader.failures[0].error)).to.include("receiver down");
      const attempts = reader.calls.filter((call) => call.partition === failing);
      expect(attempts[0].offsets[0]).to.equal(0n);
      expect(attempts[1].offsets[0]).to.equal(0n);
      expect(attempts[2].offsets[0]).to.equal(0n);
    });

    it("hands the records whose handle never succeeded to the member that takes the partition over", async () => {
      const group = unique("handover");
      const failing = partitionOf("key-0", partitions);
      const quitter = await join(
        new Recorder(async (partition) => {
          if (partition === failing) throw new Error("this member cannot handle it");
        }),
        group,
      );
      const sent = batch("handover", 24, 6);
      const elsewhere = sent.filter((record) => partitionOf(record.key, partitions) !== failing).length;
      await log.append(topic, sent);
      await eventually("the failing partition failed", () => quitter.failures.length > 0);
      await eventually("the other partitions were handled", () => quitter.records.length >= elsewhere);
      expect(quitter.records.every((record) => record.partition !== failing)).to.equal(true);
      await quitter.consumer?.close();
      const heir = await join(new Recorder(), group);
      await eventually("the heir handled the failed partition", () => heir.records.some((record) => record.partition === failing));
      const failed = heir.records.filter((record) => record.partition === failing);
      expect(failed[0].offset).to.equal(0n);
      await eventually("all records handled once between them", () => quitter.records.length + heir.records.length >= 24);
      expectCompletePartitions([...quitter.records, ...heir.records], 24);
    });

    it("splits the partitions between two members of a group, and one that closes hands its partitions to the other", async () => {
      const group = unique("split");
      const a = await join(new Recorder(), group);
      const b = await join(new Recorder(), group);
      await eventually("both members hold partitions covering the topic", () => a.held.size > 0 && b.held.size > 0 && a.held.size + b.held.size === partitions);
      expect([...a.held].filter((partition) => b.held.has(partition))).to.deep.equal([]);

      await log.append(topic, batch("split", 80, 16));
      await eventually("the records are handled", () => a.records.length + b.records.length >= 80);
      for (const record of a.records) expect(a.held.has(record.partition)).to.equal(true);
      for (const record of b.records) expect(b.held.has(record.partition)).to.equal(true);

      await a.consumer?.close();
      expect(a.held.size).to.equal(0);
      await eventually("the remaining member holds every partition", () => b.held.size === partitions);
      await log.append(topic, batch("later", 80, 16));
      await eventually("the later records are handled by the remaining member", () => b.values().filter((value) => value.startsWith("later")).length >= 80);
      expectCompletePartitions([...a.records, ...b.records], 160);
    });

    it("closes a member only after its handles in flight settled: revoked comes after them, and their records are not given again", async () => {
      const group = unique("close");
      let release: () => void = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      const events: string[] = [];
      const slow = new Recorder(async (partition) => {
        events.push(`handle ${partition} started`);
        await released;
        events.push(`handle ${partition} done`);
      });
      const options = slow.options(topic, group);
      const consumer = await log.consume({ ...options, revoked: (partitions) => void events.push(`revoked ${partitions.join(",")}`) });
      const key = "key-0";
      const partition = partitionOf(key, partitions);
      await log.append(topic, [{ key, value: encoder.encode("slow") }]);
      await eventually("the handle is in flight", () => events.includes(`handle ${partition} started`));
      const closed = consumer.close();
      await sleep(200);
      expect(events.some((event) => event.startsWith("revoked"))).to.equal(false);
      release();
      await closed;
      expect(events.indexOf(`handle ${partition} done`)).to.be.lessThan(events.findIndex((event) => event.startsWith("revoked")));
      expect(events.filter((event) => event.startsWith("revoked")).join(" ")).to.match(new RegExp(`\\b${partition}\\b`));

      await log.append(topic, [{ key, value: encoder.encode("next") }]);
      const successor = await join(new Recorder(), group);
      await eventually("the successor handled the next record", () => successor.records.length >= 1);
      await sleep(200);
      expect(successor.values()).to.deep.equal(["next"]);
    });

    it("reports as its lag the records of its partitions not handled yet, and none once they are", async () => {
      let release: () => void = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      const reader = await join(new Recorder(() => released), unique("lag"));
      await eventually("the member holds every partition", () => reader.held.size === partitions);
      const lagReaches = async (expected: number) => {
        const deadline = Date.now() + 30_000;
        let lag = await reader.consumer!.lag();
        while (lag !== expected && Date.now() < deadline) {
          await sleep(50);
          lag = await reader.consumer!.lag();
        }
        expect(lag).to.equal(expected);
      };
      await lagReaches(0);
      // Every handle waits: records being handled still count until their position is committed.
      await log.append(topic, batch("lag", 12, 4));
      await lagReaches(12);
      release();
      await eventually("every record is handled", () => reader.records.length >= 12);
      await lagReaches(0);
    });

    it("gives every record to each of two groups", async () => {
      const one = await join(new Recorder(), unique("one"));
      const two = await join(new Recorder(), unique("two"));
      await log.append(topic, batch("both", 30, 5));
      await eventually("both groups handled every record", () => one.records.length >= 30 && two.records.length >= 30);
      expect(one.values().sort()).to.deep.equal(two.values().sort());
      expectCompletePartitions(one.records, 30);
      expectCompletePartitions(two.records, 30);
    });
  });
}
