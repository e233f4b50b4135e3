import type Database from "better-sqlite3";
import { maxQueuedWebhooksPerAgent, type WebhookJob, type WebhookJobStore } from "../store.js";

interface JobRow {
  job_id: number;
  agent_user_id: number;
  body: string;
  attempts: number;
  next_attempt_at: number;
  created_at: number;
}

const toJob = (row: JobRow): WebhookJob => ({
  jobId: row.job_id,
  agentUserId: row.agent_user_id,
  body: row.body,
  attempts: row.attempts,
  nextAttemptAt: row.next_attempt_at,
  queuedAt: row.created_at,
});

/**
 * The synchronous writes of the agent delivery tables, shared with the update log so that an
 * append and the deliveries it queues commit in one transaction.
 */
export function agentDeliveryWriters(db: Database.Database) {
  const insert = db.prepare("INSERT INTO webhook_jobs (agent_user_id, body, next_attempt_at, created_at) VALUES (?, ?, ?, ?)");
  const advance = db.prepare(
    `INSERT INTO agent_cursors (agent_user_id, delivered_sn) VALUES (?, ?)
     ON CONFLICT (agent_user_id) DO UPDATE SET delivered_sn = MAX(delivered_sn, excluded.delivered_sn)`,
  );
  // Everything older than the agent's newest `max` jobs. Trimming walks that many index entries,
  // so it runs on one of each agent's inserts in `trimEvery`, letting a queue overshoot the cap
  // by that many. The count is per agent: row ids are shared, and agents that receive in turn
  // (members of one group) would otherwise never land on a multiple.
  const trim = db.prepare(
    `DELETE FROM webhook_jobs WHERE agent_user_id = ? AND job_id < (
       SELECT job_id FROM webhook_jobs WHERE agent_user_id = ? ORDER BY job_id DESC LIMIT 1 OFFSET ?)`,
  );
  const trimEvery = 64;
  const insertsSinceTrim = new Map<number, number>();
  return {
    enqueue(agentUserId: number, body: string, now: number): void {
      insert.run(agentUserId, body, now, now);
      const inserts = (insertsSinceTrim.get(agentUserId) ?? 0) + 1;
      if (inserts < trimEvery) {
        insertsSinceTrim.set(agentUserId, inserts);
        return;
      }
      insertsSinceTrim.delete(agentUserId);
      trim.run(agentUserId, agentUserId, maxQueuedWebhooksPerAgent - 1);
    },
    advanceDelivered(agentUserId: number, sn: number): void {
      advance.run(agentUserId, sn);
    },
  };
}

/** One set per database: the per-agent trim counts must see every insert, from appends and hand-overs alike. */
export type AgentDeliveryWriters = ReturnType<typeof agentDeliveryWriters>;

export function webhookJobStore(db: Database.Database, writers: AgentDeliveryWriters): WebhookJobStore {
  // The head of each agent's queue, if due: per-agent order means nothing behind it may go first.
  // LIMIT -1: no limit (a slice is applied to the rows afterwards).
  const heads = db.prepare<[string, number, number], JobRow>(
    `SELECT j.* FROM webhook_jobs j
     JOIN (SELECT agent_user_id, MIN(job_id) AS head FROM webhook_jobs
           WHERE agent_user_id NOT IN (SELECT value FROM json_each(?)) GROUP BY agent_user_id) h ON h.head = j.job_id
     WHERE j.next_attempt_at <= ? ORDER BY j.next_attempt_at, j.job_id LIMIT ?`,
  );
  const remove = db.prepare("DELETE FROM webhook_jobs WHERE job_id = ?");
  const reschedule = db.prepare("UPDATE webhook_jobs SET attempts = ?, next_attempt_at = ? WHERE job_id = ?");
  const clear = db.prepare("DELETE FROM webhook_jobs WHERE agent_user_id = ?");
  const ofAgent = db.prepare<[number], JobRow>("SELECT * FROM webhook_jobs WHERE agent_user_id = ? ORDER BY job_id");
  const delivered = db.prepare<[number], { delivered_sn: number }>("SELECT delivered_sn FROM agent_cursors WHERE agent_user_id = ?");
  // A missing row already means 0, which nothing is before.
  const rewind = db.prepare("UPDATE agent_cursors SET delivered_sn = MIN(delivered_sn, ?) WHERE agent_user_id = ?");
  const handOver = db.transaction((agentUserId: number, bodies: readonly string[], queuedAt: number, throughSn: number) => {
    for (const body of bodies) writers.enqueue(agentUserId, body, queuedAt);
    writers.advanceDelivered(agentUserId, throughSn);
  });
  return {
    async enqueue(agentUserId, body, now) {
      writers.enqueue(agentUserId, body, now);
    },
    async due(now, busyAgents, limit, slice) {
      if (limit <= 0) return [];
      if (!slice) return heads.all(JSON.stringify(busyAgents), now, limit).map(toJob);
      // One head per agent with queued jobs: a short list (agents whose endpoint is behind).
      return heads
        .all(JSON.stringify(busyAgents), now, -1)
        .filter((row) => slice(row.agent_user_id))
        .slice(0, limit)
        .map(toJob);
    },
    // Every due() reads the table itself: what another handle queued is seen at once.
    announced() {},
    async remove({ jobId }) {
      remove.run(jobId);
    },
    async reschedule({ jobId }, attempts, nextAttemptAt) {
      reschedule.run(attempts, nextAttemptAt, jobId);
    },
    async pending(agentUserId) {
      return ofAgent.all(agentUserId).map(toJob);
    },
    async clearAgent(agentUserId) {
      return clear.run(agentUserId).changes;
    },
    async deliveredSn(agentUserId) {
      return delivered.get(agentUserId)?.delivered_sn ?? 0;
    },
    async advanceDelivered(agentUserId, sn) {
      writers.advanceDelivered(agentUserId, sn);
    },
    async handOver(agentUserId, bodies, queuedAt, throughSn) {
      handOver(agentUserId, bodies, queuedAt, throughSn);
    },
    async rewindDelivered(agentUserId, sn) {
      rewind.run(sn, agentUserId);
    },
  };
}
