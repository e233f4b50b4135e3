// An engine paused (SIGSTOP) past its lease during a send load, then resumed, on the embedded
// store: two engine processes, an api and a webhooks process share one SQLite file (WAL, one machine), as
// they would share Cassandra (test/cluster/engine-faults.test.ts pauses one of the local
// cluster's engines on Cassandra). The paused engine may wake with writes it began before the pause;
// each runs under the fence of a lease the other engine has since taken, checked in the write's
// own transaction, so none lands: every acknowledged message is in each member's stream once,
// sns and ids stay dense, and the other engine's keys never fail meanwhile.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "chai";
import { engineWatchPolicy } from "../engine/engine-watch.js";
import { shardOf } from "../shared/shards.js";
import { ownerOf } from "../engine/shard-owners.js";
import { freePort, generousAbuseLimits, testStore, type TestServer } from "./support/harness.js";
import { MixedLoad } from "./support/mixed-load.js";
import { testRedis } from "./support/redis.js";

const root = resolve(import.meta.dirname, "..");
const engines = ["engine-1", "engine-2"];
/** The engines' shard leases (SHARD_LEASE_MS): shorter than the 30-s default, so the pause past them is too. */
const leaseMs = 8_000;
const homeOf = (key: string) => ownerOf(shardOf(key), engines)!;

interface NodeProcess {
  name: string;
  port: number;
  child: ChildProcess;
}

async function healthy(port: number): Promise<boolean> {
  return fetch(`http://127.0.0.1:${port}/healthz`).then(
    (answer) => answer.ok,
    () => false,
  );
}

describe("an engine paused past its lease on the embedded store (SQLite shared by engine processes)", function () {
  this.timeout(180_000);
  let dataDir: string;
  const nodes: NodeProcess[] = [];
  let server: Pick<TestServer, "url" | "codesFile">;

  before(async function () {
    // On Cassandra the local cluster's engine-fault tests pause one of its engines.
    if (testStore !== "sqlite") this.skip();
    dataDir = mkdtempSync(join(tmpdir(), "parley-pause-"));
    const layout = await Promise.all(
      [...engines, "api-1", "webhooks-1"].map(async (name) => ({ name, port: await freePort(), busPort: await freePort() })),
    );
    const mesh = `tcp://${layout.map(({ name, busPort }) => `127.0.0.1:${busPort}/${name}`).join(",")}`;
    // Shared state a cluster keeps in Redis: sign-in codes, presence.
    const redis = { REDIS_URL: await testRedis(), REDIS_PREFIX: `test:pause:${process.pid}:` };
    const codesFile = join(dataDir, "codes.jsonl");
    for (const { name, port } of layout) {
      const child = spawn(process.execPath, ["--import", "tsx", "main.ts"], {
        cwd: root,
        env: {
          ...process.env,
          ...generousAbuseLimits,
          ...redis,
          ROLES: name.slice(0, name.indexOf("-")),
          NODE_ID: name,
          TRANSPORTER: mesh,
          STORE: "sqlite",
          DATA_DIR: dataDir,
          HOST: "127.0.0.1",
          PORT: String(port),
          GRPC_PORT: "off",
          CODE_DELIVERY: `file:${codesFile}`,
          SHARD_LEASE_MS: String(leaseMs),
          LOG_LEVEL: "error",
        },
        stdio: ["ignore", "ignore", "inherit"],
      });
      nodes.push({ name, port, child });
    }
    for (let waited = 0; !(await Promise.all(nodes.map((node) => healthy(node.port)))).every(Boolean); waited += 200) {
      const exited = nodes.find((node) => node.child.exitCode !== null);
      if (exited) throw new Error(`${exited.name} exited with ${exited.child.exitCode} while starting`);
      if (waited > 90_000) throw new Error("the nodes did not become ready");
      await sleep(200);
    }
    server = { url: `http://127.0.0.1:${nodes.find((node) => node.name === "api-1")!.port}`, codesFile };
  });

  after(async () => {
    await Promise.all(
      nodes.map(async ({ child }) => {
        if (child.exitCode !== null) return;
        const exited = new Promise((done) => child.once("exit", done));
        child.kill("SIGCONT");
        child.kill("SIGKILL");
        await exited;
      }),
    );
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("its keys move to the other engine while it sleeps; nothing acknowledged is lost, doubled or skipped, and nothing is stored that no client was answered", async () => {
    const [paused, survivor] = engines;
    const load = new MixedLoad(server, homeOf);
    await load.prepare(4);
    load.start();
    await sleep(1_500);
    const pausedProcess = nodes.find((node) => node.name === paused)!.child;
    const pausedAt = performance.now();
    pausedProcess.kill("SIGSTOP");
    try {
      // Past the lease: whatever it held has run out, and been taken, when it wakes.
      await sleep(leaseMs + 3_000);
    } finally {
      pausedProcess.kill("SIGCONT");
    }
    const resumedAt = performance.now();
    await sleep(6_000);
    await load.stop();

    expect(load.failuresOf(survivor, pausedAt)).to.deep.equal([]);
    const whilePaused = load.failuresOf(paused, pausedAt).filter((failure) => failure.endedAt < resumedAt);
    const lastWhilePaused = Math.max(pausedAt, ...whilePaused.map((failure) => failure.endedAt));
    expect(lastWhilePaused - pausedAt).to.be.at.most(engineWatchPolicy.silentMs + 3_000);
    expect(load.succeededAfter(resumedAt + 3_000), "sends after the resume").to.be.above(10);
    await load.verifyStreams();
    expect(pausedProcess.exitCode, "the paused engine lives on").to.equal(null);
  });
});
