// `npm run infra:check`: infra/terraform/ formatted (`tofu fmt -check`), valid against the
// kubernetes provider's schema (`tofu validate`) and planning as its tests expect (`tofu test`,
// mocked provider), all offline with OpenTofu and the provider built from the Go module proxy
// (scripts/infra/tofu.ts). A machine's first run builds both (about 10 minutes on two cores, once);
// later runs take seconds.
// Exits 0 only when every step passed.
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { prepareTofu, toolsBuilt, type Run, type Tofu } from "./tofu.js";

export const terraformDir = resolve(import.meta.dirname, "..", "..", "infra", "terraform");

/**
 * Copies the configuration into `into`/terraform and answers that path. init writes .terraform/
 * and a lock file whose hashes are those of this machine's provider build: they belong to the
 * working copy, not to the repository.
 */
export function copyConfiguration(into: string, from = terraformDir): string {
  const target = join(into, "terraform");
  cpSync(from, target, { recursive: true, filter: (source) => !basename(source).startsWith(".terraform") });
  return target;
}

export interface Step {
  name: string;
  ok: boolean;
  output: string;
  seconds: number;
}

async function step(name: string, work: () => Promise<Run>, passed: (result: Run) => boolean = (result) => result.code === 0): Promise<Step> {
  const started = performance.now();
  const result = await work();
  return { name, ok: passed(result), output: `${result.stdout}${result.stderr}`.trim(), seconds: (performance.now() - started) / 1000 };
}

/** `tofu init` of a copy in `dir`: the provider from the mirror, no backend. */
export function init(tofu: Tofu, dir: string): Promise<Run> {
  return tofu.run([`-chdir=${dir}`, "init", "-backend=false", "-input=false", "-no-color"]);
}

/** Whether `tofu validate -json` found the configuration valid (its exit status alone says so too, the JSON says why not). */
export function validated(result: Run): boolean {
  if (result.code !== 0) return false;
  const report = JSON.parse(result.stdout) as { valid?: boolean; error_count?: number };
  return report.valid === true && report.error_count === 0;
}

/** Every check, in order; stops after a failed init (nothing after it can run). */
export async function checkInfra(tofu: Tofu): Promise<Step[]> {
  const steps: Step[] = [];
  steps.push(await step("tofu fmt -check -recursive", () => tofu.run(["fmt", "-check", "-recursive", "-diff", "-no-color", terraformDir])));
  const work = mkdtempSync(join(tmpdir(), "parley-infra-"));
  try {
    const dir = copyConfiguration(work);
    const initialized = await step("tofu init -backend=false", () => init(tofu, dir));
    steps.push(initialized);
    if (!initialized.ok) return steps;
    steps.push(await step("tofu validate", () => tofu.run([`-chdir=${dir}`, "validate", "-json", "-no-color"]), validated));
    steps.push(await step("tofu test", () => tofu.run([`-chdir=${dir}`, "test", "-no-color"])));
    return steps;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  const started = performance.now();
  const built = toolsBuilt();
  if (!built) console.log("building OpenTofu and the kubernetes provider from the Go module proxy (once; minutes)…");
  const tofu = await prepareTofu();
  if (!built) console.log(`built in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  try {
    const steps = await checkInfra(tofu);
    for (const { name, ok, output, seconds } of steps) {
      console.log(`${ok ? "ok  " : "FAIL"} ${name} (${seconds.toFixed(1)} s)`);
      if (!ok) console.log(output.replace(/^/gm, "     "));
    }
    return steps.length >= 4 && steps.every((s) => s.ok) ? 0 : 1;
  } finally {
    tofu.dispose();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  main().then(
    (status) => process.exit(status),
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exit(1);
    },
  );
}
