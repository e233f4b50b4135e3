// Ports for servers a test starts and stops again on the same port (nginx fronts, the local
// cluster's nodes). A port the kernel just handed out (listen on 0) is in its ephemeral range,
// where any outgoing connection of the run may take it as a source port once it is released; so
// these come from below that range (Linux: 32768-60999), probed free.
import { createServer } from "node:net";

/** Whether something can listen on the port now. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

/** A base port in 20000-29999 such that base + each offset is free now (offset 0: the port itself). */
export async function freeStablePort(offsets: readonly number[] = [0]): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 10_000);
    if ((await Promise.all(offsets.map((offset) => portFree(base + offset)))).every(Boolean)) return base;
  }
  throw new Error(`no free ports at offsets ${offsets.join(",")} below the ephemeral range`);
}
