// The promises of the presence port, as one mocha suite every driver must pass. Node liveness is
// driven through elapse(), so a driver on a test clock and one on Redis's real clock run the same
// assertions.
import { randomUUID } from "node:crypto";
import { expect } from "chai";
import type { PresenceRegistry } from "./presence-registry.js";

export interface PresenceRegistryUnderTest {
  registry: PresenceRegistry;
  /** Lets ms pass as the driver sees time: moves a test clock, or waits where the store keeps real time. */
  elapse(ms: number): Promise<void>;
  cleanup(): Promise<void>;
}

const long = 60_000;
const short = 200;

export function describePresenceRegistryConformance(name: string, open: () => Promise<PresenceRegistryUnderTest>): void {
  describe(`presence registry conformance: ${name}`, () => {
    let subject: PresenceRegistryUnderTest;
    let registry: PresenceRegistry;
    // Node ids of their own per test, should the backing store hold other runs' nodes.
    let a: string, b: string, c: string;
    beforeEach(async () => {
      subject = await open();
      registry = subject.registry;
      const run = randomUUID().slice(0, 8);
      [a, b, c] = ["a", "b", "c"].map((node) => `gateway-${node}-${run}`);
    });
    afterEach(async () => subject.cleanup());

    /** gatewaysOf as plain data with each user's nodes sorted, for deep comparison. */
    const lookup = async (userIds: number[]) => {
      const found = await registry.gatewaysOf(userIds);
      return Object.fromEntries([...found].map(([userId, nodes]) => [userId, [...nodes].sort()]));
    };
    const sorted = (...nodes: string[]) => [...nodes].sort();

    it("finds a user while a node reports connections of it, and forgets it when the count drops to zero", async () => {
      await registry.heartbeat(a, long);
      await registry.report(a, [{ userId: 1, connections: 2 }]);
      expect(await lookup([1])).to.deep.equal({ 1: [a] });
      // Counts are absolute: a lower count is still a live connection, not a subtraction.
      await registry.report(a, [{ userId: 1, connections: 1 }]);
      expect(await lookup([1])).to.deep.equal({ 1: [a] });
      await registry.report(a, [{ userId: 1, connections: 0 }]);
      expect(await lookup([1])).to.deep.equal({});
      // A zero for a user the node never reported changes nothing.
      await registry.report(a, [{ userId: 2, connections: 0 }]);
      expect(await lookup([1, 2])).to.deep.equal({});
    });

    it("takes several users in one report", async () => {
      await registry.heartbeat(a, long);
      await registry.report(a, [
        { userId: 1, connections: 1 },
        { userId: 2, connections: 3 },
        { userId: 3, connections: 1 },
      ]);
      await registry.report(a, [
        { userId: 2, connections: 0 },
        { userId: 4, connections: 1 },
      ]);
      expect(await lookup([1, 2, 3, 4])).to.deep.equal({ 1: [a], 3: [a], 4: [a] });
    });

    it("answers every node holding a user, and a zero on one node leaves the others", async () => {
      for (const node of [a, b, c]) await registry.heartbeat(node, long);
      await registry.report(a, [{ userId: 1, connections: 1 }]);
      await registry.report(b, [
        { userId: 1, connections: 2 },
        { userId: 2, connections: 1 },
      ]);
      await registry.report(c, [{ userId: 3, connections: 1 }]);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: sorted(a, b), 2: [b], 3: [c] });
      await registry.report(b, [{ userId: 1, connections: 0 }]);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: [a], 2: [b], 3: [c] });
    });

    it("dropNode removes that node's entries at once and leaves the other nodes'", async () => {
      await registry.heartbeat(a, long);
      await registry.heartbeat(b, long);
      await registry.report(a, [
        { userId: 1, connections: 1 },
        { userId: 2, connections: 1 },
      ]);
      await registry.report(b, [{ userId: 2, connections: 1 }]);
      await registry.dropNode(a);
      expect(await lookup([1, 2])).to.deep.equal({ 2: [b] });
      // Dropping an unknown node, or one already dropped, is harmless.
      await registry.dropNode(a);
      await registry.dropNode(`never-${a}`);
      expect(await lookup([1, 2])).to.deep.equal({ 2: [b] });
    });

    it("heartbeat answers whether the node's entries were kept: false on a first beat and after dropNode", async () => {
      expect(await registry.heartbeat(a, long)).to.equal(false);
      expect(await registry.heartbeat(a, long)).to.equal(true);
      await registry.report(a, [{ userId: 1, connections: 1 }]);
      await registry.dropNode(a);
      expect(await registry.heartbeat(a, long)).to.equal(false);
      expect(await lookup([1])).to.deep.equal({});
    });

    it("stops counting a node whose heartbeat lapsed; its entries do not come back when it beats again, a new report does", async () => {
      await registry.heartbeat(a, short);
      await registry.heartbeat(b, long);
      await registry.report(a, [{ userId: 1, connections: 1 }]);
      await registry.report(b, [
        { userId: 1, connections: 1 },
        { userId: 2, connections: 1 },
      ]);
      await registry.report(a, [{ userId: 3, connections: 1 }]);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: sorted(a, b), 2: [b], 3: [a] });

      await subject.elapse(short + 100);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: [b], 2: [b] });

      // The node lost its entries while it was silent: it learns so, and reports what it holds.
      expect(await registry.heartbeat(a, long)).to.equal(false);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: [b], 2: [b] });
      await registry.report(a, [{ userId: 3, connections: 1 }]);
      expect(await lookup([1, 2, 3])).to.deep.equal({ 1: [b], 2: [b], 3: [a] });
    });

    it("keeps counting a node that beats again before its time to live runs out", async () => {
      await registry.heartbeat(a, short);
      await registry.report(a, [{ userId: 1, connections: 1 }]);
      await subject.elapse(short / 2);
      expect(await registry.heartbeat(a, short)).to.equal(true);
      await subject.elapse(short / 2 + 50);
      expect(await lookup([1])).to.deep.equal({ 1: [a] });
    });

    it("looks up many users at once, answering only those with a live connection", async () => {
      const nodes = [a, b, c];
      for (const node of nodes) await registry.heartbeat(node, long);
      const expected: Record<number, string[]> = {};
      for (const [index, node] of nodes.entries()) {
        const counts = [];
        // Users 1..3000: node i holds every user whose number is divisible by i + 2.
        for (let userId = 1; userId <= 3000; userId++) if (userId % (index + 2) === 0) counts.push({ userId, connections: 1 + (userId % 3) });
        await registry.report(node, counts);
        for (const { userId } of counts) (expected[userId] ??= []).push(node);
      }
      for (const userId of Object.keys(expected)) expected[Number(userId)].sort();
      const asked = Array.from({ length: 4000 }, (_, i) => i + 1);
      expect(await lookup(asked)).to.deep.equal(expected);
    });

    it("answers an empty map for unknown users and for no users", async () => {
      await registry.heartbeat(a, long);
      await registry.report(a, [{ userId: 7, connections: 1 }]);
      expect(await lookup([8, 9, 1_000_000_001])).to.deep.equal({});
      expect(await lookup([])).to.deep.equal({});
      expect(await lookup([7, 8])).to.deep.equal({ 7: [a] });
    });
  });
}
