// Running the image without a container engine: unpack its layers into a root filesystem, then start its command with bubblewrap, as a runtime would: the root read-only
// (as the Kubernetes module mounts it), a fresh /tmp, /data bound from the host, /proc and /dev of
// its own, the image's user, working directory and environment. The network is the host's, so a
// test reaches the server on 127.0.0.1.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

interface ImageConfig {
  config: { User: string; Env: string[]; Cmd: string[]; WorkingDir: string; Labels: Record<string, string> };
  rootfs: { diff_ids: string[] };
}

export interface Bundle {
  dir: string;
  rootfs: string;
  image: ImageConfig;
}

const blob = (layout: string, digest: string) => join(layout, "blobs", "sha256", digest.replace(/^sha256:/, ""));

/** Unpacks the layout's one image into `dir`/rootfs, its layers in order; the image's config says how to run it. */
export function unpackImage(layout: string, dir: string): Bundle {
  const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as { manifests: { digest: string }[] };
  const manifest = JSON.parse(readFileSync(blob(layout, index.manifests[0].digest), "utf8")) as { config: { digest: string }; layers: { digest: string }[] };
  const image = JSON.parse(readFileSync(blob(layout, manifest.config.digest), "utf8")) as ImageConfig;
  rmSync(dir, { recursive: true, force: true });
  const rootfs = join(dir, "rootfs");
  mkdirSync(rootfs, { recursive: true });
  for (const layer of manifest.layers) execFileSync("tar", ["-xzf", blob(layout, layer.digest), "-C", rootfs, "--numeric-owner"]);
  return { dir, rootfs, image };
}

export interface ImageProcess {
  /** bubblewrap, which waits for the server and exits with its status. */
  child: ChildProcess;
  /** The server's own pid (bubblewrap does not pass signals on). */
  serverPid(): number;
  output(): string;
  exited: Promise<number | null>;
}

/** Starts the image's command (or `args`) in the bundle with `env` over the image's own environment. */
export function startFromImage(bundle: Bundle, dataDir: string, env: Record<string, string>, args = bundle.image.config.Cmd): ImageProcess {
  const [uid, gid] = bundle.image.config.User.split(":");
  const environment = Object.fromEntries(bundle.image.config.Env.map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]));
  const setenv = Object.entries({ ...environment, ...env }).flatMap(([name, value]) => ["--setenv", name, value]);
  const child = spawn(
    "bwrap",
    [
      ...["--ro-bind", bundle.rootfs, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", dataDir, "/data"],
      ...["--unshare-user", "--uid", uid, "--gid", gid, "--clearenv", ...setenv, "--chdir", bundle.image.config.WorkingDir, "--die-with-parent"],
      ...args,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    serverPid() {
      const children = readdirSync(`/proc/${child.pid}/task`).flatMap((task) => readFileSync(`/proc/${child.pid}/task/${task}/children`, "utf8").trim().split(/\s+/).filter(Boolean));
      if (children.length !== 1) throw new Error(`expected one process under bubblewrap, found ${children.length}`);
      return Number(children[0]);
    },
    output: () => output,
    exited,
  };
}
