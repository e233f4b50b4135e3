import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { loadConfig } from "../../shared/config.js";
import type { LiveEvent } from "../../shared/bus.js";
import { AdjustableClock } from "../../shared/clock.js";
import type { EngineDeps } from "../deps.js";
import { MemoryEphemeralState } from "../../ports/ephemeral/memory-ephemeral-state.js";
import { FanOuts } from "../delivery/fan-out.js";
import { FanOutIds } from "../delivery/fan-out-ids.js";
import { sequencedPush, type FanOutAppend } from "../delivery/fan-out-contracts.js";
import { Inbox } from "./inbox.js";
import { encodeEntry, snUpdateOf } from "../delivery/stream-entry.js";
import { Ownership } from "../ownership.js";
import { openSqliteStore } from "../../ports/store/sqlite/sqlite-store.js";
import type { Store } from "../../ports/store/store.js";
import { MemoryPresenceRegistry } from "../../ports/presence/memory-presence-registry.js";
import { finishAcrossLeaseMove, nicknamesIn } from "../../test/support/fan-out-races.js";
import { nextTestFanOutId } from "../../test/support/fan-outs.js";

describe("Inbox actor", () => {
  let dir: string;
  let store: Store;
  let deps: EngineDeps;
  let fanOutIds: FanOutIds;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-inbox-"));
    store = await openSqliteStore(dir);
    const clock = new AdjustableClock();
    fanOutIds = await FanOutIds.claim(store.leases, clock, { node: "inbox-test", instance: "inbox-test/1" });
    deps = {
      config: loadConfig({ DATA_DIR: dir }),
      clock,
      store,
      ephemeral: new MemoryEphemeralState(clock),
      codeSender: { supports: () => true, send: async () => {}, close: async () => {} },
      pushNotifier: { send: async () => ({ rejected: [] }) },
      fanOuts: new FanOuts(store, clock, fanOutIds),
      ownership: new Ownership(store.leases, clock, "inbox-test"),
      presence: new MemoryPresenceRegistry(),
      // The Inbox is given its publisher directly in these tests.
      live: { send: async () => {}, parkAgentFeeds: async () => 0, releaseAgentFeeds: async () => {} },
      webhookQueued: () => {},
    };
  });
  after(async () => {
    await fanOutIds.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const entry = (nickname: string) => encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: 1, newNickname: nickname } });
  const fanOut = (recipients: number[], nickname: string, again = false): FanOutAppend => ({ fanOutId: String(nextTestFanOutId()), entry: entry(nickname), recipients, again });
  const nicknames = async (userId: number) =>
    (await store.updates.readUpdates(userId, 0, 1000)).map(snUpdateOf).map((u) => [u.sn, u.update.case === "userProfileUpdated" && u.update.value.newNickname]);

  it("appends fan-outs arriving together in one write, in arrival order, with dense sn values per user", async () => {
    const published: LiveEvent[] = [];
    let writes = 0;
    const counting: Store = { ...store, updates: { ...store.updates, append: (write) => (writes++, store.updates.append(write)) } };
    const inbox = new Inbox({ ...deps, store: counting }, (event) => void published.push(event));
    const answers = await Promise.all(Array.from({ length: 25 }, (_, i) => inbox.appendFanOuts([fanOut(i % 2 ? [501, 502] : [501], `n${i}`)])));
    expect(writes).to.equal(1);
    expect(answers.map(([{ sns }]) => sns.find(([userId]) => userId === 501)![1])).to.deep.equal(Array.from({ length: 25 }, (_, i) => i + 1));
    expect((await nicknames(501)).map(([, nickname]) => nickname)).to.deep.equal(Array.from({ length: 25 }, (_, i) => `n${i}`));
    expect((await nicknames(502)).map(([sn]) => sn)).to.deep.equal(Array.from({ length: 12 }, (_, i) => i + 1));
    // One push per fan-out, the entry once (without sn) and each recipient's sn beside it.
    expect(published).to.have.length(25);
    expect(published[1]).to.deep.include({ recipients: [[501, 2], [502, 1]] });
    expect(published[1].update.snUpdate).to.deep.equal({ userProfileUpdated: { userId: 1, newNickname: "n1" } });
  });

  it("answers an append once it is stored, while its push is never delivered, and takes the next write meanwhile", async () => {
    let pushes = 0;
    const inbox = new Inbox(deps, () => {
      pushes++;
      return new Promise<void>(() => {});
    });
    // An answer that waited for the push, however briefly bounded, would lose this race.
    const noAnswer = () => new Promise((resolve) => setTimeout(() => resolve("no answer yet"), 500).unref());
    expect(await Promise.race([inbox.appendFanOuts([fanOut([531], "push under way")]), noAnswer()])).to.deep.equal([{ sns: [[531, 1]] }]);
    expect(await Promise.race([inbox.appendFanOuts([fanOut([532], "next write")]), noAnswer()])).to.deep.equal([{ sns: [[532, 1]] }]);
    expect(pushes).to.equal(2);
  });

  it("leaves a fan-out its deliverer pushes itself unpushed, and answers what that push needs: the sns and the webhook's recipients", async () => {
    const published: LiveEvent[] = [];
    const inbox = new Inbox(deps, (event) => void published.push(event));
    const mine = { ...fanOut([534, 535], "pushed by its deliverer"), pushedByDeliverer: true };
    const [appended] = await inbox.appendFanOuts([mine, fanOut([534], "pushed by the inbox")]);
    expect(appended).to.deep.equal({ sns: [[534, 1], [535, 1]] });
    expect(published.map((event) => "recipients" in event && event.recipients)).to.deep.equal([[[534, 2]]]);
    // The push its deliverer builds from the answer is the one the inbox would have sent.
    expect(sequencedPush(mine, appended)).to.deep.equal({ update: { snUpdate: mine.entry.wire }, recipients: [[534, 1], [535, 1]] });
  });

  it("never forks a stream when two owners write it (a reshard): the stale one reloads and retries", async () => {
    const first = new Inbox(deps, () => {});
    const second = new Inbox(deps, () => {});
    await first.appendFanOuts([fanOut([505, 506], "a")]);
    await second.appendFanOuts([fanOut([506], "b")]);
    // `first` still believes 506's latest sn is 1; the store refuses sn 2 and it must move on to 3.
    const [{ sns }] = await first.appendFanOuts([fanOut([505, 506], "c")]);
    expect(sns).to.deep.equal([
      [505, 2],
      [506, 3],
    ]);
    expect(await nicknames(506)).to.deep.equal([
      [1, "a"],
      [2, "b"],
      [3, "c"],
    ]);
    expect(await nicknames(505)).to.deep.equal([
      [1, "a"],
      [2, "c"],
    ]);
  });

  it("trusts what it knew of a stream only while it holds the stream's lease: a read after the stream moved away, and a write once it came back, see the other owner's entries", async () => {
    const nodeA = new Ownership(store.leases, deps.clock, "inbox-a");
    const nodeB = new Ownership(store.leases, deps.clock, "inbox-b");
    let writes = 0;
    const counting: Store = { ...store, updates: { ...store.updates, append: (write) => (writes++, store.updates.append(write)) } };
    const a = new Inbox({ ...deps, store: counting, ownership: nodeA }, () => {});
    const b = new Inbox({ ...deps, ownership: nodeB }, () => {});
    await a.appendFanOuts([fanOut([521], "a1")]);
    await a.appendFanOuts([fanOut([521], "a2")]);
    // The stream's shard is placed on B now: A gives its lease up, B takes it and appends.
    await nodeA.place({ isMine: () => false, isGone: () => false });
    await b.appendFanOuts([fanOut([521], "b3")]);
    expect(await a.currentState(521)).to.equal(3);
    expect(await a.difference(521, 3)).to.deep.include({ sn: 3, updateTooLong: false });
    expect((await a.difference(521, 2)).updates.map((u) => u.sn)).to.deep.equal([3]);
    // Back on A: its first write numbers from the store, not from what it knew before (no refused write).
    await nodeB.place({ isMine: () => false, isGone: () => false });
    await nodeA.place({ isMine: () => true, isGone: () => false });
    writes = 0;
    const [{ sns }] = await a.appendFanOuts([fanOut([521], "a4")]);
    expect(sns).to.deep.equal([[521, 4]]);
    expect(writes).to.equal(1);
    await Promise.all([nodeA.stop(), nodeB.stop()]);
  });

  it("takes a fan-out delivered again only into the streams that do not hold it yet", async () => {
    const inbox = new Inbox(deps, () => {});
    const first = fanOut([507], "once");
    await inbox.appendFanOuts([first]);
    const [{ sns }] = await inbox.appendFanOuts([{ ...first, recipients: [507, 508], again: true }]);
    expect(sns).to.deep.equal([[508, 1]]);
    expect(await nicknames(507)).to.deep.equal([[1, "once"]]);
    expect(await nicknames(508)).to.deep.equal([[1, "once"]]);
  });

  it("takes a recorded fan-out finished by two engines at once into each stream once, whether the two land in one write or race another write", async () => {
    const inbox = new Inbox(deps, () => {});
    const recorded = { ...fanOut([511, 512], "twice"), again: true };
    // Two callers in one turn: both fan-outs join one write.
    const [fromA, fromB] = await Promise.all([inbox.appendFanOuts([recorded]), inbox.appendFanOuts([recorded])]);
    expect([...fromA, ...fromB].flatMap(({ sns }) => sns).sort()).to.deep.equal([
      [511, 1],
      [512, 1],
    ]);
    expect(await nicknames(511)).to.deep.equal([[1, "twice"]]);

    // Another inbox (another engine's) wrote the same fan-out between this one's read of the
    // holders and its write: the write meets a conflict and, reading again, finds it held.
    const other = new Inbox(deps, () => {});
    const raced = { ...fanOut([513], "raced"), again: true };
    let racedOnce = false;
    const racing: Store = {
      ...store,
      updates: {
        ...store.updates,
        append: async (write) => {
          if (!racedOnce) {
            racedOnce = true;
            await other.appendFanOuts([raced]);
          }
          return store.updates.append(write);
        },
      },
    };
    await new Inbox({ ...deps, store: racing }, () => {}).appendFanOuts([raced]);
    expect(await nicknames(513)).to.deep.equal([[1, "raced"]]);
  });

  it("takes a recorded fan-out into each stream once when two engines finish it across a lease move: the old owner's write lands between the new owner's read of the holders and its write", async () => {
    const { recovered, late } = await finishAcrossLeaseMove({ stores: { old: store, new: store }, clock: deps.clock, inboxOf: (on, ownership) => new Inbox({ ...deps, store: on, ownership }, () => {}), recipients: [541, 542] });
    // The store refused the second entry; the retry found both streams holding it. A late first
    // delivery, which does not ask who holds it, meets the same refusal.
    expect(recovered).to.deep.equal([]);
    expect(late).to.deep.equal([]);
    for (const userId of [541, 542]) {
      expect(await nicknamesIn(store, userId)).to.deep.equal([
        [1, "before"],
        [2, "recovered"],
      ]);
    }
  });

  it("encodes sn values beyond one varint byte correctly", async () => {
    const inbox = new Inbox(deps, () => {});
    await inbox.appendFanOuts(Array.from({ length: 300 }, (_, i) => fanOut([504], `n${i}`)));
    expect((await nicknames(504)).at(-1)).to.deep.equal([300, "n299"]);
  });

  it("a failed write stores none of the fan-outs taken with it, and every one of them fails", async () => {
    let fail = true;
    const failing: Store = { ...store, updates: { ...store.updates, append: (write) => (fail ? Promise.reject(new Error("disk full")) : store.updates.append(write)) } };
    const inbox = new Inbox({ ...deps, store: failing }, () => {});
    const outcomes = await Promise.all([inbox.appendFanOuts([fanOut([509], "x")]), inbox.appendFanOuts([fanOut([509, 510], "y")])].map((appended) => appended.then(() => "ok", () => "failed")));
    expect(outcomes).to.deep.equal(["failed", "failed"]);
    expect(await nicknames(509)).to.deep.equal([]);
    fail = false;
    expect(await inbox.appendFanOuts([fanOut([509], "z")])).to.deep.equal([{ sns: [[509, 1]] }]);
  });
});
