// Client CPU per APNs notification: Parley's driver (node:http2 behind ProviderQueue) against
// @parse/node-apn, each sending the same alerts to a local APNs server (test/support's fake, in a
// child process so its CPU is not counted) with the same number in flight. Rounds alternate the
// two; medians are printed. The figures and the choice they informed: docs/decisions/push-providers.md.
//   npx tsx scripts/bench/push-clients.ts [--notifications 20000] [--in-flight 200] [--rounds 3]
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import apn from "@parse/node-apn";
import { loadConfig } from "../../shared/config.js";
import { openPushNotifier } from "../../ports/push-notifier/open-push-notifier.js";
import type { PushNotification } from "../../ports/push-notifier/push-notifier.js";
import { makeApnsCredentials, startFakeApns } from "../../test/support/fake-push-providers.js";
import { root } from "./processes.js";

const topic = "io.parley.bench";

if (process.argv[2] === "fake-apns") {
  // The child: the local APNs server, which announces where it listens and with which key.
  const dir = mkdtempSync(join(tmpdir(), "parley-push-clients-"));
  const key = makeApnsCredentials(dir);
  const fake = await startFakeApns({ ...key, topic });
  // Recording every arrival would grow without bound over many rounds.
  setInterval(() => fake.received.splice(0), 1000).unref();
  process.stdout.write(`${JSON.stringify({ url: fake.url, keyFile: key.keyFile, keyId: key.keyId, teamId: key.teamId })}\n`);
  process.on("SIGTERM", () => void fake.close().then(() => process.exit(0)));
} else if (process.argv[2] === "measure") {
  // The measuring child: it trusts the fake's CA through NODE_EXTRA_CA_CERTS, which Node reads only at start.
  const { values } = parseArgs({
    args: process.argv.slice(3),
    options: { notifications: { type: "string", default: "20000" }, "in-flight": { type: "string", default: "200" }, rounds: { type: "string", default: "3" } },
  });
  const total = Number(values.notifications);
  const inFlight = Number(values["in-flight"]);
  const rounds = Number(values.rounds);
  const fake = JSON.parse(process.env.PARLEY_FAKE_APNS!) as { url: string; keyFile: string; keyId: string; teamId: string };
  const ca = [readFileSync(process.env.NODE_EXTRA_CA_CERTS!)];

  const tokens = Array.from({ length: 1000 }, () => randomBytes(32).toString("hex"));
  const notification: PushNotification = {
    silent: false,
    badge: 3,
    title: "Ada",
    body: "the meeting moved to nine; bring the slides",
    message: { conversationId: "4294967297", messageId: "42", senderId: 7, senderNickname: "Ada", preview: "the meeting moved to nine; bring the slides" },
  };

  /** Sends `total` notifications with `inFlight` outstanding; answers client CPU per notification (µs) and notifications per second. */
  async function measure(send: (index: number) => Promise<boolean>): Promise<{ cpuUs: number; perSecond: number }> {
    // A warm-up connects and signs before the clock starts.
    await Promise.all(Array.from({ length: inFlight }, (_, i) => send(i)));
    let next = 0;
    let failed = 0;
    const cpu = process.cpuUsage();
    const started = performance.now();
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < total) if (!(await send(next++))) failed++;
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    if (failed > 0) throw new Error(`${failed} notifications failed`);
    return { cpuUs: (used.user + used.system) / total, perSecond: total / seconds };
  }

  const env = { PUSH_NOTIFIER: "apns", APNS_KEY_FILE: fake.keyFile, APNS_KEY_ID: fake.keyId, APNS_TEAM_ID: fake.teamId, APNS_TOPIC: topic, APNS_PRODUCTION_URL: fake.url, PUSH_CONCURRENCY: String(inFlight) };
  const parley = openPushNotifier(loadConfig(env).push, { info: () => undefined, warn: (line) => process.stderr.write(`${line}\n`) });
  const nodeApn = new apn.Provider({ token: { key: fake.keyFile, keyId: fake.keyId, teamId: fake.teamId }, production: true, address: "localhost", port: Number(new URL(fake.url).port), ca });
  const apnNotification = new apn.Notification({
    alert: { title: notification.title, body: notification.body },
    badge: notification.badge,
    sound: "default",
    topic,
    pushType: "alert",
    priority: 10,
    expiry: Math.floor(Date.now() / 1000) + 86_400,
    collapseId: "conversation-4294967297",
    threadId: "4294967297",
    payload: { conversationId: "4294967297", messageId: "42", senderId: "7" },
  });

  const clients = {
    parley: async (index: number) => {
      const token = { userId: 1, deviceId: "d", token: tokens[index % tokens.length], platform: 1, isSandbox: false, updatedAt: 0 };
      const { rejected } = await parley.send([token], notification);
      return rejected.length === 0;
    },
    "@parse/node-apn": async (index: number) => (await nodeApn.send(apnNotification, tokens[index % tokens.length])).failed.length === 0,
  };
  const results: Record<string, { cpuUs: number; perSecond: number }[]> = { parley: [], "@parse/node-apn": [] };
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const [name, send] of Object.entries(clients)) {
        const result = await measure(send);
        results[name].push(result);
        process.stderr.write(`round ${round}, ${name}: ${result.cpuUs.toFixed(1)} µs client CPU per notification, ${result.perSecond.toFixed(0)}/s\n`);
      }
    }
  } finally {
    await parley.close?.();
    await nodeApn.shutdown();
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
  console.log(`| APNs client (${total} alerts, ${inFlight} in flight, median of ${rounds}) | client CPU per notification | notifications per second |`);
  console.log("|---|---|---|");
  for (const [name, runs] of Object.entries(results)) {
    console.log(`| ${name} | ${median(runs.map((r) => r.cpuUs)).toFixed(1)} µs | ${median(runs.map((r) => r.perSecond)).toFixed(0)} |`);
  }
} else {
  const tlsDir = execFileSync("bash", [join(root, "scripts/test-tls.sh")], { encoding: "utf8" }).trim();
  const child = spawn(process.execPath, ["--import", "tsx", import.meta.filename, "fake-apns"], {
    cwd: root,
    env: { ...process.env, PARLEY_TEST_TLS_DIR: tlsDir },
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    const fake = await new Promise<string>((resolve) => child.stdout.once("data", (data: Buffer) => resolve(data.toString().trim())));
    const measuring = spawn(process.execPath, ["--import", "tsx", import.meta.filename, "measure", ...process.argv.slice(2)], {
      cwd: root,
      env: { ...process.env, NODE_EXTRA_CA_CERTS: join(tlsDir, "ca.pem"), PARLEY_FAKE_APNS: fake },
      stdio: "inherit",
    });
    const code = await new Promise<number | null>((resolve) => measuring.once("exit", resolve));
    process.exitCode = code ?? 1;
  } finally {
    child.kill("SIGTERM");
    rmSync(tlsDir, { recursive: true, force: true });
  }
}
