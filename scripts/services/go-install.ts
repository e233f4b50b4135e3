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
  /**
   * Builds the binary to `output` when `go install <packagePath>@<version>` cannot (a module
   * whose go.mod has replace directives, or that needs release ldflags). Throws on failure.
   */
  build?: (output: string, env: NodeJS.ProcessEnv) => Promise<void>;
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
        const output = join(staging, "bin", spec.binary);
        if (spec.build) await spec.build(output, env);
        else {
          const target = `${spec.packagePath}@${spec.version}`;
          const go = await runGo(["install", target], { cwd: staging, env, needs: spec.needs });
          if (go.code !== 0) throw new Error(`go install ${target} failed:\n${go.output}`);
        }
        if (!existsSync(output)) throw new Error(`building ${spec.tool} ${spec.version} left no ${spec.binary}`);
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

export interface ProgramRun {
  code: number;
  stdout: string;
  stderr: string;
  /** The last 8,000 characters of both, interleaved as printed: for an error message. */
  output: string;
}

/** Runs a program to its end and keeps what it printed (the last 200,000 characters of each stream). */
export function runProgram(program: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; needs?: string } = {}): Promise<ProgramRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let [stdout, stderr, output] = ["", "", ""];
    child.stdout.on("data", (chunk: Buffer) => {
      stdout = (stdout + chunk.toString("utf8")).slice(-200_000);
      output = (output + chunk.toString("utf8")).slice(-8000);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString("utf8")).slice(-200_000);
      output = (output + chunk.toString("utf8")).slice(-8000);
    });
    const timer = options.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), options.timeoutMs) : undefined;
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run ${program}: ${error.message}${options.needs ? `; ${options.needs}` : ""}`, { cause: error }));
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr, output });
    });
  });
}

/** `go <args>` under the build time limit. */
export function runGo(args: string[], options: { cwd: string; env: NodeJS.ProcessEnv; needs?: string }): Promise<ProgramRun> {
  return runProgram("go", args, { ...options, timeoutMs: buildTimeoutMs, needs: options.needs ?? "Go is needed to build this tool" });
}
