// An engine that hangs with its sockets open (a real process, paused with SIGSTOP) is taken for
// gone by its peers within the watch's silence limit: the call waiting on it is refused, and once
// it runs again it is known again.
import { spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";
import { expect } from "chai";
import moleculer, { type ServiceBroker } from "moleculer";
import { brokerOptions, meshTransporter } from "../moleculer.config.js";
import { watchEngines, type EngineWatchPolicy } from "./engine-watch.js";
import { freeStablePort } from "../test/support/ports.js";
import { settleWithMesh } from "./shard-owners.js";

const root = resolve(import.meta.dirname, "..");
const policy = { pingEveryMs: 200, silentMs: 1_000 } satisfies EngineWatchPolicy;

/** An engine node in its own process, serving one action that answers after `ms`. */
function startEngineProcess(port: number, urls: string[]): ChildProcess {
  const script = `
    import moleculer from "moleculer";
    import { brokerOptions, meshTransporter } from ${JSON.stringify(resolve(root, "moleculer.config.ts"))};
    const broker = new moleculer.ServiceBroker({ ...brokerOptions({ logLevel: "warn", nodeID: "engine1", transporter: meshTransporter(${port}, ${JSON.stringify(urls)}) }), metadata: { roles: ["engine"] } });
    broker.createService({ name: "sync", actions: { appendFanOuts: () => null, slow: (ctx) => new Promise((done) => setTimeout(() => done("late"), ctx.params.ms)) } });
    await broker.start();
    console.log("started");
  `;
  return spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
}

async function until(condition: () => boolean, what: string, timeoutMs: number): Promise<number> {
  const began = performance.now();
  while (!condition()) {
    if (performance.now() - began > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return performance.now() - began;
}

describe("Watching engines that hang", function () {
  this.timeout(30_000);
  let api: ServiceBroker;
  let engine: ChildProcess;
  let stopWatching = () => {};

  before(async () => {
    const base = await freeStablePort([0, 1]);
    const urls = [`127.0.0.1:${base}/api`, `127.0.0.1:${base + 1}/engine1`];
    api = new moleculer.ServiceBroker({ ...brokerOptions({ logLevel: "fatal", nodeID: "api", transporter: meshTransporter(base, urls) }), metadata: { roles: ["api"] } });
    await api.start();
    engine = startEngineProcess(base + 1, urls);
    await new Promise<void>((resolve) => engine.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("started") && resolve()));
    expect(await settleWithMesh(api, 10_000)).to.deep.equal([]);
    stopWatching = watchEngines(api, policy);
  });

  after(async () => {
    stopWatching();
    engine.kill("SIGCONT");
    engine.kill("SIGKILL");
    await api.stop();
  });

  const engineRecord = () => (api.registry as unknown as { nodes: { get(id: string): { available: boolean } | undefined } }).nodes.get("engine1");

  it("leaves an engine that answers alone, however slow its calls", async () => {
    expect(await api.call("sync.slow", { ms: 2 * policy.silentMs })).to.equal("late");
    expect(engineRecord()?.available).to.equal(true);
  });

  it("takes a paused engine for gone after its silence limit, refusing the call that waited on it, and knows it again once it runs", async () => {
    const waiting = api.call("sync.slow", { ms: 500 }).then(
      () => "answered",
      (err: Error) => err.name,
    );
    engine.kill("SIGSTOP");
    const goneAfter = await until(() => engineRecord()?.available === false, "taken for gone", 10_000);
    expect(goneAfter).to.be.at.least(policy.silentMs - 2 * policy.pingEveryMs);
    expect(await waiting).to.equal("RequestRejectedError");
    engine.kill("SIGCONT");
    await until(() => engineRecord()?.available === true, "known again", 10_000);
    expect(await api.call("sync.slow", { ms: 1 })).to.equal("late");
  });
});
