import { expect } from "chai";
import { CachedPresenceRegistry } from "./cached-presence-registry.js";
import { MemoryPresenceRegistry } from "./memory-presence-registry.js";

/** The shared registry as the gateways write it, with the lookups that reach it counted (and held, when asked). */
class SharedRegistry extends MemoryPresenceRegistry {
  lookups: number[][] = [];
  hold: Promise<void> | undefined;

  override async gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    this.lookups.push([...userIds]);
    const answer = await super.gatewaysOf(userIds);
    await this.hold;
    return answer;
  }
}

const sorted = (found: Map<number, string[]>) => Object.fromEntries([...found].map(([userId, nodes]) => [userId, [...nodes].sort()]));

describe("CachedPresenceRegistry", () => {
  let shared: SharedRegistry;
  let now: number;
  let cache: CachedPresenceRegistry;
  beforeEach(() => {
    shared = new SharedRegistry();
    now = 0;
    cache = new CachedPresenceRegistry(shared, { ttlMs: 10_000, maxUsers: 3 }, () => now);
  });

  /** A gateway's report: written to the shared registry, then announced to the engine. */
  async function gatewayReports(node: string, userId: number, connections: number): Promise<void> {
    await shared.report(node, [{ userId, connections }]);
    cache.changed(node, [{ userId, connections }]);
  }

  it("asks the shared registry once per user, then answers from its copy, online and offline alike", async () => {
    await shared.report("g1", [{ userId: 1, connections: 1 }]);
    expect(sorted(await cache.gatewaysOf([1, 2]))).to.deep.equal({ 1: ["g1"] });
    expect(sorted(await cache.gatewaysOf([1, 2]))).to.deep.equal({ 1: ["g1"] });
    expect(sorted(await cache.gatewaysOf([2, 3]))).to.deep.equal({});
    expect(shared.lookups).to.deep.equal([[1, 2], [3]]);
  });

  it("follows the gateways' announcements without asking again: a connection, a second gateway, the last one closing", async () => {
    await cache.gatewaysOf([1]);
    await gatewayReports("g1", 1, 1);
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({ 1: ["g1"] });
    await gatewayReports("g2", 1, 2);
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({ 1: ["g1", "g2"] });
    await gatewayReports("g1", 1, 0);
    await gatewayReports("g2", 1, 0);
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({});
    expect(shared.lookups).to.have.length(1);
  });

  it("asks again once an answer is older than its time to live", async () => {
    await cache.gatewaysOf([1]);
    await shared.report("g1", [{ userId: 1, connections: 1 }]); // an announcement that never arrived
    now += 9_999;
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({});
    now += 1;
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({ 1: ["g1"] });
    expect(shared.lookups).to.have.length(2);
  });

  it("does not keep an answer read before an announcement about its user that came while it was in flight", async () => {
    let release = () => {};
    shared.hold = new Promise((resolve) => (release = resolve));
    const inFlight = cache.gatewaysOf([1, 2]);
    await new Promise((resolve) => setImmediate(resolve));
    await gatewayReports("g1", 1, 1);
    release();
    shared.hold = undefined;
    // Answered as read, since it may not know better; but user 1's answer is not kept.
    expect(sorted(await inFlight)).to.deep.equal({});
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({ 1: ["g1"] });
    expect(sorted(await cache.gatewaysOf([2]))).to.deep.equal({});
    expect(shared.lookups).to.deep.equal([[1, 2], [1]]);
  });

  it("forgets what it kept of a gateway that starts over or that it lost sight of, and what lookups in flight read", async () => {
    await gatewayReports("g1", 1, 1);
    await gatewayReports("g2", 2, 1);
    await cache.gatewaysOf([1, 2]);
    let release = () => {};
    shared.hold = new Promise((resolve) => (release = resolve));
    const inFlight = cache.gatewaysOf([3]);
    await new Promise((resolve) => setImmediate(resolve));
    await shared.dropNode("g1");
    cache.nodeReset("g1");
    release();
    shared.hold = undefined;
    await inFlight;
    expect(sorted(await cache.gatewaysOf([1, 2, 3]))).to.deep.equal({ 2: ["g2"] });
    expect(shared.lookups).to.deep.equal([[1, 2], [3], [1, 3]]);
  });

  it("keeps at most maxUsers, dropping the one asked about least recently", async () => {
    await cache.gatewaysOf([1, 2, 3]);
    await cache.gatewaysOf([1]);
    await cache.gatewaysOf([4]);
    shared.lookups = [];
    await cache.gatewaysOf([1, 3, 4]);
    expect(shared.lookups).to.deep.equal([]);
    await cache.gatewaysOf([2]);
    expect(shared.lookups).to.deep.equal([[2]]);
  });

  it("passes the gateways' own writes through, keeping its copy in step", async () => {
    await cache.gatewaysOf([1]);
    await cache.report("g1", [{ userId: 1, connections: 1 }]);
    expect(sorted(await shared.gatewaysOf([1]))).to.deep.equal({ 1: ["g1"] });
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({ 1: ["g1"] });
    await cache.dropNode("g1");
    expect(sorted(await cache.gatewaysOf([1]))).to.deep.equal({});
  });
});
