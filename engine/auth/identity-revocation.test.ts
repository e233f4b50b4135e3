import { expect } from "chai";
import moleculer, { type ServiceBroker } from "moleculer";
import { identityCacheOf, identityCacheService } from "../../api/identity-cache.js";
import { IdentityCacheBounds, type TokenIdentity } from "../../shared/identity.js";
import { forgetIdentities, reachesIdentityCache } from "./identity-revocation.js";

// Brokers joined by Moleculer's in-process transporter: an engine answering token questions, an
// edge with a real identity cache, and a process whose cache never answers (stuck or cut off).
describe("forgetIdentities", () => {
  let brokers: ServiceBroker[];
  let engine: ServiceBroker;
  let edge: ServiceBroker;
  const clock = { now: () => Date.now() };

  const broker = (nodeID: string) =>
    new moleculer.ServiceBroker({ namespace: `forget-${process.pid}`, nodeID, transporter: "Fake", logLevel: "fatal", heartbeatInterval: 1, heartbeatTimeout: 60 });

  before(async function () {
    this.timeout(30_000);
    engine = broker("engine");
    edge = broker("edge");
    const stuck = broker("stuck");
    brokers = [engine, edge, stuck];
    engine.createService({
      name: "auth",
      actions: {
        resolveToken: (ctx: moleculer.Context<{ token: string }>): TokenIdentity => ({
          kind: "user",
          userId: Number(ctx.params.token),
          deviceId: "d1",
          expiresAt: Date.now() + 60_000,
          active: true,
          ipWhitelist: [],
          cacheable: reachesIdentityCache(engine, ctx.nodeID!),
        }),
      },
    });
    edge.createService(identityCacheService(clock));
    stuck.createService({ name: "identityCache", actions: { forget: () => new Promise(() => {}) } });
    await Promise.all(brokers.map((b) => b.start()));
    await engine.waitForServices(["identityCache"]);
    const known = () => (engine.registry.actions.get("identityCache.forget")?.endpoints.length ?? 0) === 2;
    while (!known()) await new Promise((resolve) => setTimeout(resolve, 10));
  });

  after(async () => {
    await Promise.all(brokers.map((b) => b.stop()));
  });

  it("makes every reachable cache forget before it resolves, and does not wait on one that never answers", async function () {
    this.timeout(IdentityCacheBounds.forgetTimeoutMs + 10_000);
    const cache = identityCacheOf(edge);
    await cache.resolve("7", "");
    await cache.resolve("8", "");
    expect(cache.size).to.equal(2);
    await forgetIdentities(engine, { userId: 7 });
    expect(cache.size).to.equal(1);
  });

  it("answers whether a node's cache is one the engine can reach", () => {
    expect(reachesIdentityCache(engine, "edge")).to.equal(true);
    expect(reachesIdentityCache(engine, "engine")).to.equal(false);
    expect(reachesIdentityCache(engine, "elsewhere")).to.equal(false);
  });
});
