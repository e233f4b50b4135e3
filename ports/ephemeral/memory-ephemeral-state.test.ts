import { AdjustableClock } from "../../shared/clock.js";
import { describeEphemeralStateConformance } from "./ephemeral-conformance.js";
import { MemoryEphemeralState } from "./memory-ephemeral-state.js";

describeEphemeralStateConformance("memory", async () => {
  const clock = new AdjustableClock();
  const state = new MemoryEphemeralState(clock);
  return {
    state,
    async elapse(ms) {
      clock.advance(ms);
    },
    cleanup: () => state.close(),
  };
});
