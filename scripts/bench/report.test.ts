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

  it("shows no role table for one process", () => {
    expect(report({ private: { cpuPerOpMs: 0.2, [backingFigure("cassandra")]: 0.5 } }, shape)).to.not.include("| CPU per operation, closed loop | api");
  });
});
