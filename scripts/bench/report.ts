// The summary: markdown tables (cost and throughput, latency at a fixed rate, memory per idle
// socket, offline push), medians of the runs, each figure next to the issue's target for it where
// the issue set one.
import { backingFigure, roleFigure, type Figures, type RowName } from "./rows.js";

export const targets = {
  private: { cpu: "≤ 0.35 ms", p99: "≤ 10 ms" },
  group: { cpu: "≤ 25 µs per recipient", p99: "≤ 50 ms" },
  delta: { cpu: "≤ 0.15 ms", p99: "≤ 5 ms" },
  rpc: { cpu: "≤ 0.12 ms" },
  rss: { memory: "≤ 8 KB" },
} as const;

const known = (n: number | undefined): n is number => n !== undefined && Number.isFinite(n);
const ms = (n: number | undefined, digits = 3) => (known(n) ? `${n.toFixed(digits)} ms` : "n/a");
const us = (n: number | undefined) => (known(n) ? `${n.toFixed(1)} µs` : "n/a");
const count = (n: number | undefined) => (known(n) ? n.toFixed(0) : "n/a");
const pct = (n: number | undefined) => (known(n) ? `${n.toFixed(0)} %` : "n/a");
const latency = (n: number | undefined) => (known(n) ? `${n.toFixed(n < 10 ? 2 : 1)} ms` : "n/a");

export interface ReportShape {
  groupSize: number;
  concurrency: number;
  runs: number;
  heading: string;
}

export function report(results: Partial<Record<RowName, Figures>>, shape: ReportShape): string {
  const lines: string[] = [shape.heading, ""];
  const { private: p, group: g, delta: d, rpc: r, rss, push } = results;
  const fanOutNames = { private: "SendMessage, private", group: `SendMessage, ${shape.groupSize}-member group`, delta: "PushStreamDelta, private stream" } as const;

  if (p || g || d || r) {
    lines.push(
      `| operation | server CPU per op | per delivery | relay CPU per delivery (same run) | CPU target | throughput, ${shape.concurrency} in flight | relay throughput | client CPU |`,
      "|---|---|---|---|---|---|---|---|",
    );
    for (const [row, f] of [["private", p], ["group", g], ["delta", d]] as const) {
      if (!f) continue;
      lines.push(
        `| ${fanOutNames[row]} | ${ms(f.cpuPerOpMs)} | ${us(f.cpuPerDeliveryUs)} | ${us(f.relayCpuPerDeliveryUs)} | ${targets[row].cpu} | ${count(f.opsPerSec)} op/s | ${count(f.relayOpsPerSec)} op/s | ${pct(f.clientCpuPct)} |`,
      );
    }
    if (r) {
      lines.push(
        `| GetProfile (trivial authenticated RPC) | ${ms(r.cpuPerOpMs)} | | node:http JSON echo: ${ms(r.echoCpuPerOpMs)} per request | ${targets.rpc.cpu} | ${count(r.opsPerSec)} req/s | echo: ${count(r.echoOpsPerSec)} req/s | ${pct(r.clientCpuPct)} |`,
      );
    }
    lines.push("");
  }

  if (p || g || d) {
    lines.push(
      "| at a fixed rate (open loop) | offered / sent | send→push p50 / p99, per delivery | p99 until every recipient has it | p99 target | server CPU per op at this rate | late sends | lost or failed | client CPU |",
      "|---|---|---|---|---|---|---|---|---|",
    );
    for (const [row, f] of [["private", p], ["group", g], ["delta", d]] as const) {
      if (!f) continue;
      const every = row === "group" ? latency(f.messageP99Ms) : "";
      lines.push(
        `| ${fanOutNames[row]} | ${count(f.rate)}/s / ${count(f.sentRate)}/s | ${latency(f.p50Ms)} / ${latency(f.p99Ms)} | ${every} | ${targets[row].p99} | ${ms(f.openCpuPerOpMs)} | ${count(f.late)}${known(f.late) && f.late > 0 ? ` (max ${latency(f.maxLateMs)})` : ""} | ${count(f.openFailed)} | ${pct(f.openClientCpuPct)} |`,
      );
    }
    lines.push("");
  }

  // What the backing services spent on the same operations, beside Parley's own processes: Parley's
  // CPU alone hides work moved into the store (a Paxos round is Cassandra's CPU, not Parley's).
  const measured = [...new Set([p, g, d, r].flatMap((f) => Object.keys(f ?? {}).filter((key) => key.startsWith("backing:")).map((key) => key.slice("backing:".length))))];
  const roles = measured.filter((name) => name.startsWith(roleFigure("")));
  const services = measured.filter((name) => !roles.includes(name));
  if (services.length > 0) {
    lines.push(
      `| CPU per operation, closed loop | Parley's processes | ${services.join(" | ")} | all | bytes over loopback per op |`,
      `|---|---|${services.map(() => "---|").join("")}---|---|`,
    );
    for (const [name, f] of [[fanOutNames.private, p], [fanOutNames.group, g], [fanOutNames.delta, d], ["GetProfile", r]] as const) {
      if (!f) continue;
      const perService = services.map((service) => f[backingFigure(service)]);
      const all = known(f.cpuPerOpMs) && perService.every(known) ? f.cpuPerOpMs + perService.reduce((sum, n) => sum + n, 0) : undefined;
      lines.push(`| ${name} | ${ms(f.cpuPerOpMs)} | ${perService.map((n) => ms(n)).join(" | ")} | ${ms(all)} | ${count(f.loopbackBytesPerOp)} |`);
    }
    lines.push("");
  }
  // The cluster's own processes by role: the per-role costs a capacity plan multiplies out.
  if (roles.length > 0) {
    lines.push(`| CPU per operation, closed loop | ${roles.map((role) => role.slice(roleFigure("").length)).join(" | ")} |`, `|---|${roles.map(() => "---|").join("")}`);
    for (const [name, f] of [[fanOutNames.private, p], [fanOutNames.group, g], [fanOutNames.delta, d], ["GetProfile", r]] as const) {
      if (f) lines.push(`| ${name} | ${roles.map((role) => ms(f[backingFigure(role)])).join(" | ")} |`);
    }
    lines.push("");
  }

  if (rss) {
    lines.push(
      "| idle authenticated sockets | server RSS before → after | RSS per idle socket | target |",
      "|---|---|---|---|",
      `| ${count(rss.idleSockets)} | ${count(rss.rssBeforeMb)} → ${count(rss.rssAfterMb)} MiB | ${known(rss.rssPerSocketKb) ? rss.rssPerSocketKb.toFixed(2) : "n/a"} KiB | ${targets.rss.memory} |`,
      "",
    );
  }

  // The providers are local stand-ins in the load generator's process: their CPU is the client's.
  if (push) {
    lines.push(
      `| offline push, closed loop, ${shape.concurrency} in flight | server CPU per message, recipient offline: no token / one token | server CPU per notification | notifications/s to the local APNs and FCM | messages/s: no token / one token | backlog in the window / undelivered | client CPU, providers included |`,
      "|---|---|---|---|---|---|---|",
      `| SendMessage, private | ${ms(push.tokenlessCpuPerOpMs)} / ${ms(push.cpuPerOpMs)} | ${us(push.cpuPerNotificationUs)} | ${count(push.notificationsPerSec)}/s | ${count(push.tokenlessOpsPerSec)} / ${count(push.opsPerSec)} | ${count(push.backlog)} / ${count(push.undelivered)} | ${pct(push.tokenlessClientCpuPct)} / ${pct(push.clientCpuPct)} |`,
      "",
    );
  }
  return lines.join("\n");
}
