// nats-server built from source with the Go toolchain (`go install`, modules from the Go module
// proxy) into ${XDG_CACHE_HOME:-~/.cache}/parley/nats-server/<version>/: Debian has no package of
// it, and no prebuilt binary can be fetched here. About 20 s to build once, then reused.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parleyCacheDir } from "./debian-packages.js";

/** The newest release on the Go module proxy when this was written; builds with Go 1.26. */
export const natsServerVersion = "v2.15.2";

/** Builds nats-server once per version and answers the binary's path. */
export function installNatsServer(): string {
  const home = join(parleyCacheDir(), "nats-server");
  const binary = join(home, natsServerVersion, "nats-server");
  if (existsSync(binary)) return binary;
  mkdirSync(home, { recursive: true });
  const staging = mkdtempSync(join(home, ".staging-"));
  try {
    const result = spawnSync("go", ["install", `github.com/nats-io/nats-server/v2@${natsServerVersion}`], {
      cwd: staging,
      env: { ...process.env, GOBIN: staging, GOFLAGS: "-mod=mod" },
      stdio: ["ignore", "pipe", "pipe"],
      encoding: "utf8",
      timeout: 600_000,
    });
    if (result.error) throw new Error(`could not run go: ${result.error.message}; the Go toolchain builds nats-server`);
    if (result.status !== 0) throw new Error(`go install nats-server@${natsServerVersion} failed:\n${`${result.stdout}${result.stderr}`.slice(-2000)}`);
    try {
      renameSync(staging, join(home, natsServerVersion));
    } catch (error) {
      // Another run renamed its build into place first; ours is a duplicate.
      if (!existsSync(binary)) throw error;
    }
    return binary;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
