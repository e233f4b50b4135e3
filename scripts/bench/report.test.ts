import { expect } from "chai";
import { report } from "./report.js";
import { backingFigure, roleFigure, type Figures } from "./rows.js";

describe("benchmark report", () => {
  const shape = { groupSize: 200, concurrency: 32, runs: 3, heading: "# run" };
  const tableAfter = (text: string, header: string) => {
    const lines = text.split("\n");
    const at = lines.findIndex((line) => line.startsWith(header));
    expect(at, `a table headed ${header}`).to.be.at.least(0);
    return lines.slice(at, lines.indexOf("", at));
  };

  it("sets the backing services beside Parley's CPU with their sum, and the cluster's roles in a table of their own, out of that sum", () => {
    const privateRow: Figures = {
      cpuPerOpMs: 2,
      loopbackBytesPerOp: 9000,
      [backingFigure("cassandra")]: 1.5,
      [backingFigure("nginx")]: 0.25,
      [backingFigure(roleFigure("api"))]: 0.75,
      [backingFigure(roleFigure("engine"))]: 1,
    };
    const text = report({ private: privateRow }, shape);
    expect(tableAfter(text, "| CPU per operation, closed loop | Parley's processes")).to.deep.equal([
      "| CPU per operation, closed loop | Parley's processes | cassandra | nginx | all | bytes over loopback per op |",
      "|---|---|---|---|---|---|",
      "| SendMessage, private | 2.000 ms | 1.500 ms | 0.250 ms | 3.750 ms | 9000 |",
    ]);
    expect(tableAfter(text, "| CPU per operation, closed loop | api")).to.deep.equal([
      "| CPU per operation, closed loop | api | engine |",
      "|---|---|---|",
      "| SendMessage, private | 0.750 ms | 1.000 ms |",
    ]);
  });

  it("sets the push row apart: CPU per message without and with a notification, per notification, and the providers' rate", () => {
    const push: Figures = {
      tokenlessCpuPerOpMs: 0.3,
      cpuPerOpMs: 0.42,
      cpuPerNotificationUs: 125,
      notificationsPerSec: 2400.4,
      tokenlessOpsPerSec: 3000,
      opsPerSec: 2450,
      backlog: 50,
      undelivered: 0,
      tokenlessClientCpuPct: 40,
      clientCpuPct: 75,
    };
    const text = report({ push }, shape);
    expect(tableAfter(text, "| offline push")).to.deep.equal([
      "| offline push, closed loop, 32 in flight | server CPU per message, recipient offline: no token / one token | server CPU per notification | notifications/s to the local APNs and FCM | messages/s: no token / one token | backlog in the window / undelivered | client CPU, providers included |",
      "|---|---|---|---|---|---|---|",
      "| SendMessage, private | 0.300 ms / 0.420 ms | 125.0 µs | 2400/s | 3000 / 2450 | 50 / 0 | 40 % / 75 % |",
    ]);
    expect(text, "no cost table of the other rows").to.not.include("| operation |");
  });

  it("shows no role table for one process", () => {
    expect(report({ private: { cpuPerOpMs: 0.2, [backingFigure("cassandra")]: 0.5 } }, shape)).to.not.include("| CPU per operation, closed loop | api");
  });
});
