// Servers taken from this machine's Debian packages without installing them system-wide:
// `apt-get download` fetches the .debs and `dpkg -x` unpacks them into
// ${XDG_CACHE_HOME:-~/.cache}/parley/<name>/<version>/, so no package database, /etc or running
// service changes, and every clone shares one copy. Libraries the binary needs that the machine
// lacks are unpacked beside it (the caller names them) and found through LD_LIBRARY_PATH.
//
// A run unpacks into a staging directory and renames it into place, so racing runs never see half
// a tree. A second run reuses the newest complete tree without asking apt anything.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export function parleyCacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "parley");
}

/** An unpacked package set: its root (holding usr/…), the main package's Debian version, and its library path. */
export interface UnpackedPackages {
  root: string;
  version: string;
  libraryPath: string;
}

function unpacked(root: string, version: string): UnpackedPackages {
  return { root, version, libraryPath: join(root, "usr", "lib", "x86_64-linux-gnu") };
}

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", timeout: 300_000 });
  if (result.error) throw new Error(`could not run ${command}: ${result.error.message}`);
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} failed (exit ${result.status}):\n${`${result.stdout}${result.stderr}`.slice(-2000)}`);
  return result.stdout;
}

/** The candidate version apt would install, or undefined when apt's lists do not know the package. */
function candidateVersion(name: string, cwd: string): string | undefined {
  const result = spawnSync("apt-cache", ["show", "--no-all-versions", name], { cwd, stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
  if (result.status !== 0) return undefined;
  return /^Version: (.+)$/m.exec(result.stdout)?.[1];
}

/**
 * Unpacks `packages` (the first is the one whose version names the directory) under the cache's
 * `name`/ folder once, and answers where. `apt-get update` runs only when apt's lists lack the
 * package (a fresh machine).
 */
export function unpackDebianPackages(name: string, packages: string[]): UnpackedPackages {
  const home = join(parleyCacheDir(), name);
  const complete = existsSync(home)
    ? readdirSync(home)
        .filter((entry) => !entry.startsWith(".") && existsSync(join(home, entry, "complete")))
        .sort()
    : [];
  const newest = complete.at(-1);
  if (newest !== undefined) return unpacked(join(home, newest), newest);
  mkdirSync(home, { recursive: true });
  const staging = mkdtempSync(join(home, ".staging-"));
  try {
    let version = candidateVersion(packages[0], staging);
    if (version === undefined) {
      run("apt-get", ["update"], staging);
      version = candidateVersion(packages[0], staging);
      if (version === undefined) throw new Error(`apt knows no package ${packages[0]} even after apt-get update`);
    }
    const debs = join(staging, "debs");
    const tree = join(staging, "tree");
    mkdirSync(debs);
    run("apt-get", ["download", ...packages], debs);
    for (const deb of readdirSync(debs).filter((file) => file.endsWith(".deb"))) run("dpkg", ["-x", join(debs, deb), tree], staging);
    writeFileSync(join(tree, "complete"), `${packages.join(" ")}\n${new Date().toISOString()}\n`);
    // A colon (the epoch in "5:7.0.15-1") is legal in a path but awkward in LD_LIBRARY_PATH.
    const directory = join(home, version.replaceAll(":", "_"));
    try {
      renameSync(tree, directory);
    } catch (error) {
      // Another run renamed its complete tree into place first; ours is a duplicate.
      if (!existsSync(join(directory, "complete"))) throw error;
    }
    return unpacked(directory, version);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
