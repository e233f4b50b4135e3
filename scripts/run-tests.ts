// Runs the mocha suite and ends with the one line CI reads: "N passed, N failed".
import Mocha from "mocha";
import { readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

// test/cluster runs against the local cluster, in a pass of its own (scripts/test.sh).
const clusterTests = resolve(import.meta.dirname, "..", "test", "cluster");

function collectTestFiles(dir: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name === "node_modules" || name.startsWith(".") || name === "data" || join(dir, name) === clusterTests) continue;
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
  const passed = runner.stats?.passes ?? 0;
  const failed = Math.max(runner.stats?.failures ?? 0, failures);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
});
