// What the backing services' own tests share: `npm run services` as a child process, and the
// processes still running that mention a path (nothing may be left after `down`).
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { promisify } from "node:util";

const repositoryRoot = resolve(import.meta.dirname, "../..");
const run = promisify(execFile);

/** Runs `npm run services -- <args>` with DATA_DIR and `env`; answers its standard output (rejects with its stderr on failure). */
export async function runServices(dataDir: string, args: string[], env: Record<string, string> = {}, timeoutMs = 300_000): Promise<string> {
  const { stdout } = await run(process.execPath, ["--import", "tsx", "scripts/services/main.ts", ...args], {
    cwd: repositoryRoot,
    env: { ...process.env, DATA_DIR: dataDir, ...env },
    timeout: timeoutMs,
  });
  return stdout;
}

/** Pids of live processes whose command line mentions `text`. */
export function processesMentioning(text: string): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        return readFileSync(`/proc/${name}/cmdline`, "utf8").includes(text);
      } catch {
        return false;
      }
    })
    .map(Number);
}
