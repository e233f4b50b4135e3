// OpenTofu and the hashicorp/kubernetes provider, built from the Go module proxy (neither
// registry.opentofu.org, registry.terraform.io nor GitHub is reachable from these machines), so
// that infra/terraform/ is formatted, validated and plan-tested offline.
//
// Both are built once per version into ${XDG_CACHE_HOME:-~/.cache}/parley/<tool>/<version>/bin,
// shared by every clone, under a lock, in a staging directory renamed into place (as MinIO and k6:
// scripts/services/go-install.ts). The provider reaches OpenTofu through a filesystem mirror only,
// named by a CLI configuration (TF_CLI_CONFIG_FILE) without a direct installation method, so
// `tofu init` never tries the network.
import { existsSync, linkSync, copyFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { goToolPath, installGoTool, runGo, runProgram, type GoTool, type ProgramRun } from "../services/go-install.js";

/**
 * OpenTofu's newest release on the proxy when this was written (go.mod: go 1.26.6, so it builds
 * with this machine's go1.26.8; the 1.10 line would too, but 1.12 is the maintained one).
 */
export const tofuModule = "github.com/opentofu/opentofu";
export const tofuVersion = "v1.12.6";

/**
 * The provider's tags from v2.0.0 on are not Go module versions (its module path has no /v2 or
 * /v3 suffix), so the proxy serves them only as pseudo-versions of a v1.13.4 that never existed.
 * This one is master of 2026-08-21: its CHANGELOG.md tops at "3.2.1 (Jun 30, 2026)", its
 * version/VERSION says 3.2.1, and .changelog/ holds one entry newer than that release (2959:
 * grpc and x/crypto bumped for advisories, no schema change). So it is installed, and pinned in
 * versions.tf, as 3.2.1.
 */
export const kubernetesProvider: GoTool = {
  tool: "terraform-provider-kubernetes",
  packagePath: "github.com/hashicorp/terraform-provider-kubernetes",
  version: "v1.13.4-0.20260821094251-3a33fb6cc605",
  binary: "terraform-provider-kubernetes",
  env: { CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false -trimpath" },
  needs: "the kubernetes provider needs Go ≥ 1.26.3",
};
export const kubernetesProviderRelease = "3.2.1";
/** Where OpenTofu looks for `hashicorp/kubernetes` (the source address in versions.tf). */
export const kubernetesProviderAddress = "registry.opentofu.org/hashicorp/kubernetes";

export type Run = ProgramRun;

/**
 * OpenTofu, built once per version into the shared cache. Not `go install …@version`: OpenTofu's
 * go.mod replaces hashicorp/hcl with its own fork, and go install refuses a module with replace
 * directives. So the module is downloaded and built in its own directory, where its go.mod
 * (replace included) governs, with the flags of its release builds (.goreleaser.yaml): without
 * `version.dev=no` it calls itself 1.12.6-dev, a prerelease that `required_version = ">= 1.8.0"`
 * refuses.
 */
export const tofu: GoTool = {
  tool: "opentofu",
  packagePath: `${tofuModule}/cmd/tofu`,
  version: tofuVersion,
  binary: "tofu",
  env: { CGO_ENABLED: "0", GOFLAGS: "-mod=readonly -buildvcs=false" },
  async build(output, env) {
    const download = await runGo(["mod", "download", "-json", `${tofuModule}@${tofuVersion}`], { cwd: dirname(dirname(output)), env });
    const source = download.code === 0 ? (JSON.parse(download.stdout) as { Dir?: string }).Dir : undefined;
    if (!source) throw new Error(`go mod download ${tofuModule}@${tofuVersion} failed:\n${download.output}`);
    const ldflags = "-s -w -X github.com/opentofu/opentofu/version.dev=no";
    const build = await runGo(["build", "-trimpath", "-ldflags", ldflags, "-o", output, "./cmd/tofu"], { cwd: source, env });
    if (build.code !== 0) throw new Error(`go build ${tofuModule}/cmd/tofu@${tofuVersion} failed:\n${build.output}`);
  },
};

/** The provider's build, under the layout of an unpacked filesystem mirror; answers the mirror's root. */
export async function installKubernetesProvider(): Promise<string> {
  const binary = await installGoTool(kubernetesProvider);
  const installed = dirname(dirname(binary));
  const mirror = join(installed, "mirror");
  const platform = `${process.platform}_${{ x64: "amd64", arm64: "arm64", ia32: "386", arm: "arm" }[process.arch as string] ?? process.arch}`;
  const placed = join(mirror, kubernetesProviderAddress, kubernetesProviderRelease, platform, `terraform-provider-kubernetes_v${kubernetesProviderRelease}`);
  if (existsSync(placed)) return mirror;
  const staging = mkdtempSync(join(installed, ".mirror-staging-"));
  try {
    const target = join(staging, kubernetesProviderAddress, kubernetesProviderRelease, platform, `terraform-provider-kubernetes_v${kubernetesProviderRelease}`);
    mkdirSync(dirname(target), { recursive: true });
    try {
      // The same bytes under a second name; the binary is large.
      linkSync(binary, target);
    } catch {
      copyFileSync(binary, target);
    }
    try {
      renameSync(staging, mirror);
    } catch (error) {
      // Another run placed it first: the same binary.
      if (!existsSync(placed)) throw error;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return mirror;
}

/** Whether both builds are in the cache already (a check then takes seconds, not minutes). */
export function toolsBuilt(): boolean {
  return existsSync(goToolPath(tofu)) && existsSync(goToolPath(kubernetesProvider));
}

export interface Tofu {
  binary: string;
  /** The environment every tofu command runs with: the CLI configuration, no prompts. */
  env: NodeJS.ProcessEnv;
  /** Runs tofu with `args` (e.g. ["-chdir=…", "validate", "-no-color"]: -no-color follows the subcommand). */
  run(args: string[]): Promise<Run>;
  /** Removes the CLI configuration's directory. */
  dispose(): void;
}

/**
 * Builds (if needed) OpenTofu and the provider and answers a way to run tofu offline: a CLI
 * configuration whose only installation method is the provider's filesystem mirror.
 */
export async function prepareTofu(): Promise<Tofu> {
  const binary = await installGoTool(tofu);
  const mirror = await installKubernetesProvider();
  const home = mkdtempSync(join(tmpdir(), "parley-tofu-"));
  const cliConfig = join(home, "tofu.tfrc");
  // No `direct` block: a provider missing from the mirror fails init instead of reaching out.
  writeFileSync(
    cliConfig,
    `provider_installation {\n  filesystem_mirror {\n    path    = ${JSON.stringify(mirror)}\n    include = [${JSON.stringify(kubernetesProviderAddress)}]\n  }\n}\n`,
  );
  const env: NodeJS.ProcessEnv = { ...process.env, TF_CLI_CONFIG_FILE: cliConfig, TF_IN_AUTOMATION: "1", TF_INPUT: "0" };
  // A plugin cache or data directory from the caller's environment would be used instead of ours.
  delete env.TF_PLUGIN_CACHE_DIR;
  delete env.TF_DATA_DIR;
  return {
    binary,
    env,
    run: (args) => runProgram(binary, args, { env, timeoutMs: 10 * 60_000 }),
    dispose: () => rmSync(home, { recursive: true, force: true }),
  };
}
