// Runs the mocha suite and ends with the one line CI reads: "N passed, N failed".
import Mocha from "mocha";
import { readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

// test/cluster runs against the local cluster, in a pass of its own (scripts/test.sh); test/image
// builds and runs the OCI image, its own npm script (`npm run test:image`, in .ci/run).
const ownPasses = new Set(["cluster", "image"].map((name) => resolve(import.meta.dirname, "..", "test", name)));

function collectTestFiles(dir: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name === "node_modules" || name.startsWith(".") || name === "data" || name === "dist" || ownPasses.has(join(dir, name))) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) found.push(...collectTestFiles(path));
    else if (name.endsWith(".test.ts")) found.push(path);
  }
  return found;
}

const root = resolve(import.meta.dirname, "..");
const only = process.argv.slice(2);
const files = only.length > 0 ? only.map((f) => resolve(f)) : collectTestFiles(root).sort();

const mocha = new Mocha({ reporter: "spec", timeout: 30_000 });
for (const file of files) mocha.addFile(file);
await mocha.loadFilesAsync();
const runner = mocha.run((failures) => {
  printSlowestFiles();
  printFailedTests();
  const passed = runner.stats?.passes ?? 0;
  const failed = Math.max(runner.stats?.failures ?? 0, failures);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
});

// Where the time goes, so that a slow file is seen (the budget for the whole of npm test is 25 min):
// each file's wall time, hooks (server starts) included.
const fileStartedAt = new Map<string, number>();
const fileMs = new Map<string, number>();
runner.on("suite", (suite) => {
  if (suite.file && !fileStartedAt.has(suite.file)) fileStartedAt.set(suite.file, performance.now());
});
runner.on("suite end", (suite) => {
  const startedAt = suite.file ? fileStartedAt.get(suite.file) : undefined;
  if (startedAt !== undefined && suite.parent?.root) fileMs.set(suite.file!, performance.now() - startedAt);
});

// A CI record may keep only the tail of the output, so each failure is named again beside the summary:
// one line each, with a fixed prefix that scripts/test.sh and .ci/run gather from every pass.
const failedTests: string[] = [];
runner.on("fail", (test, error: unknown) => {
  const file = test.file ? test.file.slice(root.length + 1) : "(no file)";
  const message = error instanceof Error ? error.message : String(error);
  failedTests.push(`FAILED ${file}: ${test.fullTitle()}: ${message.split("\n")[0]!.slice(0, 300)}`);
});

function printFailedTests(): void {
  if (failedTests.length === 0) return;
  console.log("");
  for (const line of failedTests) console.log(line);
}

function printSlowestFiles(): void {
  const slowest = [...fileMs].sort((a, b) => b[1] - a[1]).slice(0, 12);
  if (slowest.length < 2) return;
  console.log("\nslowest files (wall time, hooks included):");
  for (const [file, ms] of slowest) console.log(`  ${(ms / 1000).toFixed(1).padStart(6)} s  ${file.slice(root.length + 1)}`);
}
