// The load scripts run for real: k6 (built from the Go module proxy, cached) drives a real server
// through `npm run k6`. The smoke scenario is CI's; a short webhook run proves the sidecar's
// receiver path; a run whose sign-ins cannot work must fail. Unit tests cover the sidecar.
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect } from "chai";
import { startTestServer, type TestServer } from "../../test/support/harness.js";
import { installGoTool } from "../services/go-install.js";
import { k6, scenarioNames } from "./run.js";
import { CodeFile, WebhookReceiver } from "./sidecar.js";

const runner = resolve(import.meta.dirname, "run.ts");

interface K6Run {
  exitCode: number;
  output: string;
  /** The end-of-test summary k6 wrote (--summary-export). */
  summary: { metrics: Record<string, Record<string, number>> } | undefined;
}

async function runScenario(scenario: string, env: Record<string, string>, k6Options: string[] = []): Promise<K6Run> {
  const dir = mkdtempSync(join(tmpdir(), "parley-k6-"));
  const summaryFile = join(dir, "summary.json");
  try {
    const child = spawn(process.execPath, ["--import", "tsx", runner, scenario, "--quiet", "--no-color", `--summary-export=${summaryFile}`, ...k6Options], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    const exitCode = await new Promise<number>((done) => child.on("close", (code) => done(code ?? 1)));
    let summary: K6Run["summary"];
    try {
      summary = JSON.parse(readFileSync(summaryFile, "utf8")) as K6Run["summary"];
    } catch {
      summary = undefined;
    }
    return { exitCode, output, summary };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("k6 load scenarios", function () {
  // The first run on a machine builds k6 (about 3 minutes on two cores); later runs reuse it.
  this.timeout(15 * 60_000);
  let server: TestServer;

  before(async () => {
    await installGoTool(k6);
    server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" } });
  });
  after(() => server?.dispose());

  it("has every scenario the operators' guide names", () => {
    expect(scenarioNames()).to.include.members(["smoke", "sign-in-storm", "chat", "group-fan-out", "agent-streaming", "webhook-agents", "reconnect-storm"]);
  });

  it("passes the smoke scenario against a real server, every check and threshold holding", async () => {
    const run = await runScenario("smoke", { BASE_URL: server.url, CODE_FILE: server.codesFile });
    expect(run.exitCode, run.output).to.equal(0);
    const metrics = run.summary!.metrics;
    expect(metrics.checks.fails, run.output).to.equal(0);
    expect(metrics.checks.passes).to.be.greaterThan(10);
    expect(metrics.parley_messages_lost.count).to.equal(0);
    expect(metrics.parley_sn_gaps.count).to.equal(0);
    expect(metrics.parley_send_to_push_ms.max, "pushes were timed").to.be.greaterThan(0);
  });

  it("counts signed webhook deliveries through the sidecar's HTTPS receiver", async function () {
    const tlsDir = process.env.PARLEY_TEST_TLS_DIR;
    if (!tlsDir) this.skip(); // scripts/test.sh makes the certificate the server trusts
    const run = await runScenario("webhook-agents", { BASE_URL: server.url, CODE_FILE: server.codesFile, WEBHOOK_TLS_DIR: tlsDir!, VUS: "2", AGENTS: "2", DURATION: "3s" });
    expect(run.exitCode, run.output).to.equal(0);
    const metrics = run.summary!.metrics;
    expect(metrics.parley_webhook_delivery_ms.max, "deliveries were timed").to.be.greaterThan(0);
    expect(metrics.parley_webhook_bad_signatures.count).to.equal(0);
    expect(metrics.parley_messages_lost.count).to.equal(0);
  });

  it("fails, with a non-zero exit, when its accounts cannot sign in", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-k6-codes-"));
    try {
      // A code file the server never writes to: no code ever appears.
      const run = await runScenario("smoke", { BASE_URL: server.url, CODE_FILE: join(dir, "elsewhere.jsonl") });
      expect(run.exitCode, run.output).to.not.equal(0);
      expect(run.output).to.contain("no login code");
      expect(run.summary!.metrics.parley_iteration_errors.count, "the iteration cut short is what fails the run").to.equal(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses an unknown scenario and a missing CODE_FILE, naming what is needed", async () => {
    const unknown = await runScenario("no-such-scenario", { CODE_FILE: "/dev/null" });
    expect(unknown.exitCode).to.equal(2);
    expect(unknown.output).to.contain("scenarios: agent-streaming, chat");
    const { CODE_FILE: _ignored, ...withoutCodeFile } = process.env;
    const child = spawn(process.execPath, ["--import", "tsx", runner, "smoke"], { env: withoutCodeFile as NodeJS.ProcessEnv, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    expect(await new Promise((done) => child.on("close", done))).to.equal(2);
    expect(output).to.contain("CODE_FILE is not set");
  });
});

describe("k6 sidecar", () => {
  it("relays the latest code per identity and purpose from a growing code file, a half-written line only once complete", () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-k6-codes-"));
    try {
      const file = join(dir, "codes.jsonl");
      const codes = new CodeFile(file);
      expect(codes.code("a@example.com", "login")).to.equal(undefined);
      writeFileSync(file, `${JSON.stringify({ identityValue: "a@example.com", purpose: "login", code: "111111" })}\n`);
      expect(codes.code("a@example.com", "login")).to.equal("111111");
      const second = JSON.stringify({ identityValue: "a@example.com", purpose: "login", code: "222222" });
      appendFileSync(file, second.slice(0, 20));
      expect(codes.code("a@example.com", "login"), "a half-written line is not read").to.equal("111111");
      appendFileSync(file, `${second.slice(20)}\n${JSON.stringify({ identityValue: "a@example.com", purpose: "reset", code: "333333" })}\n`);
      expect(codes.code("a@example.com", "login")).to.equal("222222");
      expect(codes.code("a@example.com", "reset")).to.equal("333333");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const signed = (secretKey: string, timestamp: number, body: string) => {
    const signature = `sha256=${createHmac("sha256", secretKey).update(`${timestamp}.${body}`).digest("hex")}`;
    return { "x-service-timestamp": String(timestamp), "x-service-signature": signature, "x-nexus-timestamp": String(timestamp), "x-nexus-signature": signature };
  };
  const delivery = JSON.stringify({ snUpdate: { sn: 3, messageEnvelope: { messageId: "42" } } });

  it("accepts a delivery signed with the agent's key in both header sets, once per message", () => {
    const receiver = new WebhookReceiver();
    receiver.register(7, "nxk_secret");
    expect(receiver.receive(7, signed("nxk_secret", 1000, delivery), delivery, 1000)).to.equal(200);
    expect(receiver.receive(7, signed("nxk_secret", 1001, delivery), delivery, 1001)).to.equal(200);
    expect(receiver.counts()).to.deep.equal({ valid: 2, invalid: 0, distinctMessages: 1, probes: 0 });
    expect(receiver.seenAt(7, "42")).to.be.a("number");
  });

  it("refuses a wrong key, a stale timestamp, a missing upstream header set and an unregistered agent", () => {
    const receiver = new WebhookReceiver();
    receiver.register(7, "nxk_secret");
    expect(receiver.receive(7, signed("nxk_other", 1000, delivery), delivery, 1000)).to.equal(401);
    expect(receiver.receive(7, signed("nxk_secret", 1000, delivery), delivery, 1000 + 301)).to.equal(401);
    const { "x-nexus-signature": _dropped, ...onlyParley } = signed("nxk_secret", 1000, delivery);
    expect(receiver.receive(7, onlyParley, delivery, 1000)).to.equal(401);
    expect(receiver.receive(8, signed("nxk_secret", 1000, delivery), delivery, 1000)).to.equal(401);
    expect(receiver.counts()).to.deep.equal({ valid: 0, invalid: 4, distinctMessages: 0, probes: 0 });
    expect(receiver.seenAt(7, "42")).to.equal(undefined);
  });

  it("takes the server's reachability check signed with the agent's key, and refuses an unsigned one", () => {
    const receiver = new WebhookReceiver();
    receiver.register(9, "nxk_created");
    expect(receiver.receive(9, signed("nxk_created", 1000, "{}"), "{}", 1000)).to.equal(200);
    expect(receiver.receive(9, {}, "{}", 1000)).to.equal(401);
    expect(receiver.counts()).to.deep.include({ probes: 1, invalid: 1, valid: 0 });
  });
});
