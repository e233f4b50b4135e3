import { expect } from "chai";
import { backoffDelay, defaultBackoff } from "../src/index.js";

describe("sdk: reconnection backoff", () => {
  const policy = { initialMs: 100, maxMs: 1000, multiplier: 2 };

  it("doubles its ceiling per failed attempt and never exceeds maxMs", () => {
    const ceilings = [0, 1, 2, 3, 4, 5, 50].map((attempt) => backoffDelay(attempt, policy, () => 1));
    expect(ceilings).to.deep.equal([100, 200, 400, 800, 1000, 1000, 1000]);
  });

  it("keeps half of each delay fixed and randomises the other half", () => {
    expect(backoffDelay(2, policy, () => 0)).to.equal(200);
    expect(backoffDelay(2, policy, () => 0.5)).to.equal(300);
    for (let i = 0; i < 200; i++) {
      const delay = backoffDelay(3, policy);
      expect(delay).to.be.within(400, 800);
    }
  });

  it("spreads clients that failed at the same moment", () => {
    const delays = new Set(Array.from({ length: 50 }, () => Math.round(backoffDelay(4, defaultBackoff))));
    expect(delays.size).to.be.greaterThan(40);
  });
});
