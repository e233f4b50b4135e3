import { expect } from "chai";
import { Errors, ParleyError, parleyErrorParts, type CatalogueEntry } from "../shared/errors.js";
import type { TokenIdentity } from "../shared/identity.js";
import { IdentityCache, defaultIdentityCachePolicy } from "./identity-cache.js";

class TestClock {
  constructor(public ms = 1_000_000) {}
  now(): number {
    return this.ms;
  }
}

const user = (userId: number, deviceId: string, expiresAt = 10_000_000): TokenIdentity => ({ kind: "user", userId, deviceId, expiresAt, active: true, ipWhitelist: [], cacheable: true });
const agent = (userId: number, change: Partial<TokenIdentity> = {}): TokenIdentity => ({ kind: "agent", userId, deviceId: "", expiresAt: 0, active: true, ipWhitelist: [], cacheable: true, ...change });

/**
 * An engine stand-in: answers what `facts` holds for each token (or UNAUTHENTICATED) when asked,
 * and records every question. While `held` is set, answers are read at once but delivered only
 * when the test says, as an answer read before a revocation may arrive after it.
 */
class Engine {
  readonly facts = new Map<string, TokenIdentity>();
  readonly asked: string[] = [];
  held: { token: string; answer: () => void }[] | undefined;

  readonly fetch = (token: string): Promise<TokenIdentity> => {
    this.asked.push(token);
    const facts = this.facts.get(token);
    const read = facts ? Promise.resolve({ ...facts, ipWhitelist: [...facts.ipWhitelist] }) : Promise.reject(new ParleyError(Errors.unauthenticated));
    read.catch(() => {});
    const held = this.held;
    if (!held) return read;
    return new Promise((resolve) => held.push({ token, answer: () => resolve(read) }));
  };
}

async function refusal(call: Promise<unknown>): Promise<CatalogueEntry | undefined> {
  try {
    await call;
  } catch (err) {
    return parleyErrorParts(err)?.entry;
  }
  throw new Error("the call should have been refused");
}

/** Lets pending promise callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("IdentityCache", () => {
  let engine: Engine;
  let clock: TestClock;
  let cache: IdentityCache;
  beforeEach(() => {
    engine = new Engine();
    clock = new TestClock();
    cache = new IdentityCache(engine.fetch, clock);
  });

  it("asks the engine once per token and answers later requests from memory", async () => {
    engine.facts.set("t1", user(7, "d1"));
    const first = await cache.resolve("t1", "127.0.0.1");
    const second = await cache.resolve("t1", "127.0.0.1");
    expect(first).to.deep.equal({ kind: "user", userId: 7, deviceId: "d1" });
    expect(second).to.equal(first);
    expect(engine.asked).to.deep.equal(["t1"]);
    expect(Object.isFrozen(first)).to.equal(true);
  });

  it("caches no refusal: an unknown token is asked about every time", async () => {
    expect(await refusal(cache.resolve("nope", ""))).to.equal(Errors.unauthenticated);
    expect(await refusal(cache.resolve("nope", ""))).to.equal(Errors.unauthenticated);
    expect(engine.asked).to.deep.equal(["nope", "nope"]);
    expect(cache.size).to.equal(0);
  });

  it("serves, without keeping, an answer the engine marks not cacheable (it cannot reach this process yet)", async () => {
    engine.facts.set("t1", { ...user(7, "d1"), cacheable: false });
    expect((await cache.resolve("t1", "")).userId).to.equal(7);
    expect((await cache.resolve("t1", "")).userId).to.equal(7);
    expect(engine.asked).to.deep.equal(["t1", "t1"]);
    expect(cache.size).to.equal(0);
  });

  it("asks once for a burst of requests carrying one uncached token", async () => {
    engine.facts.set("t1", user(7, "d1"));
    const answers = await Promise.all([cache.resolve("t1", ""), cache.resolve("t1", ""), cache.resolve("t1", "")]);
    expect(answers.map((a) => a.userId)).to.deep.equal([7, 7, 7]);
    expect(engine.asked).to.have.length(1);
  });

  it("keeps at most maxEntries, evicting the least recently used", async () => {
    cache = new IdentityCache(engine.fetch, clock, { ...defaultIdentityCachePolicy, maxEntries: 2 });
    for (const [token, userId] of [["a", 1], ["b", 2], ["c", 3]] as const) engine.facts.set(token, user(userId, "d"));
    await cache.resolve("a", "");
    await cache.resolve("b", "");
    await cache.resolve("a", ""); // a is now more recent than b
    await cache.resolve("c", "");
    expect(cache.size).to.equal(2);
    engine.asked.length = 0;
    await cache.resolve("a", "");
    await cache.resolve("c", "");
    expect(engine.asked).to.deep.equal([]);
    await cache.resolve("b", "");
    expect(engine.asked).to.deep.equal(["b"]);
    expect(cache.size).to.equal(2);
  });

  it("asks again once an entry reaches the maximum age", async () => {
    engine.facts.set("t1", user(7, "d1"));
    await cache.resolve("t1", "");
    clock.ms += defaultIdentityCachePolicy.maxAgeMs - 1;
    await cache.resolve("t1", "");
    expect(engine.asked).to.have.length(1);
    clock.ms += 1;
    await cache.resolve("t1", "");
    expect(engine.asked).to.have.length(2);
  });

  it("answers TOKEN_EXPIRED from memory once the access token's expiry passes", async () => {
    engine.facts.set("t1", user(7, "d1", clock.ms + 1000));
    await cache.resolve("t1", "");
    clock.ms += 1000;
    expect(await refusal(cache.resolve("t1", ""))).to.equal(Errors.tokenExpired);
    expect(engine.asked).to.have.length(1);
  });

  it("checks an agent's whitelist, then its status, from memory", async () => {
    engine.facts.set("a1", agent(20, { ipWhitelist: ["10.0.0.0/8", "not an address"] }));
    engine.facts.set("a2", agent(21, { ipWhitelist: ["10.0.0.0/8"], active: false }));
    expect((await cache.resolve("a1", "10.1.2.3")).userId).to.equal(20);
    expect((await cache.resolve("a1", "::ffff:10.1.2.3")).userId).to.equal(20);
    expect(await refusal(cache.resolve("a1", "192.0.2.1"))).to.equal(Errors.ipNotAllowed);
    expect(await refusal(cache.resolve("a2", "192.0.2.1"))).to.equal(Errors.ipNotAllowed);
    expect(await refusal(cache.resolve("a2", "10.0.0.1"))).to.equal(Errors.agentNotActive);
    expect(engine.asked).to.deep.equal(["a1", "a2"]);
  });

  it("forgets the tokens of the given devices only, or every token of the account", async () => {
    engine.facts.set("d1", user(7, "d1"));
    engine.facts.set("d2", user(7, "d2"));
    engine.facts.set("other", user(8, "d1"));
    engine.facts.set("bot", agent(9));
    for (const token of ["d1", "d2", "other", "bot"]) await cache.resolve(token, "");
    cache.forget(7, ["d1"]);
    engine.asked.length = 0;
    for (const token of ["d1", "d2", "other", "bot"]) await cache.resolve(token, "");
    expect(engine.asked).to.deep.equal(["d1"]);
    cache.forget(7);
    cache.forget(9);
    engine.asked.length = 0;
    for (const token of ["d1", "d2", "other", "bot"]) await cache.resolve(token, "");
    expect(engine.asked).to.deep.equal(["d1", "d2", "bot"]);
  });

  it("never caches an answer that raced a forget of its account: it asks again, and that answer counts", async () => {
    engine.facts.set("t1", user(7, "d1"));
    engine.held = [];
    const resolving = cache.resolve("t1", "");
    await settle();
    expect(engine.held).to.have.length(1);
    // The engine read the session, then the session was revoked and the caches told, then the
    // stale answer arrived.
    cache.forget(7, ["d1"]);
    engine.facts.delete("t1");
    engine.held.shift()!.answer();
    await settle();
    expect(engine.held).to.have.length(1);
    engine.held.shift()!.answer();
    expect(await refusal(resolving)).to.equal(Errors.unauthenticated);
    expect(cache.size).to.equal(0);
  });

  it("serves, without caching, an answer that raced forgets twice", async () => {
    engine.facts.set("t1", user(7, "d1"));
    engine.held = [];
    const resolving = cache.resolve("t1", "");
    await settle();
    cache.forget(7, ["d1"]);
    engine.held.shift()!.answer();
    await settle();
    cache.forget(7, ["d1"]);
    engine.held.shift()!.answer();
    expect((await resolving).userId).to.equal(7);
    expect(cache.size).to.equal(0);
    engine.held = undefined;
    await cache.resolve("t1", "");
    expect(cache.size).to.equal(1);
  });

  it("caches answers that raced only another account's forget, or a forget before they began", async () => {
    engine.facts.set("t1", user(7, "d1"));
    engine.facts.set("t2", user(8, "d1"));
    cache.forget(7);
    engine.held = [];
    const first = cache.resolve("t1", "");
    const second = cache.resolve("t2", "");
    await settle();
    cache.forget(8);
    for (const held of engine.held.splice(0)) held.answer();
    await settle();
    // t2's account was forgotten while its answer was under way: asked again.
    expect(engine.held.map((h) => h.token)).to.deep.equal(["t2"]);
    engine.held.shift()!.answer();
    await Promise.all([first, second]);
    engine.held = undefined;
    engine.asked.length = 0;
    await cache.resolve("t1", "");
    await cache.resolve("t2", "");
    expect(engine.asked).to.deep.equal([]);
  });

  it("caches an answer that began after the forget, while an older answer is still under way", async () => {
    engine.facts.set("old", user(7, "d1"));
    engine.facts.set("new", user(7, "d2"));
    engine.held = [];
    const older = cache.resolve("old", "");
    await settle();
    cache.forget(7, ["d1"]);
    const newer = cache.resolve("new", "");
    await settle();
    engine.held[1].answer();
    await newer;
    engine.held[0].answer();
    await settle();
    engine.held[2].answer();
    await older;
    engine.held = undefined;
    engine.asked.length = 0;
    await cache.resolve("new", "");
    expect(engine.asked).to.deep.equal([]);
  });
});
