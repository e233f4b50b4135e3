// What every backing service started by `npm run services` shares: a detached process recorded in
// a pid file under its data directory, recognised by its command line (so a recycled pid is never
// taken for ours), a start lock so two `up` runs never start it twice, and a clean stop.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The process's command line, or undefined where /proc is missing or the process is gone. */
function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return undefined;
  }
}

/**
 * The pid in `pidFile` if that process is alive and its command line contains `marker`; a pid file
 * naming a dead or foreign process is removed. Without /proc, a live pid is trusted.
 */
export function runningPid(pidFile: string, marker: string): number | undefined {
  let pid: number;
  try {
    pid = Number.parseInt(readFileSync(pidFile, "utf8").trim(), 10);
  } catch {
    return undefined;
  }
  const ours = Number.isInteger(pid) && pid > 0 && isAlive(pid) && (commandLine(pid)?.includes(marker) ?? true);
  if (ours) return pid;
  rmSync(pidFile, { force: true });
  return undefined;
}

/** Whether something accepts TCP connections on host:port. */
export function portIsOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.setTimeout(1_000, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });
}

/**
 * Runs `work` holding an exclusive lock file (created with O_EXCL, holding our pid). A lock left by
 * a dead process is taken over; a live holder is waited for.
 */
export async function withLock<T>(lockFile: string, work: () => Promise<T>, waitMs = 180_000): Promise<T> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const fd = openSync(lockFile, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      let holder: number;
      try {
        holder = Number.parseInt(readFileSync(lockFile, "utf8"), 10);
      } catch {
        continue;
      }
      if (!Number.isInteger(holder) || !isAlive(holder)) {
        rmSync(lockFile, { force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`${lockFile} is held by process ${holder}; gave up waiting`, { cause: error });
      await sleep(200);
    }
  }
  try {
    return await work();
  } finally {
    rmSync(lockFile, { force: true });
  }
}

/** Waits until `pid` has exited or `timeoutMs` has passed; answers whether it exited. */
export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid)) {
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
  return true;
}

/** SIGTERM, then SIGKILL if the process has not exited after `graceMs`; resolves once it is gone. */
export async function stopProcess(pid: number, graceMs: number): Promise<void> {
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return;
  }
  if (await waitForExit(pid, graceMs)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    return;
  }
  if (!(await waitForExit(pid, 10_000))) throw new Error(`process ${pid} survived SIGKILL`);
}

/**
 * Stops the service whose pid `pidFile` records (believed only while its command line contains
 * `marker`) and removes the pid file; answers whether one was running.
 */
export async function stopRecorded(pidFile: string, marker: string, graceMs: number): Promise<boolean> {
  const pid = runningPid(pidFile, marker);
  if (pid === undefined) return false;
  await stopProcess(pid, graceMs);
  rmSync(pidFile, { force: true });
  return true;
}
