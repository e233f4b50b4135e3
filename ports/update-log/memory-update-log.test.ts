import { expect } from "chai";
import { describeUpdateLogConformance } from "./update-log-conformance.js";
import { MemoryUpdateLog } from "./memory-update-log.js";
import { murmur2, partitionOf } from "./update-log.js";

describeUpdateLogConformance("memory", async () => {
  const retryDelayMs = 50;
  const log = new MemoryUpdateLog({ retryDelayMs });
  return { log, retryDelayMs, cleanup: () => log.close() };
});

describe("partitionOf", () => {
  it("is Kafka's murmur2 (the Java client's default partitioner)", () => {
    // Values of org.apache.kafka.common.utils.Utils.murmur2, as in Kafka's own UtilsTest.
    const cases: [string, number][] = [
      ["21", -973932308],
      ["foobar", -790332482],
      ["a-little-bit-long-string", -985981536],
      ["a-little-bit-longer-string", -1486304829],
      ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971],
      ["abc", 479470107],
    ];
    const encoder = new TextEncoder();
    for (const [key, hash] of cases) expect(murmur2(encoder.encode(key)), key).to.equal(hash);
  });

  it("places a key by the positive hash modulo the partition count", () => {
    expect(partitionOf("foobar", 7)).to.equal((-790332482 & 0x7fffffff) % 7);
    for (let i = 0; i < 1000; i++) expect(partitionOf(`k${i}`, 5)).to.be.within(0, 4);
  });
});
