// The relay baseline forwards a frame, bytes unchanged, to exactly the sockets a message names.
import { expect } from "chai";
import type { ChildProcess } from "node:child_process";
import { freePort } from "../../test/support/harness.js";
import { startNode, stop } from "./processes.js";
import { closeAll, openRelaySocket, relayHeader } from "./wire.js";

describe("benchmark relay baseline", () => {
  let relay: ChildProcess;
  let url: string;
  before(async () => {
    const port = await freePort();
    relay = await startNode([], ["scripts/bench/baseline-servers.ts", "relay", String(port)], {}, "ready");
    url = `ws://127.0.0.1:${port}`;
  });
  after(() => stop(relay));

  it("forwards the frame to the named sockets only, the sender's own included", async () => {
    const sockets = await Promise.all([0, 1, 2].map((id) => openRelaySocket(url, id)));
    const received: Buffer[][] = sockets.map(() => []);
    sockets.forEach((socket, i) => socket.on("message", (data: Buffer) => received[i].push(data)));
    const frame = Buffer.from([0x0a, 0x03, 0x61, 0x62, 0x63, 0x00, 0xff]);
    sockets[0].send(Buffer.concat([relayHeader([0, 2]), frame]));
    // A frame to socket 1 afterwards; the first may still be on its way to 0 and 2 when it arrives.
    sockets[2].send(Buffer.concat([relayHeader([1]), Buffer.from("done")]));
    await new Promise<void>((resolve) => sockets[1].once("message", () => resolve()));
    while (received[0].length === 0 || received[2].length === 0) await new Promise((r) => setTimeout(r, 5));
    expect(received[0]).to.deep.equal([frame]);
    expect(received[2]).to.deep.equal([frame]);
    expect(received[1].map((d) => d.toString())).to.deep.equal(["done"]);
    await closeAll(sockets);
  });
});
