import { expect } from "chai";
import type { WebSocket } from "@trufflesuite/uws-js-unofficial";
import { UwsGatewaySocket } from "./uws-socket-server.js";

/** What the socket asks of uWS, in order; a corked stretch shows as "cork" … "uncork". */
class RecordingUws {
  calls: string[] = [];
  buffered = 0;
  send(data: string | Uint8Array): number {
    this.calls.push(`send ${typeof data === "string" ? data : `${data.byteLength} bytes`}`);
    return 1;
  }
  cork(work: () => void): this {
    this.calls.push("cork");
    work();
    this.calls.push("uncork");
    return this;
  }
  getBufferedAmount(): number {
    return this.buffered;
  }
  ping(): void {
    this.calls.push("ping");
  }
  end(code: number): void {
    this.calls.push(`end ${code}`);
  }
}

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe("uWS gateway socket", () => {
  let uws: RecordingUws;
  let socket: UwsGatewaySocket;
  beforeEach(() => {
    uws = new RecordingUws();
    socket = new UwsGatewaySocket(uws as unknown as WebSocket<never>, "127.0.0.1", undefined);
  });

  it("writes the frames sent in one turn together, corked, in order, once the turn's work is done", async () => {
    socket.send("a");
    socket.send(new Uint8Array(3));
    socket.send("c");
    expect(uws.calls).to.deep.equal([]);
    expect(socket.bufferedAmount).to.equal(5);
    await nextTurn();
    expect(uws.calls).to.deep.equal(["cork", "send a", "send 3 bytes", "send c", "uncork"]);
    expect(socket.bufferedAmount).to.equal(0);
  });

  it("writes a frame alone without corking, and each turn's frames by themselves", async () => {
    socket.send("a");
    await nextTurn();
    socket.send("b");
    socket.send("c");
    await nextTurn();
    expect(uws.calls).to.deep.equal(["send a", "cork", "send b", "send c", "uncork"]);
  });

  it("writes the frames sent before a ping or a close ahead of it", () => {
    socket.send("receipted");
    socket.ping();
    socket.send("fatal error");
    socket.close(4000, "bye");
    expect(uws.calls).to.deep.equal(["send receipted", "ping", "send fatal error", "end 4000"]);
  });

  it("tells a frame's sender once it was written, and fails those a close left unwritten", async () => {
    const outcomes: string[] = [];
    socket.send("kept", (err) => outcomes.push(err ? `kept: ${err.message}` : "kept: written"));
    socket.send("other");
    await nextTurn();
    await nextTurn();
    expect(uws.calls).to.deep.equal(["send kept", "send other"]);
    socket.send("lost", (err) => outcomes.push(err ? "lost: failed" : "lost: written"));
    socket.onClosed();
    await nextTurn();
    expect(outcomes).to.deep.equal(["kept: written", "lost: failed"]);
    expect(uws.calls).to.deep.equal(["send kept", "send other"]);
  });
});
