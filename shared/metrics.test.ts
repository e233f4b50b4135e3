import { expect } from "chai";
import { samplesOf } from "../test/support/prometheus-text.js";
import { labelMetricsWithNode, metricsRegistry } from "./metrics.js";

describe("the process's metric labels", () => {
  const labelsOfCpu = async () => samplesOf(await metricsRegistry.metrics(), "parley_process_cpu_user_seconds_total")[0]?.labels;

  it("name the roles and node ids of every node the process runs, and only while it runs them", async () => {
    const before = await labelsOfCpu();
    const unlabelEngine = labelMetricsWithNode("engine-9", ["engine"]);
    expect(await labelsOfCpu()).to.include({ role: "engine", node_id: "engine-9" });
    const unlabelEdge = labelMetricsWithNode("edge-9", ["gateway", "api"]);
    expect(await labelsOfCpu()).to.include({ role: "api,engine,gateway", node_id: "edge-9,engine-9" });
    unlabelEngine();
    expect(await labelsOfCpu()).to.include({ role: "api,gateway", node_id: "edge-9" });
    unlabelEdge();
    expect(await labelsOfCpu()).to.deep.equal(before);
  });
});
