// What the services run from Maven Central jars share (Cassandra, Kafka): the jars resolved once
// per version into ${XDG_CACHE_HOME:-~/.cache}/parley/<name>-<version>/lib, shared by every clone;
// Maven tries its local repository offline first. A run assembles the set in a staging directory
// and renames it into place, so racing runs never see half a set.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** A Maven artifact, `groupId:artifactId:version`. */
export type MavenCoordinate = `${string}:${string}:${string}`;

export function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "parley");
}

function pom(name: string, version: string, dependencies: MavenCoordinate[]): string {
  const entries = dependencies.map((coordinate) => {
    const [groupId, artifactId, artifactVersion] = coordinate.split(":");
    return `    <dependency>
      <groupId>${groupId}</groupId>
      <artifactId>${artifactId}</artifactId>
      <version>${artifactVersion}</version>
    </dependency>`;
  });
  return `<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>parley.services</groupId>
  <artifactId>${name}-runtime</artifactId>
  <version>${version}</version>
  <dependencies>
${entries.join("\n")}
  </dependencies>
</project>
`;
}

function runMaven(projectDir: string, offline: boolean, service: string): { ok: boolean; output: string } {
  const args = ["-B", "-q", ...(offline ? ["-o"] : []), "-f", join(projectDir, "pom.xml"), "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies", `-DoutputDirectory=${join(projectDir, "lib")}`, "-DincludeScope=runtime"];
  const result = spawnSync("mvn", args, { cwd: projectDir, stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", timeout: 600_000 });
  if (result.error) throw new Error(`could not run Maven (mvn): ${result.error.message}; Maven 3 is needed to install ${service}`);
  return { ok: result.status === 0, output: `${result.stdout}${result.stderr}` };
}

/**
 * Resolves `dependencies` with their runtime dependencies into the shared cache as
 * `<name>-<version>/lib` (once per version) and answers that directory.
 */
export function installJars(name: string, version: string, dependencies: MavenCoordinate[]): string {
  const root = cacheDir();
  const installed = join(root, `${name}-${version}`);
  const lib = join(installed, "lib");
  const marker = join(installed, "complete");
  if (existsSync(marker)) return lib;
  mkdirSync(root, { recursive: true });
  const staging = mkdtempSync(join(root, `.${name}-${version}-staging-`));
  try {
    writeFileSync(join(staging, "pom.xml"), pom(name, version, dependencies));
    let maven = runMaven(staging, true, name);
    if (!maven.ok) maven = runMaven(staging, false, name);
    if (!maven.ok) throw new Error(`Maven could not resolve ${dependencies.join(", ")}:\n${maven.output.slice(-4000)}`);
    writeFileSync(join(staging, "complete"), `${new Date().toISOString()}\n`);
    try {
      renameSync(staging, installed);
    } catch (error) {
      // Another run renamed its complete set into place first; ours is a duplicate.
      if (!existsSync(marker)) throw error;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return lib;
}

export function javaExecutable(): string {
  return process.env.JAVA_HOME ? join(process.env.JAVA_HOME, "bin", "java") : "java";
}

/** Refuses anything but Java 17, the JDK these services are configured and tested for. */
export function checkJava17(java: string, service: string): void {
  const result = spawnSync(java, ["-version"], { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
  if (result.error) throw new Error(`could not run ${java}: ${result.error.message}; ${service} needs Java 17`);
  const version = /version "(\d+)/.exec(result.stderr)?.[1];
  if (version !== "17") throw new Error(`${service} is run here on Java 17; ${java} is ${version ? `Java ${version}` : "of an unknown version"} (set JAVA_HOME)`);
}

/** The last `lines` lines of a log file, for start-up errors. */
export function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}
