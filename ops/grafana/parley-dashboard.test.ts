// Keeps the Grafana dashboard (parley.json) importable and in step with the code: every series
// its queries name must be one the server registers, with the labels the server gives it.
import { readFileSync } from "node:fs";
import { expect } from "chai";
// Loading the composition root loads every module that defines or binds a metric.
import "../../server.js";
import { metricsRegistry } from "../../shared/metrics.js";

interface Target {
  expr: string;
  refId: string;
  datasource?: { type?: string; uid?: string };
}

interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
}

interface Variable {
  name: string;
  type: string;
  query?: string | { query: string };
}

interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: Variable[] };
}

const dashboard = JSON.parse(readFileSync(new URL("./parley.json", import.meta.url), "utf8")) as Dashboard;
const queryPanels = dashboard.panels.filter((panel) => panel.type !== "row");
const targets = queryPanels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel, ...target })));

/** Labels every series carries (shared/metrics.ts labelMetricsWithNode). */
const processLabels = ["role", "node_id"];

/** The series names the server exposes, with their labels: each metric, and a histogram's _bucket, _sum and _count. */
function exposedSeries(): Map<string, Set<string>> {
  const series = new Map<string, Set<string>>();
  for (const metric of metricsRegistry.getMetricsAsArray() as unknown as { name: string; type: string; labelNames?: readonly string[] }[]) {
    const labels = new Set([...(metric.labelNames ?? []), ...processLabels]);
    if (metric.type !== "histogram") {
      series.set(metric.name, labels);
      continue;
    }
    series.set(`${metric.name}_bucket`, new Set([...labels, "le"]));
    series.set(`${metric.name}_sum`, labels);
    series.set(`${metric.name}_count`, labels);
  }
  return series;
}

/** `name{matchers}` selectors of a query: the series it reads and the labels it matches on. */
function selectors(expr: string): { name: string; labels: string[] }[] {
  return [...expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g)].map(([, name, matchers]) => ({
    name,
    labels: [...matchers.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)].map(([, label]) => label),
  }));
}

describe("ops/grafana/parley.json, the Grafana dashboard", () => {
  const exposed = exposedSeries();

  it("is a dashboard Grafana imports: uid, title, a recent schema, panels with unique ids on a 24-column grid without overlaps", () => {
    expect(dashboard.uid).to.match(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(dashboard.title).to.be.a("string").and.not.equal("");
    expect(dashboard.schemaVersion).to.be.within(36, 41);
    const ids = dashboard.panels.map((panel) => panel.id);
    expect(new Set(ids).size, "panel ids are unique").to.equal(ids.length);
    for (const { title, gridPos } of dashboard.panels) {
      expect(gridPos.x >= 0 && gridPos.w > 0 && gridPos.x + gridPos.w <= 24 && gridPos.h > 0 && gridPos.y >= 0, title).to.equal(true);
    }
    for (const [i, a] of dashboard.panels.entries()) {
      for (const b of dashboard.panels.slice(i + 1)) {
        const apart = a.gridPos.x + a.gridPos.w <= b.gridPos.x || b.gridPos.x + b.gridPos.w <= a.gridPos.x || a.gridPos.y + a.gridPos.h <= b.gridPos.y || b.gridPos.y + b.gridPos.h <= a.gridPos.y;
        expect(apart, `${a.title} and ${b.title} overlap`).to.equal(true);
      }
    }
  });

  it("asks for a Prometheus data source and offers role and node to filter by", () => {
    const variables = new Map(dashboard.templating.list.map((variable) => [variable.name, variable]));
    expect(variables.get("datasource")).to.include({ type: "datasource", query: "prometheus" });
    for (const name of ["role", "node"]) expect(variables.get(name)?.type, name).to.equal("query");
    for (const panel of queryPanels) {
      expect(panel.datasource?.uid, panel.title).to.equal("${datasource}");
      expect(panel.targets?.length, `${panel.title} has queries`).to.be.greaterThan(0);
      const refIds = (panel.targets ?? []).map((target) => target.refId);
      expect(new Set(refIds).size, `${panel.title} ref ids`).to.equal(refIds.length);
    }
  });

  it("writes queries with balanced brackets that use only the dashboard's variables", () => {
    const defined = new Set(dashboard.templating.list.map((variable) => variable.name));
    for (const { panel, expr } of targets) {
      const opened = [...expr].filter((c) => c === "(").length;
      expect(opened, `${panel.title}: ${expr}`).to.equal([...expr].filter((c) => c === ")").length);
      expect([...expr].filter((c) => c === "{").length, `${panel.title}: ${expr}`).to.equal([...expr].filter((c) => c === "}").length);
      for (const [, variable] of expr.matchAll(/\$(\w+)/g)) expect(variable.startsWith("__") || defined.has(variable), `${panel.title}: $${variable}`).to.equal(true);
    }
  });

  it("reads only series the server registers, matching and grouping on labels they have", () => {
    expect(targets.length).to.be.greaterThan(30);
    for (const { panel, expr } of targets) {
      const read = selectors(expr);
      expect(read.length, `${panel.title}: ${expr} names its series with a selector`).to.be.greaterThan(0);
      for (const name of expr.match(/\bparley_[a-z0-9_]+\b/g) ?? []) expect(exposed.has(name), `${panel.title}: ${name} is not registered`).to.equal(true);
      const known = new Set<string>();
      for (const { name, labels } of read) {
        const has = exposed.get(name);
        expect(has, `${panel.title}: ${name} is not a series of the server`).to.not.equal(undefined);
        for (const label of labels) expect(has!.has(label), `${panel.title}: ${name} has no label ${label}`).to.equal(true);
        for (const label of has!) known.add(label);
      }
      for (const [, grouping] of expr.matchAll(/\bby\s*\(([^)]*)\)/g)) {
        for (const label of grouping.split(",").map((part) => part.trim())) expect(known.has(label), `${panel.title}: grouped by ${label}, which ${expr} does not have`).to.equal(true);
      }
      if (expr.includes("histogram_quantile")) expect(read.every(({ name }) => name.endsWith("_bucket")), `${panel.title}: quantiles of buckets`).to.equal(true);
    }
  });

  it("lists the values of its variables from a registered series and label", () => {
    for (const variable of dashboard.templating.list.filter((candidate) => candidate.type === "query")) {
      const query = typeof variable.query === "string" ? variable.query : variable.query?.query ?? "";
      const found = /^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$/.exec(query);
      expect(found, `${variable.name}: ${query}`).to.not.equal(null);
      expect(exposed.get(found![1])?.has(found![2]), `${variable.name}: ${query}`).to.equal(true);
    }
  });
});
