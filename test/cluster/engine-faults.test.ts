// Losing engines under a mixed load, through the local cluster's front: private and group sends
// (each retried with its clientMessageId until acknowledged, as a client does) and reads of update
// streams, while an engine is killed, both are killed in turn, or one is paused past its lease.
// Every attempt is recorded with the engine its key is placed on, so the tests can say which
// keys failed and for how long; then every stream is read whole: no acknowledged message lost,
// none twice, no sn or id hole, no process crashed.
import { expect } from "chai";
import { engineWatchPolicy } from "../../engine/engine-watch.js";
import { shardOf } from "../../shared/shards.js";
import { ownerOf } from "../../engine/shard-owners.js";
import { Cql } from "../../ports/store/cassandra/cql.js";
import { epochOfStreamWrite } from "../../ports/store/cassandra/stream-head.js";
import type { SignedIn } from "../support/accounts.js";
import { clusterPid, testCluster, type TestCluster } from "../support/cluster.js";
import { MixedLoad, type Attempt } from "../support/mixed-load.js";

const engines = ["engine-1", "engine-2"];
const processes = ["api-1", "api-2", ...engines, "gateway-1", "gateway-2", "webhooks-1"];
/** Where a key is placed while both engines are up (shard-owners.ts): its engine when nothing failed. */
const homeOf = (key: string) => ownerOf(shardOf(key), engines)!;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Each stream's entries, by sn, carry their writer's epoch in their write timestamp (DATA-MODEL
 * §5.4): an owner's entries that landed before the next owner read the stream come first, and
 * whatever it wrote once the next owner claimed the stream (a paused engine waking up) never
 * shows. So the epochs never go down along a stream. Read from the cluster's Cassandra itself.
 */
async function verifyOwnersInOrder(cluster: TestCluster, users: readonly SignedIn[]): Promise<void> {
  const cql = await Cql.connect({ contactPoints: [cluster.cassandra.contactPoint], keyspace: cluster.cassandra.keyspace });
  try {
    await cql.useKeyspace();
    let movedStreams = 0;
    for (const user of users) {
      const buckets = (await cql.rows("SELECT first_sn FROM stream_buckets WHERE user_id = ?", [user.userId])).map((row) => row.first_sn as number).reverse();
      const entries: { sn: number; epoch: number }[] = [];
      for (const firstSn of buckets) {
        const rows = await cql.rows("SELECT sn, WRITETIME(event_id) AS written FROM stream_entries WHERE user_id = ? AND first_sn = ?", [user.userId, firstSn]);
        for (const row of rows) if (row.sn !== null) entries.push({ sn: row.sn as number, epoch: epochOfStreamWrite(BigInt(String(row.written))) });
      }
      if (new Set(entries.map((entry) => entry.epoch)).size > 1) movedStreams++;
      const descents = entries.filter((entry, i) => i > 0 && entry.epoch < entries[i - 1].epoch);
      expect(descents, `user ${user.userId}: an older owner's entries after a newer owner's (sn: epoch ${entries.map((e) => `${e.sn}:${e.epoch}`).join(" ")})`).to.deep.equal([]);
    }
    console.log(`      measured: ${movedStreams} of ${users.length} streams written by more than one owner, each in epoch order`);
  } finally {
    await cql.close();
  }
}

/** The load's streams whole, and as stored no entry of an older owner after a newer owner's. */
async function verifyStreams(cluster: TestCluster, load: MixedLoad): Promise<void> {
  await verifyOwnersInOrder(cluster, load.users);
  await load.verifyStreams();
}

/** Resolves with the time (performance.now()) the launcher had started the node again: its pid file names another process. */
async function restartOf(cluster: TestCluster, node: string, killedPid: number): Promise<number> {
  for (;;) {
    const pid = (() => {
      try {
        return clusterPid(cluster, node);
      } catch {
        return killedPid; // being rewritten
      }
    })();
    if (pid !== killedPid) return performance.now();
    await sleep(20);
  }
}

/** The cluster's /healthz: whether it can serve sends (200), and the processes not answering 200. */
async function health(cluster: TestCluster): Promise<{ ok: boolean; down: string[] }> {
  try {
    const answer = await fetch(`${cluster.url}/healthz`);
    return { ok: answer.status === 200, down: ((await answer.json()) as { down: string[] }).down };
  } catch {
    return { ok: false, down: processes };
  }
}

/** Until every process is back and ready (the launcher restarted those the test before killed). */
async function untilWhole(cluster: TestCluster, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { ok, down } = await health(cluster);
    if (ok && down.length === 0) return;
    if (Date.now() > deadline) throw new Error(`the cluster was not whole again in time: ${down.join(", ")} down`);
    await sleep(200);
  }
}

const describeFailures = (failures: Attempt[], origin: number) =>
  failures
    .slice(0, 8)
    .map((f) => `${f.kind} on ${f.home} at +${Math.round(f.endedAt - origin)} ms: ${f.failure}`)
    .join("; ");

/** Per kind of failure (code and reason, without the message), how many and when the last ended: what a slow recovery waited on. */
function failureKinds(failures: Attempt[], origin: number): string {
  const kinds = new Map<string, { count: number; lastAt: number }>();
  for (const f of failures) {
    const kind = f.failure!.split(":")[0];
    const seen = kinds.get(kind) ?? { count: 0, lastAt: -Infinity };
    kinds.set(kind, { count: seen.count + 1, lastAt: Math.max(seen.lastAt, f.endedAt) });
  }
  return [...kinds].map(([kind, { count, lastAt }]) => `${kind} x${count} until +${Math.round(lastAt - origin)} ms`).join(", ");
}

describe("engines lost under a mixed load, through the cluster's front", function () {
  this.timeout(300_000);
  let cluster: TestCluster;
  let load: MixedLoad;

  before(async () => {
    cluster = await testCluster();
  });

  beforeEach(async () => {
    await untilWhole(cluster);
    load = new MixedLoad(cluster, homeOf);
    await load.prepare(6);
    load.start();
    await sleep(1_500);
  });

  afterEach(async () => {
    await load.stop();
  });

  it("one engine killed: the survivor's keys never fail; the dead engine's answer again within 3 s; nothing lost, doubled or skipped; no other process ends", async () => {
    const [dead, survivor] = engines;
    const pidsBefore = new Map(processes.map((node) => [node, clusterPid(cluster, node)]));
    const killedAt = performance.now();
    process.kill(pidsBefore.get(dead)!, "SIGKILL");
    const restartedAt = await restartOf(cluster, dead, pidsBefore.get(dead)!);
    await sleep(10_000);
    await load.stop();

    expect(load.failuresOf(survivor, killedAt), describeFailures(load.failuresOf(survivor, killedAt), killedAt)).to.deep.equal([]);
    const deadKeyFailures = load.failuresOf(dead, killedAt);
    const lastFailure = Math.max(killedAt, ...deadKeyFailures.map((f) => f.endedAt));
    console.log(`      measured: the dead engine's keys failed until +${Math.round(lastFailure - killedAt)} ms (${deadKeyFailures.length} failed calls: ${failureKinds(deadKeyFailures, killedAt)}); restarted at +${Math.round(restartedAt - killedAt)} ms`);
    expect(lastFailure - killedAt, `the dead engine's keys failing until: ${describeFailures(deadKeyFailures, killedAt)} (restarted at +${Math.round(restartedAt - killedAt)} ms)`).to.be.at.most(3_000);
    expect(load.succeededAfter(killedAt + 3_000)).to.be.above(20);
    await verifyStreams(cluster, load);
    for (const node of processes.filter((n) => n !== dead)) expect(clusterPid(cluster, node), `${node} still the same process`).to.equal(pidsBefore.get(node));
    expect(clusterPid(cluster, dead), "the restarted engine still runs").to.not.equal(pidsBefore.get(dead));
  });

  it("both engines killed in turn: every key answers again within 5 s of the first restart; nothing lost, doubled or skipped; the restarted engines stay up", async () => {
    const pidsBefore = new Map(processes.map((node) => [node, clusterPid(cluster, node)]));
    // What the cluster's /healthz says meanwhile, every 100 ms.
    const healthSamples: { at: number; ok: boolean }[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const at = performance.now();
        healthSamples.push({ at, ok: (await health(cluster)).ok });
        await sleep(100);
      }
    })();
    const firstKilledAt = performance.now();
    process.kill(pidsBefore.get("engine-1")!, "SIGKILL");
    const firstRestart = restartOf(cluster, "engine-1", pidsBefore.get("engine-1")!);
    await sleep(300);
    process.kill(pidsBefore.get("engine-2")!, "SIGKILL");
    const firstRestartedAt = await firstRestart;
    await restartOf(cluster, "engine-2", pidsBefore.get("engine-2")!);
    const pidsAfter = new Map(engines.map((node) => [node, clusterPid(cluster, node)]));
    // The crash this guards against came 13-20 s after the restart, in the start-up recovery.
    await sleep(20_000);
    await load.stop();
    sampling = false;
    await sampler;

    const failures = load.attempts.filter((a) => a.failure !== undefined && a.endedAt >= firstKilledAt);
    const lastFailure = Math.max(firstRestartedAt, ...failures.map((f) => f.endedAt));
    const healthyAgainAt = healthSamples.find((sample, i) => sample.at > firstRestartedAt && sample.ok && healthSamples.slice(i).every((later) => later.ok))?.at;
    console.log(`      measured: calls failed until +${Math.round(lastFailure - firstRestartedAt)} ms after the first restart (${failures.length} failed calls: ${failureKinds(failures, firstRestartedAt)}); /healthz 200 for good at +${Math.round((healthyAgainAt ?? NaN) - firstRestartedAt)} ms`);
    // /healthz said so while no engine could serve, and said 200 again only once sends went through.
    const secondKilledAt = firstKilledAt + 300;
    expect(healthSamples.some((sample) => sample.at > secondKilledAt && !sample.ok), "/healthz answered 503 while both engines were down").to.equal(true);
    expect(healthyAgainAt, "/healthz answered 200 again, for good").to.not.equal(undefined);
    const failedAfterHealthy = failures.filter((f) => f.startedAt > healthyAgainAt! + 1_000);
    expect(failedAfterHealthy, `calls failing after /healthz said 200 (+${Math.round(healthyAgainAt! - firstRestartedAt)} ms after the first restart): ${describeFailures(failedAfterHealthy, healthyAgainAt!)}`).to.deep.equal([]);
    expect(lastFailure - firstRestartedAt, `failing until: ${describeFailures(failures.filter((f) => f.endedAt > firstRestartedAt + 5_000), firstRestartedAt)}`).to.be.at.most(5_000);
    expect(load.succeededAfter(firstRestartedAt + 5_000)).to.be.above(20);
    await verifyStreams(cluster, load);
    for (const node of engines) expect(clusterPid(cluster, node), `${node} restarted once and still runs`).to.equal(pidsAfter.get(node));
    for (const node of processes.filter((n) => !engines.includes(n))) expect(clusterPid(cluster, node), `${node} still the same process`).to.equal(pidsBefore.get(node));
  });

  it("one engine paused past its lease, then resumed: its keys move within the silence limit and back within 3 s of the resume; the survivor's never fail; the paused engine lives on", async () => {
    const [paused, survivor] = engines;
    const pidsBefore = new Map(processes.map((node) => [node, clusterPid(cluster, node)]));
    const pausedAt = performance.now();
    process.kill(pidsBefore.get(paused)!, "SIGSTOP");
    try {
      // Longer than the 30 s lease: whatever it held has run out when it wakes.
      await sleep(33_000);
    } finally {
      process.kill(pidsBefore.get(paused)!, "SIGCONT");
    }
    const resumedAt = performance.now();
    await sleep(8_000);
    await load.stop();

    expect(load.failuresOf(survivor, pausedAt), describeFailures(load.failuresOf(survivor, pausedAt), pausedAt)).to.deep.equal([]);
    // While paused: its peers tell a paused engine from a slow one only once it answered no ping
    // for the watch's silence limit (engine-watch.ts); then its keys move as a dead engine's do.
    const whilePaused = load.failuresOf(paused, pausedAt).filter((f) => f.endedAt < resumedAt);
    const lastWhilePaused = Math.max(pausedAt, ...whilePaused.map((f) => f.endedAt));
    expect(lastWhilePaused - pausedAt, `failing while paused until: ${describeFailures(whilePaused, pausedAt)}`).to.be.at.most(engineWatchPolicy.silentMs + 3_000);
    const afterResume = load.failuresOf(paused, resumedAt);
    const lastAfterResume = Math.max(resumedAt, ...afterResume.map((f) => f.endedAt));
    console.log(`      measured: the paused engine's keys failed until +${Math.round(lastWhilePaused - pausedAt)} ms of the pause, and until +${Math.round(lastAfterResume - resumedAt)} ms of the resume`);
    expect(lastAfterResume - resumedAt, `failing after the resume until: ${describeFailures(afterResume, resumedAt)}`).to.be.at.most(3_000);
    await verifyStreams(cluster, load);
    for (const node of processes) expect(clusterPid(cluster, node), `${node} still the same process`).to.equal(pidsBefore.get(node));
  });
});
