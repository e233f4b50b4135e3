import { expect } from "chai";
import { Registry } from "prom-client";
import { parseSamples, samplesOf, sumOf } from "../test/support/prometheus-text.js";
import { BoundCounter, BoundHistogram, SampledGauge } from "./metric-series.js";

describe("metric series bound up front", () => {
  let registry: Registry;
  beforeEach(() => {
    registry = new Registry();
  });

  it("a counter answers the same series for the same labels and shows every bound series, at zero until counted", async () => {
    const counter = new BoundCounter(registry, { name: "t_events_total", help: "events", labelNames: ["kind"] });
    const a = counter.bind({ kind: "a" });
    counter.bind({ kind: "b" });
    expect(counter.bind({ kind: "a" })).to.equal(a);
    a.inc();
    a.inc(2);
    const text = await registry.metrics();
    expect(text).to.include("# TYPE t_events_total counter");
    expect(samplesOf(text, "t_events_total").map((sample) => [sample.labels.kind, sample.value])).to.deep.equal([
      ["a", 3],
      ["b", 0],
    ]);
    // Read again, it neither loses nor doubles what it showed.
    expect(sumOf(await registry.metrics(), "t_events_total", { kind: "a" })).to.equal(3);
  });

  it("a histogram shows cumulative buckets up to +Inf, its sum and its count, per bound series", async () => {
    const histogram = new BoundHistogram(registry, { name: "t_seconds", help: "time", labelNames: ["op"], buckets: [0.5, 0.1, 1] });
    const read = histogram.bind({ op: "read" });
    histogram.bind({ op: "write" });
    for (const value of [0.05, 0.1, 0.3, 0.7, 3]) read.observe(value);
    const text = await registry.metrics();
    expect(text).to.include("# TYPE t_seconds histogram");
    const buckets = samplesOf(text, "t_seconds_bucket", { op: "read" }).map((sample) => [sample.labels.le, sample.value]);
    expect(buckets).to.deep.equal([
      ["0.1", 2],
      ["0.5", 3],
      ["1", 4],
      ["+Inf", 5],
    ]);
    expect(sumOf(text, "t_seconds_sum", { op: "read" })).to.be.closeTo(4.15, 1e-9);
    expect(sumOf(text, "t_seconds_count", { op: "read" })).to.equal(5);
    expect(sumOf(text, "t_seconds_count", { op: "write" })).to.equal(0);
    // Every line is a valid sample (the text parser throws on any other).
    expect(parseSamples(text).length).to.equal(2 * (4 + 2));
  });

  it("a histogram times the seconds since a performance.now() reading", async () => {
    const series = new BoundHistogram(registry, { name: "t_elapsed_seconds", help: "time", labelNames: [], buckets: [0.001, 10] }).bind({});
    const startedAt = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 20));
    series.observeSince(startedAt);
    const text = await registry.metrics();
    expect(sumOf(text, "t_elapsed_seconds_sum")).to.be.within(0.015, 5);
    expect(samplesOf(text, "t_elapsed_seconds_bucket", { le: "0.001" })[0].value).to.equal(0);
  });

  it("a sampled gauge sums its sources per label set when read, and forgets a removed source", async () => {
    const gauge = new SampledGauge(registry, { name: "t_open", help: "open things", labelNames: ["state"] });
    let held = 2;
    gauge.sample({ state: "busy" }, () => held);
    const removeOther = gauge.sample({ state: "busy" }, async () => 3);
    gauge.sample({ state: "idle" }, () => 1);
    expect(sumOf(await registry.metrics(), "t_open", { state: "busy" })).to.equal(5);
    held = 7;
    removeOther();
    const text = await registry.metrics();
    expect(sumOf(text, "t_open", { state: "busy" })).to.equal(7);
    expect(sumOf(text, "t_open", { state: "idle" })).to.equal(1);
  });

  it("a sampled gauge leaves out a source that fails or has nothing to say, and still answers", async () => {
    const gauge = new SampledGauge(registry, { name: "t_lag", help: "lag", labelNames: ["group"] });
    gauge.sample({ group: "up" }, () => 4);
    gauge.sample({ group: "down" }, async () => {
      throw new Error("broker unreachable");
    });
    gauge.sample({ group: "unknown" }, () => undefined);
    const text = await registry.metrics();
    expect(samplesOf(text, "t_lag").map((sample) => sample.labels.group)).to.deep.equal(["up"]);
  });

  it("a sampled gauge does not wait more than 2 s for a source that never answers", async function () {
    this.timeout(10_000);
    const gauge = new SampledGauge(registry, { name: "t_stuck", help: "stuck", labelNames: [] });
    gauge.sample({}, () => new Promise<number>(() => {}));
    const startedAt = performance.now();
    const text = await registry.metrics();
    expect(performance.now() - startedAt).to.be.within(1_900, 4_000);
    expect(sumOf(text, "t_stuck")).to.equal(0);
  });
});
