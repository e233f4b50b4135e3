// The update log in this process's memory, for embedded mode and unit tests: the same promises as
// Kafka's driver (partitionOf for placement, groups whose members split the partitions, positions
// committed after handles), without durability across restarts. A group's rebalance runs one at a
// time: the partitions that move are first revoked (their handles in flight settle) and only then
// given to their new member, so no partition is ever handled by two members at once.
import { setTimeout as sleep } from "node:timers/promises";
import { partitionOf, type ConsumeOptions, type LogConsumer, type LogRecord, type UpdateLog } from "./update-log.js";

export interface MemoryUpdateLogOptions {
  /** How long a partition waits before its failed records are handled again. */
  retryDelayMs?: number;
  /** At most this many records per handle call. */
  maxBatch?: number;
}

interface Topic {
  partitions: LogRecord[][];
  /** Wakes the partitions' readers when records arrive. */
  waiters: Set<() => void>;
}

interface Group {
  topic: Topic;
  members: Member[];
  committed: bigint[];
  /** Rebalances in order, one at a time. */
  rebalancing: Promise<void>;
}

export class MemoryUpdateLog implements UpdateLog {
  private readonly topics = new Map<string, Topic>();
  private readonly groups = new Map<string, Group>();
  private readonly retryDelayMs: number;
  private readonly maxBatch: number;

  constructor(options: MemoryUpdateLogOptions = {}) {
    this.retryDelayMs = options.retryDelayMs ?? 1_000;
    this.maxBatch = options.maxBatch ?? 500;
  }

  async ensureTopic(topic: string, partitions: number): Promise<void> {
    if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`a topic needs a whole number of partitions, at least 1 (got ${partitions})`);
    const existing = this.topics.get(topic);
    if (existing) {
      if (existing.partitions.length !== partitions) throw new Error(`topic ${topic} exists with ${existing.partitions.length} partitions, not ${partitions}`);
      return;
    }
    this.topics.set(topic, { partitions: Array.from({ length: partitions }, () => []), waiters: new Set() });
  }

  private topic(name: string): Topic {
    const topic = this.topics.get(name);
    if (!topic) throw new Error(`topic ${name} does not exist (ensureTopic creates it)`);
    return topic;
  }

  async append(topic: string, records: { key: string; value: Uint8Array }[]): Promise<void> {
    const target = this.topic(topic);
    for (const { key, value } of records) {
      const partition = partitionOf(key, target.partitions.length);
      const log = target.partitions[partition];
      log.push({ key, value: value.slice(), partition, offset: BigInt(log.length) });
    }
    const waiters = [...target.waiters];
    target.waiters.clear();
    for (const wake of waiters) wake();
  }

  async consume(options: ConsumeOptions): Promise<LogConsumer> {
    const topic = this.topic(options.topic);
    const id = `${options.topic}\0${options.group}`;
    let group = this.groups.get(id);
    if (!group) {
      group = { topic, members: [], committed: topic.partitions.map(() => 0n), rebalancing: Promise.resolve() };
      this.groups.set(id, group);
    }
    const member = new Member(group, options, this.retryDelayMs, this.maxBatch);
    await rebalance(group, { joining: member });
    let closing: Promise<void> | undefined;
    return { lag: async () => member.lag(), close: () => (closing ??= rebalance(group, { leaving: member })) };
  }

  async close(): Promise<void> {}
}

/** Gives partition p to the (p mod n)-th member in joining order: stable while nobody joins or leaves. */
function rebalance(group: Group, change: { joining?: Member; leaving?: Member }): Promise<void> {
  const run = group.rebalancing.then(async () => {
    if (change.joining) group.members.push(change.joining);
    if (change.leaving) {
      group.members = group.members.filter((member) => member !== change.leaving);
      await change.leaving.release([...change.leaving.held()]);
    }
    const count = group.topic.partitions.length;
    const wanted = new Map<Member, number[]>(group.members.map((member) => [member, []]));
    for (let partition = 0; partition < count; partition++) {
      if (group.members.length > 0) wanted.get(group.members[partition % group.members.length])?.push(partition);
    }
    await Promise.all(group.members.map((member) => member.release([...member.held()].filter((partition) => !wanted.get(member)?.includes(partition)))));
    for (const member of group.members) member.take((wanted.get(member) ?? []).filter((partition) => !member.held().has(partition)));
  });
  group.rebalancing = run.catch(() => undefined);
  return run;
}

/** One member of a group: a reader per partition it holds. */
class Member {
  private readonly readers = new Map<number, { stop: () => Promise<void> }>();

  constructor(
    private readonly group: Group,
    private readonly options: ConsumeOptions,
    private readonly retryDelayMs: number,
    private readonly maxBatch: number,
  ) {}

  held(): Set<number> {
    return new Set(this.readers.keys());
  }

  lag(): number {
    const { topic, committed } = this.group;
    let behind = 0;
    for (const partition of this.readers.keys()) behind += topic.partitions[partition].length - Number(committed[partition]);
    return behind;
  }

  take(partitions: number[]): void {
    if (partitions.length === 0) return;
    this.options.assigned?.(partitions);
    for (const partition of partitions) this.readers.set(partition, this.read(partition));
  }

  async release(partitions: number[]): Promise<void> {
    if (partitions.length === 0) return;
    await Promise.all(partitions.map((partition) => this.readers.get(partition)?.stop()));
    for (const partition of partitions) this.readers.delete(partition);
    await this.options.revoked?.(partitions);
  }

  private read(partition: number): { stop: () => Promise<void> } {
    const { topic, committed } = this.group;
    let active = true;
    let interrupt = () => {};
    // Resolves when records arrive, the retry delay ends, or the reader is stopped.
    const pause = (ms: number | undefined) =>
      new Promise<void>((resolve) => {
        const abort = new AbortController();
        interrupt = () => {
          abort.abort();
          resolve();
        };
        if (ms === undefined) topic.waiters.add(interrupt);
        else sleep(ms, undefined, { signal: abort.signal }).then(resolve, () => undefined);
      });
    const loop = (async () => {
      while (active) {
        const log = topic.partitions[partition];
        const from = Number(committed[partition]);
        if (from >= log.length) {
          await pause(undefined);
          continue;
        }
        const records = log.slice(from, from + this.maxBatch);
        try {
          await this.options.handle(partition, records);
          committed[partition] = records[records.length - 1].offset + 1n;
        } catch (error) {
          this.options.failed?.(error, partition);
          if (active) await pause(this.retryDelayMs);
        }
      }
    })();
    return {
      stop: async () => {
        active = false;
        topic.waiters.delete(interrupt);
        interrupt();
        await loop;
      },
    };
  }
}
