// `npm run image`: the OCI image of Parley, built without Docker from what this machine's
// registries serve. Three layers, the slowest-changing first, so a code change rebuilds only the
// last:
//   1. Debian 13 ("trixie", whose nodejs is 20.19) with Node.js and CA certificates, by mmdebstrap,
//      plus the user the server runs as (uid 1000) and its data directory;
//   2. /app/node_modules: the production dependencies, installed by `npm ci --omit=dev` inside a
//      builder of the same Debian (with npm and a compiler), so native addons are built for the
//      base they run on; the builder's tools stay out of the image;
//   3. /app: the server's sources at the commit (git archive of HEAD: tests, docs, scripts and
//      infra left out), run by tsx, a production dependency, as `npm start` runs them.
// Reproducible: every timestamp is the commit's (SOURCE_DATE_EPOCH), tar entries are sorted and
// owned by root, gzip writes no name or time, and the slow layers are cached by what they are made
// of (~/.cache/parley/image), so two builds of one commit give one digest.
// Writes dist/image/oci/ (an OCI image layout) and dist/image/parley-<version>.tar (that layout
// with a docker manifest.json: `docker load -i` and `skopeo copy oci-archive:` both read it), and
// prints the tag and digest. docs/deployment.md says how to push and deploy it.
import { execFileSync, type ExecFileSyncOptions } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";

export const root = resolve(import.meta.dirname, "..", "..");
export const cacheDir = join(homedir(), ".cache", "parley", "image");
export const outDir = join(root, "dist", "image");

const suite = "trixie";
const mirror = "http://deb.debian.org/debian";
/** The server's user: the Kubernetes module's run_as_user default. */
export const serverUid = 1000;
/** The Debian root filesystems' own time (2025-11-29), kept while their packages are: they are cached, not rebuilt per commit. */
const debianEpoch = 1764374400;
const runtimePackages = ["nodejs", "ca-certificates"];
/** What `npm ci` needs to build better-sqlite3 from source: the registry serves no prebuilt binary here. */
const builderPackages = [...runtimePackages, "npm", "python3", "make", "g++", "libnode-dev"];
/** What the server needs at run time; the rest of the tree (tests, docs, scripts, infra, the SDK) stays out. */
const appPaths = ["main.ts", "server.ts", "http-drain.ts", "startup-timings.ts", "moleculer.config.ts", "package.json", "tsconfig.json", "api", "edge", "engine", "gateway", "ports", "shared", "webhooks"];
const appExcluded = ["*.test.ts", "*.bench.ts", "*-conformance.ts", "ports/store/conformance", "*.md"];

const log = (line: string) => process.stderr.write(`image: ${line}\n`);

function run(command: string, args: string[], options: ExecFileSyncOptions = {}): string {
  return execFileSync(command, args, { encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "inherit"], ...options }) as string;
}

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

function fileSha256(path: string): string {
  return run("sha256sum", [path]).split(" ")[0];
}

/** mmdebstrap, apt-get's package, installed from the machine's Debian mirror when missing. */
function ensureTools(): void {
  // skopeo is not needed to build; the image's test reads the archive with it, as a registry push would.
  const missing = ["mmdebstrap", "bwrap", "skopeo"].filter((tool) => {
    try {
      run("sh", ["-c", `command -v ${tool}`]);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length === 0) return;
  log(`installing ${missing.join(", ")} with apt-get`);
  run("apt-get", ["update", "-qq"], { stdio: "inherit" });
  run("apt-get", ["install", "-y", "-qq", ...missing.map((tool) => (tool === "bwrap" ? "bubblewrap" : tool))], { stdio: "inherit", env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
}

/** Writes `path` through a temporary name, so an interrupted build never leaves half a cache entry. */
function cached(path: string, make: (temporary: string) => void): string {
  if (existsSync(path)) return path;
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.partial`;
  rmSync(temporary, { recursive: true, force: true });
  make(temporary);
  renameSync(temporary, path);
  return path;
}

/** A Debian root filesystem as a tarball, cached by what it is made of. */
function debianTarball(name: string, packages: string[], hooks: string[]): string {
  const args = ["--variant=essential", "--aptopt=APT::Install-Recommends \"false\"", `--include=${packages.join(",")}`];
  // Documentation and translations are of no use in a server image.
  for (const path of ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"]) args.push(`--dpkgopt=path-exclude=${path}`);
  args.push("--dpkgopt=path-include=/usr/share/doc/*/copyright");
  for (const hook of hooks) args.push(`--customize-hook=${hook}`);
  const key = sha256(JSON.stringify({ suite, mirror, args, epoch: debianEpoch })).slice(0, 16);
  return cached(join(cacheDir, `${name}-${suite}-${key}.tar`), (temporary) => {
    log(`building the ${name} root filesystem (Debian ${suite}: ${packages.join(", ")})`);
    run("mmdebstrap", [...args, "--format=tar", suite, temporary, mirror], { env: { ...process.env, SOURCE_DATE_EPOCH: String(debianEpoch) }, stdio: ["ignore", "inherit", "inherit"] });
  });
}

/** GNU tar's reproducible form: sorted names, one time, root owner, no access or change times. */
function reproducibleTar(from: string, paths: string[], into: string, epoch: number, transform?: string): void {
  run("tar", [
    "--sort=name",
    "--format=posix",
    "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
    `--mtime=@${epoch}`,
    "--clamp-mtime",
    "--owner=0",
    "--group=0",
    "--numeric-owner",
    ...(transform ? [`--transform=${transform}`] : []),
    "-C",
    from,
    "-cf",
    into,
    ...paths,
  ]);
}

interface Layer {
  /** sha256 of the uncompressed tar (the config's diff_id), and its size. */
  diffId: string;
  tarSize: number;
  /** The gzip blob's digest and size. */
  digest: string;
  size: number;
  file: string;
  createdBy: string;
}

/** gzip -n: no file name or time in the header, so the blob depends on the tar alone. Cached by the tar's digest. */
function layerOf(tar: string, createdBy: string): Layer {
  const diffId = fileSha256(tar);
  const file = cached(join(cacheDir, "layers", `${diffId}.tar.gz`), (temporary) => run("sh", ["-c", `gzip -n -6 -c "$1" > "$2"`, "gzip", tar, temporary]));
  return { diffId, tarSize: statSync(tar).size, digest: fileSha256(file), size: statSync(file).size, file, createdBy };
}

/** The base: Debian with Node.js, the server's user and its writable data directory. */
function baseLayer(): Layer {
  const hooks = [
    `echo 'parley:x:${serverUid}:${serverUid}:Parley server:/app:/usr/sbin/nologin' >> "$1/etc/passwd"`,
    `echo 'parley:x:${serverUid}:' >> "$1/etc/group"`,
    `mkdir -p "$1/app" "$1/data" && chown ${serverUid}:${serverUid} "$1/data"`,
    // apt's state and logs are of no use in the image and differ from build to build.
    `rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/* "$1/var/log"/* "$1/var/cache/ldconfig/aux-cache"`,
  ];
  const tar = debianTarball("base", runtimePackages, hooks);
  return layerOf(tar, `mmdebstrap --variant=essential ${suite} (${runtimePackages.join(", ")}); user parley (${serverUid}); /data`);
}

/**
 * What `npm ci` leaves that the server never loads, removed before the layer is made (shell globs
 * under node_modules): uWS ships a binary for every platform and Node ABI (116 MB; Node 20's is
 * ABI 115), and better-sqlite3's source build leaves its objects, the SQLite sources and a test
 * extension beside the one binary it loads.
 */
const unusedInNodeModules = [
  "@trufflesuite/uws-js-unofficial/dist/uws_!(linux_x64_115).node",
  "better-sqlite3/build/Release/obj",
  "better-sqlite3/build/Release/obj.target",
  "better-sqlite3/build/Release/.deps",
  "better-sqlite3/build/Release/*.a",
  "better-sqlite3/build/Release/test_extension.node",
  "better-sqlite3/deps",
  "better-sqlite3/src",
];

/** /app/node_modules, installed in a builder of the same Debian, cached by the lock file. */
function dependencyLayer(epoch: number): Layer {
  const lock = readFileSync(join(root, "package-lock.json"));
  const manifest = readFileSync(join(root, "package.json"));
  const sdkManifest = readFileSync(join(root, "sdk", "package.json"));
  const builder = debianTarball("builder", builderPackages, []);
  const key = sha256(Buffer.concat([lock, manifest, sdkManifest, Buffer.from(builder), Buffer.from(JSON.stringify(unusedInNodeModules))])).slice(0, 16);
  const tar = cached(join(cacheDir, `node_modules-${key}.tar`), (temporary) => {
    const work = join(cacheDir, `work-${key}`);
    rmSync(work, { recursive: true, force: true });
    const rootfs = join(work, "rootfs");
    const app = join(work, "app");
    mkdirSync(rootfs, { recursive: true });
    mkdirSync(join(app, "sdk"), { recursive: true });
    run("tar", ["-xf", builder, "-C", rootfs]);
    for (const [from, to] of [
      ["package.json", "package.json"],
      ["package-lock.json", "package-lock.json"],
      ["sdk/package.json", "sdk/package.json"],
    ]) {
      copyFileSync(join(root, from), join(app, to));
    }
    log("installing the production dependencies in the builder (npm ci --omit=dev)");
    const registry = run("npm", ["config", "get", "registry"]).trim();
    // The registry may be reached through a proxy this machine trusts: the builder trusts what the
    // machine does (its CA bundle, bound for the install only; the image keeps Debian's own).
    const machineCa = process.env.NODE_EXTRA_CA_CERTS ?? "/etc/ssl/certs/ca-certificates.crt";
    run(
      "bwrap",
      [
        ...["--bind", rootfs, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"],
        ...["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf", "--bind", app, "/app", "--chdir", "/app"],
        ...["--ro-bind", machineCa, "/run/machine-ca.crt", "--setenv", "NODE_EXTRA_CA_CERTS", "/run/machine-ca.crt", "--setenv", "npm_config_cafile", "/run/machine-ca.crt"],
        ...["--setenv", "HOME", "/tmp", "--setenv", "npm_config_registry", registry, "--setenv", "npm_config_nodedir", "/usr", "--setenv", "npm_config_update_notifier", "false"],
        ...["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--ignore-scripts=false"],
      ],
      { stdio: ["ignore", "inherit", "inherit"] },
    );
    // The SDK workspace is linked into node_modules; the server never imports it.
    rmSync(join(app, "node_modules", "@parley"), { recursive: true, force: true });
    rmSync(join(app, "node_modules", ".package-lock.json"), { force: true });
    run("bash", ["-O", "extglob", "-c", `cd "$1" && rm -rf -- ${unusedInNodeModules.join(" ")}`, "bash", join(app, "node_modules")]);
    reproducibleTar(app, ["node_modules"], temporary, epoch, "s,^,app/,S");
    rmSync(work, { recursive: true, force: true });
  });
  return layerOf(tar, "npm ci --omit=dev (built in Debian trixie with npm, python3, make, g++)");
}

/** The server's sources at HEAD, as git archive writes them (its times are the commit's). */
function appLayer(revision: string, epoch: number): Layer {
  const tar = cached(join(cacheDir, "layers", `app-${revision}.tar`), (temporary) => {
    const staging = join(cacheDir, `app-${revision}`);
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(staging, { recursive: true });
    const pathspecs = [...appPaths, ...appExcluded.map((pattern) => `:(exclude,glob)**/${pattern}`), ...appExcluded.map((pattern) => `:(exclude,glob)${pattern}`)];
    run("bash", ["-c", `set -o pipefail; git -C "$1" archive --format=tar HEAD -- "\${@:3}" | tar -x -C "$2"`, "bash", root, staging, ...pathspecs]);
    reproducibleTar(staging, ["."], temporary, epoch, "s,^\\.,app,S");
    rmSync(staging, { recursive: true, force: true });
  });
  return layerOf(tar, `git archive ${revision} (${appPaths.join(" ")})`);
}

const packageVersion = () => (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;

/** The tag a build gives its image: the package's version. The Kubernetes module's image default is this. */
export function imageTag(): string {
  return `parley:${packageVersion()}`;
}

/**
 * Where the image's source is published: PARLEY_IMAGE_SOURCE (a release build sets it), else the
 * clone's origin when it is a public URL (https, or git@host:path read as https). A local path is
 * never used: it would say nothing to a reader of the image and differ from clone to clone.
 */
export function imageSource(): string | undefined {
  if (process.env.PARLEY_IMAGE_SOURCE) return process.env.PARLEY_IMAGE_SOURCE;
  let origin: string;
  try {
    origin = run("git", ["-C", root, "config", "--get", "remote.origin.url"]).trim();
  } catch {
    // No origin: git config exits 1.
    return undefined;
  }
  if (/^https:\/\//.test(origin)) return origin.replace(/\.git$/, "");
  const ssh = /^git@([^:]+):(.+?)(\.git)?$/.exec(origin);
  return ssh ? `https://${ssh[1]}/${ssh[2]}` : undefined;
}

export interface BuiltImage {
  tag: string;
  /** The manifest's digest: what a registry calls the image by. */
  digest: string;
  layout: string;
  archive: string;
  /** Compressed size of the layers and config, what a pull downloads. */
  compressedBytes: number;
  /** Uncompressed size of the layers, what the image takes on disk. */
  uncompressedBytes: number;
  layers: { digest: string; diffId: string; size: number; createdBy: string }[];
}

export function buildImage(): BuiltImage {
  ensureTools();
  const version = packageVersion();
  const revision = run("git", ["-C", root, "rev-parse", "HEAD"]).trim();
  const epoch = Number(run("git", ["-C", root, "log", "-1", "--format=%ct", "HEAD"]).trim());
  const dirty = run("git", ["-C", root, "status", "--porcelain", "--untracked-files=no"]).trim() !== "";
  if (dirty) log(`the working tree has uncommitted changes: the image holds HEAD (${revision.slice(0, 12)}) without them`);
  const source = imageSource();
  if (!source) log("no source label: set PARLEY_IMAGE_SOURCE to the repository's public URL (or give the clone an https origin)");
  const tag = imageTag();
  const created = new Date(epoch * 1000).toISOString();

  const layers = [baseLayer(), dependencyLayer(epoch), appLayer(revision, epoch)];
  const labels = {
    "org.opencontainers.image.title": "Parley",
    "org.opencontainers.image.description": "Open messaging and agent platform backend",
    "org.opencontainers.image.version": version,
    "org.opencontainers.image.revision": revision,
    ...(source ? { "org.opencontainers.image.source": source } : {}),
    "org.opencontainers.image.created": created,
    "org.opencontainers.image.base.name": `debian:${suite}`,
  };
  const config = {
    created,
    architecture: "amd64",
    os: "linux",
    config: {
      User: `${serverUid}:${serverUid}`,
      Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_ENV=production", "HOST=0.0.0.0", "PORT=8080", "DATA_DIR=/data"],
      // `npm start` without npm in between, so SIGTERM reaches the server and it drains.
      Cmd: ["node", "--import", "tsx", "main.ts"],
      WorkingDir: "/app",
      ExposedPorts: { "8080/tcp": {} },
      Volumes: { "/data": {} },
      StopSignal: "SIGTERM",
      Labels: labels,
    },
    rootfs: { type: "layers", diff_ids: layers.map((layer) => `sha256:${layer.diffId}`) },
    history: layers.map((layer) => ({ created, created_by: layer.createdBy })),
  };
  const configBytes = Buffer.from(JSON.stringify(config));
  const configDigest = sha256(configBytes);
  const manifest = {
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: `sha256:${configDigest}`, size: configBytes.length },
    layers: layers.map((layer) => ({ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: `sha256:${layer.digest}`, size: layer.size })),
    annotations: labels,
  };
  const manifestBytes = Buffer.from(JSON.stringify(manifest));
  const digest = `sha256:${sha256(manifestBytes)}`;

  // The layout, written whole into a fresh directory.
  const layout = join(outDir, "oci");
  rmSync(outDir, { recursive: true, force: true });
  const blobs = join(layout, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  for (const layer of layers) copyFileSync(layer.file, join(blobs, layer.digest));
  writeFileSync(join(blobs, configDigest), configBytes);
  writeFileSync(join(blobs, digest.slice("sha256:".length)), manifestBytes);
  writeFileSync(join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  writeFileSync(
    join(layout, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{ mediaType: manifest.mediaType, digest, size: manifestBytes.length, annotations: { "org.opencontainers.image.ref.name": version, "io.containerd.image.name": `docker.io/library/${tag}` } }],
    }),
  );
  // docker load reads manifest.json; skopeo and containerd read the OCI index beside it.
  writeFileSync(
    join(layout, "manifest.json"),
    JSON.stringify([{ Config: `blobs/sha256/${configDigest}`, RepoTags: [tag], Layers: layers.map((layer) => `blobs/sha256/${layer.digest}`) }]),
  );
  const archive = join(outDir, `parley-${version}.tar`);
  reproducibleTar(layout, ["."], archive, epoch);

  const uncompressedBytes = layers.reduce((sum, layer) => sum + layer.tarSize, 0);
  return {
    tag,
    digest,
    layout,
    archive,
    compressedBytes: layers.reduce((sum, layer) => sum + layer.size, 0) + configBytes.length,
    uncompressedBytes,
    layers: layers.map(({ digest: layerDigest, diffId, size, createdBy }) => ({ digest: `sha256:${layerDigest}`, diffId: `sha256:${diffId}`, size, createdBy })),
  };
}

if (import.meta.filename === process.argv[1]) {
  const image = buildImage();
  const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;
  writeFileSync(join(outDir, "image.json"), `${JSON.stringify({ tag: image.tag, digest: image.digest, archive: image.archive }, null, 2)}\n`);
  for (const layer of image.layers) log(`layer ${layer.digest.slice(0, 19)} ${mb(layer.size)}: ${layer.createdBy}`);
  console.log(`tag:     ${image.tag}`);
  console.log(`digest:  ${image.digest}`);
  console.log(`size:    ${mb(image.compressedBytes)} compressed (what a pull downloads), ${mb(image.uncompressedBytes)} unpacked`);
  console.log(`layout:  ${image.layout}`);
  console.log(`archive: ${image.archive}`);
  console.log(`push:    skopeo copy oci-archive:${image.archive} docker://REGISTRY/${image.tag}`);
  console.log(`deploy:  tofu -chdir=infra/terraform apply -var image=REGISTRY/${image.tag}@${image.digest} …`);
}
