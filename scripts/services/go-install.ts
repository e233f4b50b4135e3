// Tools that these machines' registries carry only as Go source (MinIO, k6, OpenTofu and its
// providers) are built with `go install` through the Go module proxy, once per version, into
// ${XDG_CACHE_HOME:-~/.cache}/parley/<tool>/<version>/bin, shared by every clone. A build takes
// minutes on two cores; it runs in a staging directory renamed into place, so racing runs never
// see half a binary, and one build at a time runs per tool and version.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { withLock } from "./daemon.js";

export interface GoTool {
  /** The cache folder's name: ~/.cache/parley/<tool>. */
  tool: string;
  /** The package path `go install` builds, e.g. go.k6.io/k6. */
  packagePath: string;
  version: string;
  /** The binary `go install` leaves in GOBIN. */
  binary: string;
  /** Extra environment for the build (CGO_ENABLED, build tags, …). */
  env?: Record<string, string>;
  /** What the tool needs of Go, for the error when `go` is missing. */
  needs?: string;
}

const buildTimeoutMs = 30 * 60_000;

export function goToolsCache(tool: string): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "parley", tool);
}

/** The binary's path once built: it may not exist yet. */
export function goToolPath(spec: GoTool): string {
  return join(goToolsCache(spec.tool), spec.version, "bin", spec.binary);
}

/** Builds the tool into the shared cache (once per version) and answers the binary's path. */
export async function installGoTool(spec: GoTool): Promise<string> {
  const root = goToolsCache(spec.tool);
  const installed = join(root, spec.version);
  const binary = goToolPath(spec);
  if (existsSync(binary)) return binary;
  mkdirSync(root, { recursive: true });
  // Two builds at once would take twice the minutes for the same binary.
  return withLock(
    join(root, `${spec.version}.lock`),
    async () => {
      if (existsSync(binary)) return binary;
      const staging = mkdtempSync(join(root, `.${spec.version}-staging-`));
      try {
        const env = { ...process.env, GOBIN: join(staging, "bin"), GOFLAGS: "-buildvcs=false", ...spec.env };
        const target = `${spec.packagePath}@${spec.version}`;
        const go = await runGo(["install", target], env, staging, spec.needs ?? `Go is needed to build ${spec.tool}`);
        if (!go.ok || !existsSync(join(staging, "bin", spec.binary))) throw new Error(`go install ${target} failed:\n${go.output}`);
        writeFileSync(join(staging, "complete"), `${new Date().toISOString()}\n`);
        renameSync(staging, installed);
      } finally {
        rmSync(staging, { recursive: true, force: true });
      }
      return binary;
    },
    buildTimeoutMs,
  );
}

function runGo(args: string[], env: NodeJS.ProcessEnv, cwd: string, needs: string): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("go", args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString("utf8")).slice(-8000);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    const timer = setTimeout(() => child.kill("SIGKILL"), buildTimeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run go: ${error.message}; ${needs}`, { cause: error }));
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ ok: code === 0, output });
    });
  });
}
