// The promises of the ephemeral-state port, as one mocha suite every driver must pass. Attempt
// limits rely on the atomic operations, so each is also driven by concurrent callers here.
import { randomUUID } from "node:crypto";
import { expect } from "chai";
import type { EphemeralState } from "./ephemeral-state.js";

export interface EphemeralStateUnderTest {
  state: EphemeralState;
  /** Lets ms pass as the driver sees time: moves a test clock, or waits where the store keeps real time. */
  elapse(ms: number): Promise<void>;
  cleanup(): Promise<void>;
}

const long = 60_000;
const short = 100;
const concurrency = 50;

export function describeEphemeralStateConformance(name: string, open: () => Promise<EphemeralStateUnderTest>): void {
  describe(`ephemeral state conformance: ${name}`, () => {
    let subject: EphemeralStateUnderTest;
    let state: EphemeralState;
    // A shared backing store may hold other runs' keys: every test writes under its own prefix.
    let prefix: string;
    const key = (label: string) => `${prefix}:${label}`;
    beforeEach(async () => {
      subject = await open();
      state = subject.state;
      prefix = `conformance:${randomUUID()}`;
    });
    afterEach(async () => subject.cleanup());

    const all = <T>(make: (i: number) => Promise<T>) => Promise.all(Array.from({ length: concurrency }, (_, i) => make(i)));

    it("stores, replaces and deletes values; an absent key reads as undefined", async () => {
      expect(await state.get(key("a"))).to.equal(undefined);
      await state.set(key("a"), "one", long);
      await state.set(key("a"), "two", long);
      expect(await state.get(key("a"))).to.equal("two");
      await state.delete(key("a"));
      expect(await state.get(key("a"))).to.equal(undefined);
      await state.delete(key("never"));
    });

    it("forgets a value once its time to live has passed", async () => {
      await state.set(key("brief"), "x", short);
      await state.set(key("lasting"), "y", long);
      await subject.elapse(short + 50);
      expect(await state.get(key("brief"))).to.equal(undefined);
      expect(await state.get(key("lasting"))).to.equal("y");
    });

    it("setIfAbsent stores only into an absent or expired key, and exactly one of many concurrent callers wins", async () => {
      expect(await state.setIfAbsent(key("once"), "first", short)).to.equal(true);
      expect(await state.setIfAbsent(key("once"), "second", long)).to.equal(false);
      expect(await state.get(key("once"))).to.equal("first");
      await subject.elapse(short + 50);
      expect(await state.setIfAbsent(key("once"), "third", long)).to.equal(true);
      expect(await state.get(key("once"))).to.equal("third");

      const won = await all((i) => state.setIfAbsent(key("race"), String(i), long));
      const winners = won.flatMap((stored, i) => (stored ? [i] : []));
      expect(winners).to.have.length(1);
      expect(await state.get(key("race"))).to.equal(String(winners[0]));
    });

    it("take answers the value and removes it, to exactly one of many concurrent callers", async () => {
      expect(await state.take(key("absent"))).to.equal(undefined);
      await state.set(key("single"), "v", long);
      expect(await state.take(key("single"))).to.equal("v");
      expect(await state.get(key("single"))).to.equal(undefined);

      await state.set(key("race"), "prize", long);
      const taken = await all(() => state.take(key("race")));
      expect(taken.filter((value) => value !== undefined)).to.deep.equal(["prize"]);
    });

    it("deleteIfEquals removes the key only while it holds the value, once among concurrent callers", async () => {
      expect(await state.deleteIfEquals(key("absent"), "v")).to.equal(false);
      await state.set(key("k"), "mine", long);
      expect(await state.deleteIfEquals(key("k"), "theirs")).to.equal(false);
      expect(await state.get(key("k"))).to.equal("mine");
      expect(await state.deleteIfEquals(key("k"), "mine")).to.equal(true);
      expect(await state.get(key("k"))).to.equal(undefined);

      const counted = await state.increment(key("counter"), long);
      expect(await state.deleteIfEquals(key("counter"), String(counted.count + 1))).to.equal(false);
      expect(await state.deleteIfEquals(key("counter"), String(counted.count))).to.equal(true);

      await state.set(key("race"), "v", long);
      const removed = await all(() => state.deleteIfEquals(key("race"), "v"));
      expect(removed.filter(Boolean)).to.have.length(1);
    });

    it("increment creates a counter at 1 with its time to live, and a live counter keeps its expiry", async () => {
      const first = await state.increment(key("n"), long);
      expect(first.count).to.equal(1);
      expect(first.ttlMs).to.be.within(1, long);
      const second = await state.increment(key("n"), 10 * long);
      expect(second.count).to.equal(2);
      expect(second.ttlMs).to.be.within(1, long);
      expect(await state.get(key("n"))).to.equal("2");
    });

    it("increment starts again at 1 after the counter expired", async () => {
      await state.increment(key("n"), short);
      await state.increment(key("n"), short);
      await subject.elapse(short + 50);
      expect((await state.increment(key("n"), long)).count).to.equal(1);
    });

    it("concurrent increments each get their own count, with none lost or repeated", async () => {
      const counts = (await all(() => state.increment(key("n"), long))).map((counter) => counter.count);
      expect([...counts].sort((a, b) => a - b)).to.deep.equal(Array.from({ length: concurrency }, (_, i) => i + 1));
      expect(await state.get(key("n"))).to.equal(String(concurrency));
    });

    it("expire gives a live key a new time to live and keeps its value; an absent key answers false", async () => {
      expect(await state.expire(key("absent"), long)).to.equal(false);
      expect(await state.get(key("absent"))).to.equal(undefined);

      await state.increment(key("lengthened"), short);
      expect(await state.expire(key("lengthened"), long)).to.equal(true);
      await state.set(key("shortened"), "v", long);
      expect(await state.expire(key("shortened"), short)).to.equal(true);
      await subject.elapse(short + 50);
      const lengthened = await state.increment(key("lengthened"), short);
      expect(lengthened.count).to.equal(2);
      expect(lengthened.ttlMs).to.be.greaterThan(short);
      expect(await state.get(key("shortened"))).to.equal(undefined);
    });
  });
}
