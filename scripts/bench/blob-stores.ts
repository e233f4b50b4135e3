// `npx tsx scripts/bench/blob-stores.ts [--sizes 4KiB,1MiB,16MiB,64MiB] [--runs 3] [--chunk 1MiB]`:
// the blob stores side by side, local disk (DATA_DIR/media in a temporary folder) against S3 (the
// test MinIO on 127.0.0.1:9010, started if none runs, in a bucket of its own). One operation at a
// time; per size, per store: put, whole read, and a staged upload written in chunks then committed.
// Each figure is the median of its runs; latency is the median operation of a run.
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { BlobStore } from "../../ports/blob-store/blob-store.js";
import { LocalDiskBlobStore } from "../../ports/blob-store/local-disk-blob-store.js";
import { S3BlobStore } from "../../ports/blob-store/s3-blob-store.js";
import { createTestBucket, releaseTestS3, testS3 } from "../../test/support/s3.js";

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "4KiB,1MiB,16MiB,64MiB" },
    runs: { type: "string", default: "3" },
    chunk: { type: "string", default: "1MiB" },
    // Bytes moved per size and run: small sizes repeat the operation to get a measurable run.
    volume: { type: "string", default: "64MiB" },
  },
});

function parseBytes(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(B|KiB|MiB|GiB)?$/.exec(text.trim());
  if (!match) throw new Error(`not a size: ${JSON.stringify(text)} (e.g. 4KiB, 16MiB)`);
  const unit = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[match[2] ?? "B"]!;
  return Math.round(Number(match[1]) * unit);
}

const sizes = values.sizes.split(",").map(parseBytes);
const runs = Number(values.runs);
const chunk = parseBytes(values.chunk);
const volume = parseBytes(values.volume);

const median = (numbers: number[]) => {
  const sorted = [...numbers].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

const label = (bytes: number) => (bytes >= 1024 ** 2 ? `${bytes / 1024 ** 2} MiB` : bytes >= 1024 ? `${bytes / 1024} KiB` : `${bytes} B`);

interface RunFigures {
  megabytesPerSecond: number;
  latencyMs: number;
}

/** Times `count` operations one after the other. */
async function timed(count: number, bytesEach: number, operation: (index: number) => Promise<void>): Promise<RunFigures> {
  const latencies: number[] = [];
  const began = performance.now();
  for (let index = 0; index < count; index++) {
    const start = performance.now();
    await operation(index);
    latencies.push(performance.now() - start);
  }
  const seconds = (performance.now() - began) / 1000;
  return { megabytesPerSecond: (count * bytesEach) / 1024 ** 2 / seconds, latencyMs: median(latencies) };
}

let unique = 0;

async function measure(blobs: BlobStore, size: number): Promise<Record<"put" | "read" | "staged", RunFigures>> {
  const data = Buffer.alloc(size, 7);
  const count = Math.max(1, Math.min(200, Math.floor(volume / size)));
  const keys = Array.from({ length: count }, () => `b${unique++}`);
  // The source yields 64 KiB chunks, as an HTTP request body does.
  const pieces = (bytes: Buffer) => Array.from({ length: Math.ceil(bytes.length / 65_536) }, (_, i) => bytes.subarray(i * 65_536, (i + 1) * 65_536));
  const put = await timed(count, size, async (index) => {
    await blobs.put(keys[index], pieces(data));
  });
  const read = await timed(count, size, async (index) => {
    for await (const _ of await blobs.read(keys[index]));
  });
  const staged = await timed(count, size, async (index) => {
    const upload = `s${keys[index]}`;
    const parts: string[] = [];
    for (let offset = 0; offset < size; offset += chunk) {
      parts.push(`p${offset}`);
      await blobs.writeStaged(upload, `p${offset}`, data.subarray(offset, offset + chunk));
    }
    await blobs.commitStaged(upload, parts, `c${keys[index]}`, size);
  });
  await Promise.all(keys.flatMap((key) => [blobs.delete(key), blobs.delete(`c${key}`)]));
  return { put, read, staged };
}

async function main(): Promise<void> {
  const diskDir = mkdtempSync(join(tmpdir(), "parley-bench-blobs-"));
  const s3 = await testS3();
  const bucket = await createTestBucket();
  const stores: [string, BlobStore][] = [
    ["disk", await LocalDiskBlobStore.open(diskDir)],
    ["s3 (MinIO)", S3BlobStore.fromSettings({ ...s3, bucket: bucket.bucket, forcePathStyle: true })],
  ];
  console.log(`blob stores, ${cpus().length} cores, ${runs} runs, one operation at a time, staged uploads in ${label(chunk)} chunks; medians\n`);
  console.log("| size | store | put MiB/s | put ms | read MiB/s | read ms | staged+commit MiB/s | staged+commit ms |");
  console.log("|---|---|---|---|---|---|---|---|");
  try {
    for (const size of sizes) {
      for (const [name, blobs] of stores) {
        const rounds: Awaited<ReturnType<typeof measure>>[] = [];
        for (let run = 0; run < runs; run++) rounds.push(await measure(blobs, size));
        const cell = (row: "put" | "read" | "staged") => {
          const throughput = median(rounds.map((round) => round[row].megabytesPerSecond));
          const latency = median(rounds.map((round) => round[row].latencyMs));
          return `${throughput.toFixed(throughput < 10 ? 2 : 0)} | ${latency.toFixed(latency < 10 ? 2 : 1)}`;
        };
        console.log(`| ${label(size)} | ${name} | ${cell("put")} | ${cell("read")} | ${cell("staged")} |`);
      }
    }
  } finally {
    (stores[1][1] as S3BlobStore).client.destroy();
    await bucket.remove();
    await releaseTestS3();
    rmSync(diskDir, { recursive: true, force: true });
  }
}

await main();
