// Reads samples out of the Prometheus text /metrics serves, for tests of what it says.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const sampleLine = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const labelPair = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Every sample of the text; a line that is neither a comment nor a sample fails the test. */
export function parseSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = sampleLine.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, name, value] of (match[2] ?? "").matchAll(labelPair)) labels[name] = value.replace(/\\(.)/g, (_, escaped: string) => (escaped === "n" ? "\n" : escaped));
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The samples of `name` whose labels include every pair of `labels`. */
export function samplesOf(text: string, name: string, labels: Record<string, string> = {}): Sample[] {
  return parseSamples(text).filter((sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value));
}

/** The sum of those samples; 0 when there is none. */
export function sumOf(text: string, name: string, labels: Record<string, string> = {}): number {
  return samplesOf(text, name, labels).reduce((sum, sample) => sum + sample.value, 0);
}

/** What GET /metrics answers at this base URL. */
export async function scrape(baseUrl: string): Promise<string> {
  const response = await fetch(baseUrl + "/metrics");
  if (response.status !== 200) throw new Error(`GET /metrics answered ${response.status}`);
  return response.text();
}
