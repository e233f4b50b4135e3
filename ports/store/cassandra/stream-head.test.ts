// The write timestamps that keep stream owners apart (DATA-MODEL.md §5.4): pure arithmetic.
import { expect } from "chai";
import { epochOfStreamWrite, streamClaimTimestamp, streamPruneTimestamp, streamWriteTimestamp } from "./stream-head.js";

describe("update stream write timestamps", () => {
  const wallClockNow = BigInt(Date.now()) * 1000n;

  it("orders an epoch's claim below its writes, above every write of an older epoch, and all of it above the wall clock", () => {
    expect(streamClaimTimestamp(0) > wallClockNow).to.equal(true);
    expect(streamClaimTimestamp(5) < streamWriteTimestamp(5, 1)).to.equal(true);
    expect(streamWriteTimestamp(4, 2 ** 31 - 1) < streamClaimTimestamp(5)).to.equal(true);
    expect(streamWriteTimestamp(5, 10) < streamWriteTimestamp(5, 11)).to.equal(true);
    expect(epochOfStreamWrite(streamWriteTimestamp(7, 123))).to.equal(7);
    expect(epochOfStreamWrite(streamClaimTimestamp(7))).to.equal(6);
  });

  it("puts pruning above every epoch, and refuses an epoch past the timestamps' range", () => {
    expect(streamPruneTimestamp > streamWriteTimestamp(2 ** 30 - 1, 2 ** 31 - 1)).to.equal(true);
    expect(streamPruneTimestamp < 2n ** 63n).to.equal(true);
    expect(() => streamWriteTimestamp(2 ** 30, 1)).to.throw(/outside the update streams' timestamps/);
    expect(() => streamClaimTimestamp(-1)).to.throw(/outside/);
  });
});
