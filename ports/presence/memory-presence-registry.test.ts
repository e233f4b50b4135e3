import { describePresenceRegistryConformance } from "./presence-conformance.js";
import { MemoryPresenceRegistry } from "./memory-presence-registry.js";

describePresenceRegistryConformance("memory", async () => {
  let offsetMs = 0;
  const registry = new MemoryPresenceRegistry(() => performance.now() + offsetMs);
  return {
    registry,
    async elapse(ms) {
      offsetMs += ms;
    },
    cleanup: () => registry.close(),
  };
});
