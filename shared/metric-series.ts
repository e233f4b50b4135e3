// Metrics for hot paths. prom-client turns the label values of every inc() or observe() into a
// string key and looks the series up by it, bound children included. A series here is bound to
// its label values once (at module load or when its adapter opens), so counting is arithmetic on
// numbers the series object holds: no label object, no key, no lookup per event. The registry
// reads the numbers only when /metrics is served.
//
// Gauges that describe state other objects hold (open streams, a send backlog, consumer lag) are
// read at that moment too, from the sources registered with them, so nothing is kept up to date
// per event.
import { Counter, Gauge, type Metric, type Registry } from "prom-client";

export type LabelSet<L extends string> = Readonly<Record<L, string>>;

export interface MetricDefinition<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
}

/** A key for a label set, used only when binding (never per event), so binding twice answers the same series. */
function keyOf(labels: Readonly<Record<string, string>>): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** One series of a BoundCounter. */
export class CounterSeries {
  value = 0;

  constructor(readonly labels: Readonly<Record<string, string>>) {}

  inc(by = 1): void {
    this.value += by;
  }
}

/** A counter whose series are bound up front; see the file comment. */
export class BoundCounter<L extends string> {
  private readonly series = new Map<string, CounterSeries>();

  constructor(registry: Registry, definition: MetricDefinition<L>) {
    const series = this.series;
    new Counter<string>({
      name: definition.name,
      help: definition.help,
      labelNames: definition.labelNames,
      registers: [registry],
      collect() {
        this.reset();
        for (const one of series.values()) this.inc(one.labels, one.value);
      },
    });
  }

  /** The series of these label values, created at zero on first binding. */
  bind(labels: LabelSet<L>): CounterSeries {
    const key = keyOf(labels);
    let one = this.series.get(key);
    if (!one) this.series.set(key, (one = new CounterSeries({ ...labels })));
    return one;
  }
}

/** One series of a BoundHistogram. */
export class HistogramSeries {
  /** Observations per bucket, not cumulative: bucket i holds those above bound i-1 up to bound i. */
  private readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Readonly<Record<string, string>>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    let bucket = 0;
    while (bucket < bounds.length && value > bounds[bucket]) bucket++;
    // Above the last bound only +Inf holds it, and +Inf is the count.
    if (bucket < bounds.length) this.counts[bucket] += 1;
    this.sum += value;
    this.count += 1;
  }

  /** Observes the seconds elapsed since `startedAt`, a performance.now() reading. */
  observeSince(startedAt: number): void {
    this.observe((performance.now() - startedAt) / 1000);
  }

  /** Cumulative counts per bound, as Prometheus's `le` buckets are. */
  cumulative(): number[] {
    let total = 0;
    return Array.from(this.counts, (count) => (total += count));
  }

  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}

interface ExportedValue {
  metricName: string;
  labels: Record<string, string | number>;
  value: number;
}

/**
 * A histogram whose series are bound up front; see the file comment. The registry reads a metric
 * through get(), name and type, so this object is registered as one: prom-client's own Histogram
 * cannot be fed counts that were kept elsewhere.
 */
export class BoundHistogram<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly bounds: readonly number[];
  private readonly series = new Map<string, HistogramSeries>();

  constructor(registry: Registry, definition: MetricDefinition<L> & { buckets: readonly number[] }) {
    this.name = definition.name;
    this.help = definition.help;
    this.labelNames = [...definition.labelNames];
    this.bounds = [...definition.buckets].sort((a, b) => a - b);
    registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values, created empty on first binding. */
  bind(labels: LabelSet<L>): HistogramSeries {
    const key = keyOf(labels);
    let one = this.series.get(key);
    if (!one) this.series.set(key, (one = new HistogramSeries({ ...labels }, this.bounds)));
    return one;
  }

  /** The exposition of every bound series: its buckets, sum and count. */
  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: ExportedValue[] }> {
    const values: ExportedValue[] = [];
    for (const one of this.series.values()) {
      const cumulative = one.cumulative();
      this.bounds.forEach((bound, index) => values.push({ metricName: `${this.name}_bucket`, labels: { le: bound, ...one.labels }, value: cumulative[index] }));
      values.push({ metricName: `${this.name}_bucket`, labels: { le: "+Inf", ...one.labels }, value: one.count });
      values.push({ metricName: `${this.name}_sum`, labels: { ...one.labels }, value: one.sum });
      values.push({ metricName: `${this.name}_count`, labels: { ...one.labels }, value: one.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    for (const one of this.series.values()) one.reset();
  }
}

/** A reading of a sampled gauge's source; undefined when it has nothing to say now. */
export type Reading = number | undefined | Promise<number | undefined>;

/** How long one source may take to answer a scrape before it is left out of it. */
const readingTimeoutMs = 2_000;

async function boundedReading(read: () => Reading): Promise<number | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), readingTimeoutMs);
    timer.unref();
  });
  try {
    return await Promise.race([Promise.resolve().then(read), late]);
  } catch {
    // A source that cannot answer (a backing service down) is left out of this scrape; the scrape still answers.
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A gauge read from its sources when /metrics is served, summed per label set: one process may
 * hold several sources of one series (the nodes a test runs in one process, several consumers).
 */
export class SampledGauge<L extends string> {
  private readonly sources = new Set<{ labels: Readonly<Record<string, string>>; read: () => Reading }>();

  constructor(registry: Registry, definition: MetricDefinition<L>) {
    const sources = this.sources;
    new Gauge<string>({
      name: definition.name,
      help: definition.help,
      labelNames: definition.labelNames,
      registers: [registry],
      async collect() {
        const listed = [...sources];
        const readings = await Promise.all(listed.map((source) => boundedReading(source.read)));
        this.reset();
        listed.forEach((source, index) => {
          const reading = readings[index];
          if (reading !== undefined) this.inc(source.labels, reading);
        });
      },
    });
  }

  /** Adds a source of the series with these labels; answers the call that removes it. */
  sample(labels: LabelSet<L>, read: () => Reading): () => void {
    const source = { labels: { ...labels }, read };
    this.sources.add(source);
    return () => void this.sources.delete(source);
  }
}
