// The processes a benchmark run starts (the server, the baselines) and what it reads about them
// from /proc (Linux): CPU time and resident memory.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { resolve } from "node:path";

export const root = resolve(import.meta.dirname, "../..");

const ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;

/** CPU time (user + system) the processes have used so far, in ms; NaN when no process is known. */
export function processCpuMs(pids: number[]): number {
  if (pids.length === 0) return NaN;
  let ticks = 0;
  for (const pid of pids) {
    // The command name may hold spaces; the fields after it are fixed. utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after the name.
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return (ticks * 1000) / ticksPerSecond;
}

/**
 * Bytes sent over the loopback interface so far (/proc/net/dev): with every process of a run on
 * this machine, the network traffic of all of them, the client's included.
 */
export function loopbackBytes(): number {
  const line = readFileSync("/proc/net/dev", "utf8")
    .split("\n")
    .find((row) => row.trim().startsWith("lo:"));
  // Receive bytes are the first field after "lo:" (on loopback, what is sent is received).
  return line ? Number(line.trim().slice(3).trim().split(/\s+/)[0]) : NaN;
}

/** Resident memory of the processes (VmRSS), in KiB; NaN when no process is known. */
export function rssKb(pids: number[]): number {
  if (pids.length === 0) return NaN;
  let kb = 0;
  for (const pid of pids) kb += Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
  return kb;
}

/** Starts a Node process running a TypeScript entry; resolves once it printed `readyLine` (at once without one). */
export function startNode(nodeFlags: string[], entry: string[], env: Record<string, string>, readyLine?: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...nodeFlags, "--import", "tsx", ...entry], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr!.on("data", (d: Buffer) => process.stderr.write(d));
  if (!readyLine) {
    child.stdout!.resume();
    return Promise.resolve(child);
  }
  return new Promise((resolveReady, reject) => {
    let seen = "";
    const onData = (d: Buffer) => {
      seen += d.toString();
      if (!seen.includes(readyLine)) return;
      child.stdout!.off("data", onData);
      child.stdout!.resume();
      resolveReady(child);
    };
    child.stdout!.on("data", onData);
    child.once("exit", (code) => reject(new Error(`${entry.join(" ")} exited with ${code}`)));
  });
}

export async function waitHealthy(baseUrl: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await fetch(baseUrl + "/healthz").then((r) => r.status === 200, () => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${baseUrl} did not become healthy`);
}

/** Stops a child and waits for it to be gone. */
export async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  // A cluster launcher takes about 15 s to stop its processes and services.
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  await exited;
  clearTimeout(timer);
}

/** The backing services a run's server uses (Cassandra, Kafka, Redis, S3, nginx), by name, with their pids. */
export type BackingPids = Record<string, number[]>;

/**
 * The pids of the processes listening on the TCP port (nginx's master and workers share its
 * socket): found from the socket's inode in /proc/net/tcp{,6} and the processes holding it
 * (Linux). Whoever started the service (this run, an earlier one, the tests), the port names it.
 */
export function pidsListeningOn(port: number): number[] {
  const listen = "0A";
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let lines: string[];
    try {
      lines = readFileSync(table, "utf8").split("\n").slice(1);
    } catch {
      continue;
    }
    for (const line of lines) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10 || fields[3] !== listen) continue;
      if (Number.parseInt(fields[1].split(":")[1], 16) === port) inodes.add(fields[9]);
    }
  }
  const pids: number[] = [];
  if (inodes.size === 0) return pids;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const target = readlinkSync(`/proc/${entry}/fd/${fd}`);
        if (target.startsWith("socket:[") && inodes.has(target.slice(8, -1))) {
          pids.push(Number(entry));
          break;
        }
      } catch {
        // The descriptor closed while we looked.
      }
    }
  }
  return pids;
}
