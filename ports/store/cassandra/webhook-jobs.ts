// Webhook jobs and agent cursors in Cassandra (DATA-MODEL.md §5.6). An agent's jobs are one
// partition with dense job ids: only the agent's inbox owner queues jobs (appends, hand-overs,
// card actions: one serial writer), so the next id comes from the tail it caches, persisted in
// the partition's static `tail_job_id`, without an LWT. Ids only grow, so jobs below a head once
// read never come back: head reads start there, past the tombstones of delivered jobs. The
// delivered position is a max register (the cell's write timestamp is generation << 32 | sn), so
// any writer moves it forward without a read-modify-write; a rewind opens a new generation.
//
// The dispatcher polls `due`. It serves the agents this handle knows to have jobs, their heads
// cached; jobs queued through other handles are found when the engine's announcement names the
// agent (`announced`: the webhook fleet reads it from the update log), and otherwise by walking
// the sweep index ("webhooks", items are agent ids) every 5 s, which also drops index rows of
// agents found empty. Without the first, a webhooks node saw a queue that another process wrote
// only at the next walk: up to 5 s before a delivery.
import { maxQueuedWebhooksPerAgent, type WebhookJob, type WebhookJobStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { bigintOf, numberOf, type Cql, type Row, type Statement } from "./cql.js";
import { readStreamHead } from "./stream-head.js";
import { hourOf, sweepEntry } from "./sweep-index.js";

/**
 * A hand-off committed with its agent's stream entries (the bucket's static `pending_handoffs`)
 * before its jobs and position are written, so a process that stops in between leaves it to be
 * rolled forward. Its job ids and cursor generation are fixed, so rolling forward twice writes
 * the same rows, and a rewind made since wins over its position.
 */
export interface PendingHandoff {
  firstJobId: bigint;
  bodies: readonly string[];
  queuedAt: number;
  deliveredSn: number;
  generation: number;
}

export function encodePendingHandoff(handoff: PendingHandoff): Buffer {
  return Buffer.from(JSON.stringify({ ...handoff, firstJobId: String(handoff.firstJobId) }));
}

export function decodePendingHandoff(blob: unknown): PendingHandoff | undefined {
  if (blob === null || blob === undefined) return undefined;
  const parsed = JSON.parse((blob as Buffer).toString("utf8")) as Omit<PendingHandoff, "firstJobId"> & { firstJobId: string };
  return { ...parsed, firstJobId: BigInt(parsed.firstJobId) };
}

/** Trimming past the cap costs a range tombstone, so it runs once per this many ids (the cap may be overshot by as many). */
const trimEvery = 64n;
const cap = BigInt(maxQueuedWebhooksPerAgent);
/** Agents whose tail (and index hour) a handle remembers; past it the oldest are read again when next written. */
const rememberedAgents = 50_000;
const maxTimestampSn = 2 ** 32;

const jobOf = (agentUserId: number, row: Row): WebhookJob => ({
  jobId: Number(row.job_id),
  agentUserId,
  body: row.body as string,
  attempts: (row.attempts as number | null) ?? 0,
  nextAttemptAt: Number(row.next_attempt_at),
  queuedAt: numberOf(row.created_at),
});

function remember<K, V>(map: Map<K, V>, key: K, value: V): void {
  if (!map.has(key) && map.size >= rememberedAgents) map.delete(map.keys().next().value as K);
  map.set(key, value);
}

/** The delivered position's write timestamp: a newer generation beats any sn of an older one. */
function positionTimestamp(generation: number, sn: number): bigint {
  if (!Number.isInteger(sn) || sn < 0 || sn >= maxTimestampSn) throw new Error(`delivered sn ${sn} is out of range`);
  return (BigInt(generation) << 32n) | BigInt(sn);
}

/**
 * The agent delivery writes shared by the update log (hand-offs of appends) and the job store, one
 * per open store: the tails and the dispatcher's view of the queues must see every write.
 */
export class AgentDelivery {
  /** The highest job id handed out per agent (written or not: a failed write leaves a gap). */
  private readonly tails = new Map<number, bigint>();
  private readonly loadingTails = new Map<number, Promise<bigint>>();
  /** The wall-clock hour of the sweep index row last written per agent. */
  private readonly indexedHours = new Map<number, number>();
  /** Hand-offs whose entries are stored but whose jobs or position a failed write of this process left out. */
  private readonly unsettled = new Map<number, PendingHandoff>();
  /** Agents whose queue may hold jobs: their head when known, null when found empty, undefined when to be read. */
  readonly heads = new Map<number, WebhookJob | null | undefined>();
  /** Per agent, the lowest job id that may still exist. */
  readonly floors = new Map<number, bigint>();
  /** Bumped by every write of an agent's queue, so a head read that raced one is not kept. */
  private readonly writes = new Map<number, number>();

  constructor(private readonly cql: Cql) {}

  /**
   * Takes `count` job ids of the agent (its tail read first when not known, rolling forward any
   * hand-off its stream left unwritten, so the ids never collide with one).
   */
  async reserve(agentUserId: number, count: number): Promise<bigint> {
    const loaded = await this.tailOf(agentUserId);
    // Read again after the wait: callers that waited on one load take their ids in turn.
    const tail = this.tails.get(agentUserId) ?? loaded;
    remember(this.tails, agentUserId, tail + BigInt(count));
    return tail + 1n;
  }

  /** The cursor generation a hand-off's position is written under. */
  async generationOf(agentUserId: number): Promise<number> {
    const row = await this.cql.row("SELECT generation FROM agent_cursors WHERE agent_user_id = ?", [agentUserId]);
    return (row?.generation as number | null | undefined) ?? 0;
  }

  /** Writes a hand-off after its stream entries: its jobs, then its position. Kept to be settled if either fails. */
  async handOff(agentUserId: number, handoff: PendingHandoff): Promise<void> {
    try {
      await this.writeJobs(agentUserId, handoff.firstJobId, handoff.bodies, handoff.queuedAt);
      await this.cql.write(...advanceStatement(agentUserId, handoff.deliveredSn, handoff.generation));
    } catch (err) {
      this.unsettled.set(agentUserId, handoff);
      throw err;
    }
  }

  /**
   * Rolls a stored hand-off forward: the jobs the partition's tail shows unwritten, and the
   * position (a max register under the hand-off's generation, so writing it again is harmless).
   */
  async settle(agentUserId: number, handoff: PendingHandoff): Promise<void> {
    const stored = await this.storedTail(agentUserId);
    const last = handoff.firstJobId + BigInt(handoff.bodies.length) - 1n;
    if (stored < last) {
      const from = stored >= handoff.firstJobId ? stored + 1n : handoff.firstJobId;
      await this.writeJobs(agentUserId, from, handoff.bodies.slice(Number(from - handoff.firstJobId)), handoff.queuedAt);
    }
    await this.cql.write(...advanceStatement(agentUserId, handoff.deliveredSn, handoff.generation));
    this.unsettled.delete(agentUserId);
  }

  /** The job rows (and the tail, and the trim past the cap) of bodies queued under ids from `firstJobId`, with `extra` in the same batch. */
  async writeJobs(agentUserId: number, firstJobId: bigint, bodies: readonly string[], queuedAt: number, extra: readonly Statement[] = []): Promise<void> {
    if (bodies.length === 0) {
      await this.cql.batch(extra);
      return;
    }
    const last = firstJobId + BigInt(bodies.length) - 1n;
    const statements: Statement[] = bodies.map((body, index) => ({
      query: "INSERT INTO webhook_jobs (agent_user_id, job_id, body, attempts, next_attempt_at, created_at) VALUES (?, ?, ?, 0, ?, ?)",
      params: [agentUserId, firstJobId + BigInt(index), body, BigInt(queuedAt), BigInt(queuedAt)],
    }));
    statements.push({ query: "UPDATE webhook_jobs SET tail_job_id = ? WHERE agent_user_id = ?", params: [last, agentUserId] });
    const trimThrough = last - cap;
    const trimmedBefore = firstJobId - 1n - cap;
    const trims = trimThrough > 0n && (trimmedBefore < 0n || trimThrough / trimEvery > trimmedBefore / trimEvery);
    if (trims) statements.push({ query: "DELETE FROM webhook_jobs WHERE agent_user_id = ? AND job_id <= ?", params: [agentUserId, trimThrough] });
    const hour = hourOf(Date.now());
    const index = this.indexedHours.get(agentUserId) === hour ? [] : [sweepEntry("webhooks", String(agentUserId))];
    this.touched(agentUserId);
    if (extra.length > 0) {
      // Several partitions already (a hand-over's position): one logged batch for all of it.
      await this.cql.batch([...index, ...extra, ...statements]);
    } else {
      // The index row is another partition: it goes first, so a sweep finds every queue that has jobs.
      await this.cql.writeAll(index);
      await this.cql.batch(statements);
    }
    // The index row is idempotent: once an hour per agent is enough.
    remember(this.indexedHours, agentUserId, hour);
    remember(this.tails, agentUserId, (this.tails.get(agentUserId) ?? 0n) > last ? this.tails.get(agentUserId)! : last);
    if (trims) {
      remember(this.floors, agentUserId, (this.floors.get(agentUserId) ?? 0n) > trimThrough ? this.floors.get(agentUserId)! : trimThrough + 1n);
      this.heads.set(agentUserId, undefined);
    } else if (!this.heads.get(agentUserId)) {
      this.heads.set(agentUserId, undefined);
    }
  }

  /** Marks the agent's queue as written: a head read in flight since is stale. */
  touched(agentUserId: number): void {
    remember(this.writes, agentUserId, (this.writes.get(agentUserId) ?? 0) + 1);
  }

  /** Reads the agent's head into the cache (unless a write raced the read) and answers it. */
  async readHead(agentUserId: number): Promise<WebhookJob | null> {
    const before = this.writes.get(agentUserId);
    const row = await this.cql.row("SELECT job_id, body, attempts, next_attempt_at, created_at FROM webhook_jobs WHERE agent_user_id = ? AND job_id >= ? LIMIT 1", [
      agentUserId,
      this.floors.get(agentUserId) ?? 0n,
    ]);
    const head = row ? jobOf(agentUserId, row) : null;
    if (this.writes.get(agentUserId) === before) {
      this.heads.set(agentUserId, head);
      // Ids only grow: nothing below a head will exist again.
      if (head) remember(this.floors, agentUserId, BigInt(head.jobId));
    }
    return head;
  }

  private async tailOf(agentUserId: number): Promise<bigint> {
    const cached = this.tails.get(agentUserId);
    if (cached !== undefined && !this.unsettled.has(agentUserId)) return cached;
    let loading = this.loadingTails.get(agentUserId);
    if (!loading) {
      loading = this.loadTail(agentUserId, cached === undefined).finally(() => this.loadingTails.delete(agentUserId));
      this.loadingTails.set(agentUserId, loading);
    }
    return loading;
  }

  /** A tail not known yet: any hand-off the agent's stream holds is rolled forward first (by the inbox owner, who alone writes jobs). */
  private async loadTail(agentUserId: number, unknown: boolean): Promise<bigint> {
    const handoff = this.unsettled.get(agentUserId) ?? (unknown ? await this.streamHandoff(agentUserId) : undefined);
    if (handoff) await this.settle(agentUserId, handoff);
    const stored = await this.storedTail(agentUserId);
    const cached = this.tails.get(agentUserId) ?? 0n;
    const tail = stored > cached ? stored : cached;
    remember(this.tails, agentUserId, tail);
    return tail;
  }

  private async storedTail(agentUserId: number): Promise<bigint> {
    return bigintOf((await this.cql.row("SELECT tail_job_id FROM webhook_jobs WHERE agent_user_id = ? LIMIT 1", [agentUserId]))?.tail_job_id);
  }

  /** The hand-off the agent's last append left in its stream, if any (§5.4). */
  private async streamHandoff(agentUserId: number): Promise<PendingHandoff | undefined> {
    return decodePendingHandoff((await readStreamHead(this.cql, agentUserId)).pendingHandoffs);
  }
}

export function advanceStatement(agentUserId: number, sn: number, generation: number): [string, readonly unknown[]] {
  return ["UPDATE agent_cursors USING TIMESTAMP ? SET delivered_sn = ? WHERE agent_user_id = ?", [positionTimestamp(generation, sn), sn, agentUserId]];
}

const deliveries = new WeakMap<CassandraContext, AgentDelivery>();

/** The one AgentDelivery of the open store. */
export function agentDeliveryOf(ctx: CassandraContext): AgentDelivery {
  let delivery = deliveries.get(ctx);
  if (!delivery) {
    delivery = new AgentDelivery(ctx.cql);
    deliveries.set(ctx, delivery);
  }
  return delivery;
}

export interface WebhookJobStoreOptions {
  /** How often `due` walks the sweep index for queues written through other handles (wall-clock ms). */
  indexWalkMs?: number;
}

export function webhookJobStore(ctx: CassandraContext, options: WebhookJobStoreOptions = {}): WebhookJobStore {
  const { cql } = ctx;
  const delivery = agentDeliveryOf(ctx);
  const indexWalkMs = options.indexWalkMs ?? 5_000;
  let nextWalk = 0;
  let walking: Promise<void> | undefined;

  /** Every agent the index names joins the known ones, and every known head is read again (other handles may have changed it). */
  async function walkIndex(): Promise<void> {
    nextWalk = Date.now() + indexWalkMs;
    const found = await ctx.sweeps.items("webhooks");
    for (const item of found) delivery.heads.set(Number(item.item), undefined);
    for (const agentUserId of delivery.heads.keys()) delivery.heads.set(agentUserId, undefined);
    await readUnknownHeads();
    // A queue that stays busy for days would keep its first hour's row, and every walk would read
    // all hours since: its row moves to the current hour instead (written before the old one goes).
    const current = hourOf(Date.now());
    const moved = found.filter((item) => item.hour < current && delivery.heads.get(Number(item.item)));
    await cql.writeAll([...new Set(moved.map((item) => item.item))].map((item) => sweepEntry("webhooks", item)));
    const emptied = found.filter((item) => delivery.heads.get(Number(item.item)) === null);
    await ctx.sweeps.drop("webhooks", found, [...emptied, ...moved]);
  }

  async function readUnknownHeads(): Promise<void> {
    const unknown = [...delivery.heads].filter(([, head]) => head === undefined).map(([agentUserId]) => agentUserId);
    await Promise.all(unknown.map((agentUserId) => delivery.readHead(agentUserId)));
  }

  /** The position and its generation (null before the first rewind). */
  async function cursorOf(agentUserId: number, serial = false): Promise<{ sn: number; generation: number | null } | undefined> {
    const row = await cql.row("SELECT delivered_sn, generation FROM agent_cursors WHERE agent_user_id = ?", [agentUserId], { serial });
    if (!row || row.delivered_sn === null) return undefined;
    return { sn: row.delivered_sn as number, generation: row.generation as number | null };
  }

  return {
    async enqueue(agentUserId, body, now) {
      const jobId = await delivery.reserve(agentUserId, 1);
      await delivery.writeJobs(agentUserId, jobId, [body], now);
    },

    async due(now, busyAgents, limit, slice) {
      if (limit <= 0) return [];
      if (Date.now() >= nextWalk) {
        walking ??= walkIndex().finally(() => (walking = undefined));
        await walking;
      } else {
        await readUnknownHeads();
      }
      const busy = new Set(busyAgents);
      const due: WebhookJob[] = [];
      for (const [agentUserId, head] of delivery.heads) {
        if (head === null) delivery.heads.delete(agentUserId);
        else if (head && !busy.has(agentUserId) && head.nextAttemptAt <= now && (!slice || slice(agentUserId))) due.push({ ...head });
      }
      due.sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || a.jobId - b.jobId || a.agentUserId - b.agentUserId);
      return due.slice(0, limit);
    },

    announced(agentUserIds) {
      // An empty or unknown queue is read again by the next due(); a known head stays (new jobs queue behind it).
      for (const agentUserId of agentUserIds) if (!delivery.heads.get(agentUserId)) delivery.heads.set(agentUserId, undefined);
    },

    async remove({ agentUserId, jobId }) {
      delivery.touched(agentUserId);
      await cql.write("DELETE FROM webhook_jobs WHERE agent_user_id = ? AND job_id = ?", [agentUserId, BigInt(jobId)]);
      // The head gone, the next one is past it: its read skips the tombstone.
      if (delivery.heads.get(agentUserId)?.jobId === jobId) remember(delivery.floors, agentUserId, BigInt(jobId) + 1n);
      delivery.heads.set(agentUserId, undefined);
    },

    async reschedule({ agentUserId, jobId }, attempts, nextAttemptAt) {
      const head = delivery.heads.get(agentUserId);
      delivery.touched(agentUserId);
      // A plain UPDATE is an upsert: it would bring back a job another process removed meanwhile
      // (an engine dropping the queue of an agent that left WEBHOOK mode, while this node still has
      // the job as its cached head), as a row without a body that nothing removes again. Failed
      // attempts are rare, so the condition's round trips cost little.
      const updated = await cql.lwt("UPDATE webhook_jobs SET attempts = ?, next_attempt_at = ? WHERE agent_user_id = ? AND job_id = ? IF EXISTS", [
        attempts,
        BigInt(nextAttemptAt),
        agentUserId,
        BigInt(jobId),
      ]);
      delivery.heads.set(agentUserId, updated.applied && head?.jobId === jobId ? { ...head, attempts, nextAttemptAt } : undefined);
    },

    async pending(agentUserId) {
      const rows = await cql.rows("SELECT job_id, body, attempts, next_attempt_at, created_at FROM webhook_jobs WHERE agent_user_id = ? AND job_id >= ?", [
        agentUserId,
        delivery.floors.get(agentUserId) ?? 0n,
      ]);
      return rows.filter((row) => row.job_id !== null).map((row) => jobOf(agentUserId, row));
    },

    async clearAgent(agentUserId) {
      const rows = await cql.rows("SELECT job_id FROM webhook_jobs WHERE agent_user_id = ? AND job_id >= ?", [agentUserId, delivery.floors.get(agentUserId) ?? 0n]);
      const ids = rows.map((row) => row.job_id as bigint | null).filter((id): id is bigint => id !== null);
      if (ids.length === 0) return 0;
      const last = ids[ids.length - 1];
      delivery.touched(agentUserId);
      // One range tombstone for the whole queue; the static tail stays, so ids keep growing.
      await cql.write("DELETE FROM webhook_jobs WHERE agent_user_id = ? AND job_id <= ?", [agentUserId, last]);
      remember(delivery.floors, agentUserId, last + 1n);
      delivery.heads.set(agentUserId, null);
      return ids.length;
    },

    async deliveredSn(agentUserId) {
      return (await cursorOf(agentUserId))?.sn ?? 0;
    },

    async advanceDelivered(agentUserId, sn) {
      await cql.write(...advanceStatement(agentUserId, sn, await delivery.generationOf(agentUserId)));
    },

    async handOver(agentUserId, bodies, queuedAt, throughSn) {
      const [firstJobId, generation] = await Promise.all([delivery.reserve(agentUserId, bodies.length), delivery.generationOf(agentUserId)]);
      // One logged batch: a crash never leaves the jobs without the position or the reverse.
      const [query, params] = advanceStatement(agentUserId, throughSn, generation);
      await delivery.writeJobs(agentUserId, firstJobId, bodies, queuedAt, [{ query, params }]);
    },

    async rewindDelivered(agentUserId, sn) {
      for (let attempt = 0; attempt < 8; attempt++) {
        const cursor = await cursorOf(agentUserId, true);
        if (!cursor || cursor.sn <= sn) return;
        const generation = (cursor.generation ?? 0) + 1;
        const opened = await cql.lwt("UPDATE agent_cursors SET generation = ? WHERE agent_user_id = ? IF generation = ?", [generation, agentUserId, cursor.generation]);
        if (!opened.applied) continue;
        await cql.write(...advanceStatement(agentUserId, sn, generation));
        return;
      }
      throw new Error(`the delivered position of agent ${agentUserId} kept changing while it was rewound`);
    },
  };
}
