// The ordering rules of the update stream, against a scripted server stream: what is delivered,
// in which order, and when GetDifference is read.
import { create } from "@bufbuild/protobuf";
import { expect } from "chai";
import { SnUpdateSchema, UpdateSchema, UpdateSequencer, snVerdict, type DifferencePage, type NonSnUpdate, type SnUpdate, type Update } from "../src/index.js";

const entry = (sn: number): SnUpdate => create(SnUpdateSchema, { sn, update: { case: "contactAdded", value: { peerUserId: 1000 + sn } } });
const live = (sn: number): Update => create(UpdateSchema, { update: { case: "snUpdate", value: entry(sn) } });
const ephemeral = (actionId: string): Update =>
  create(UpdateSchema, { update: { case: "nonSnUpdate", value: { update: { case: "cardAction", value: { actionId, conversationId: 1n, messageId: 1n } } } } });

/** A user's stream on the "server": entries 1..latest, read in pages of three. */
class ScriptedStream {
  latest = 0;
  retainedFrom = 1;
  reads: number[] = [];
  /** When set, each read waits for it (to let pushes arrive during a catch-up). */
  gate: Promise<void> | undefined;
  failNext = false;

  async difference(sn: number): Promise<DifferencePage> {
    this.reads.push(sn);
    await this.gate;
    if (this.failNext) {
      this.failNext = false;
      throw new Error("GetDifference failed");
    }
    if (sn < this.retainedFrom - 1 || sn > this.latest) return { updates: [], sn: this.latest, hasMore: false, updateTooLong: true };
    const updates = [];
    for (let next = sn + 1; next <= Math.min(this.latest, sn + 3); next++) updates.push(entry(next));
    const last = updates.at(-1)?.sn ?? sn;
    return { updates, sn: last, hasMore: last < this.latest, updateTooLong: false };
  }
}

interface Received {
  sns: number[];
  ephemeral: string[];
  order: string[];
  resyncs: number[];
  errors: unknown[];
  catchUpFailures: unknown[];
}

function sequencerOf(stream: ScriptedStream | undefined, initialSn: number, onUpdate?: (e: SnUpdate) => void | Promise<void>) {
  const received: Received = { sns: [], ephemeral: [], order: [], resyncs: [], errors: [], catchUpFailures: [] };
  const sequencer = new UpdateSequencer({
    initialSn,
    difference: stream ? (sn) => stream.difference(sn) : undefined,
    handlers: {
      async onUpdate(e) {
        received.sns.push(e.sn);
        received.order.push(`sn${e.sn}`);
        await onUpdate?.(e);
      },
      onEphemeral(e: NonSnUpdate) {
        const id = e.update.case === "cardAction" ? e.update.value.actionId : "?";
        received.ephemeral.push(id);
        received.order.push(id);
      },
      onResync(latestSn) {
        received.resyncs.push(latestSn);
      },
      onError(err) {
        received.errors.push(err);
      },
    },
    onCatchUpFailed: (err) => received.catchUpFailures.push(err),
  });
  return { sequencer, received };
}

describe("sdk: update sequencing", () => {
  it("classifies an arriving sn against the last delivered one", () => {
    expect(snVerdict(5, 6)).to.equal("next");
    expect(snVerdict(5, 5)).to.equal("duplicate");
    expect(snVerdict(5, 2)).to.equal("duplicate");
    expect(snVerdict(5, 7)).to.equal("gap");
  });

  it("catches up from the last sn on connecting, in pages, then takes live entries in order", async () => {
    const stream = new ScriptedStream();
    stream.latest = 8;
    const { sequencer, received } = sequencerOf(stream, 1);
    const epoch = sequencer.connected();
    stream.latest = 9;
    sequencer.pushed(epoch, live(9));
    await sequencer.idle();
    expect(received.sns).to.deep.equal([2, 3, 4, 5, 6, 7, 8, 9]);
    expect(stream.reads).to.deep.equal([1, 4, 7]);
    expect(sequencer.lastSn).to.equal(9);
  });

  it("drops a push the catch-up already delivered, and one that arrives twice", async () => {
    const stream = new ScriptedStream();
    stream.latest = 3;
    let open!: () => void;
    stream.gate = new Promise((resolve) => (open = resolve));
    const { sequencer, received } = sequencerOf(stream, 0);
    const epoch = sequencer.connected();
    // Pushed while the first read is still on its way: the read's answer includes them.
    stream.latest = 5;
    sequencer.pushed(epoch, live(2));
    sequencer.pushed(epoch, live(3));
    sequencer.pushed(epoch, live(4));
    sequencer.pushed(epoch, live(4));
    sequencer.pushed(epoch, live(5));
    open();
    await sequencer.idle();
    expect(received.sns).to.deep.equal([1, 2, 3, 4, 5]);
  });

  it("reads the missed entries when a push skips ahead, and does not deliver the push twice", async () => {
    const stream = new ScriptedStream();
    stream.latest = 2;
    const { sequencer, received } = sequencerOf(stream, 2);
    const epoch = sequencer.connected();
    await sequencer.idle();
    stream.latest = 6;
    sequencer.pushed(epoch, live(6));
    sequencer.pushed(epoch, live(5));
    await sequencer.idle();
    expect(received.sns).to.deep.equal([3, 4, 5, 6]);
    expect(stream.reads).to.deep.equal([2, 2, 5]);
  });

  it("loses nothing when a connection drops with entries queued: the next connection reads them", async () => {
    const stream = new ScriptedStream();
    stream.latest = 4;
    let release!: () => void;
    const blocked = new Promise<void>((resolve) => (release = resolve));
    // The application is busy with entry 5 when the connection dies with 6 and 7 still queued.
    const { sequencer, received } = sequencerOf(stream, 4, (e) => (e.sn === 5 ? blocked : undefined));
    const epoch = sequencer.connected();
    await sequencer.idle();
    stream.latest = 7;
    sequencer.pushed(epoch, live(5));
    sequencer.pushed(epoch, live(6));
    sequencer.pushed(epoch, live(7));
    sequencer.disconnected();
    stream.latest = 9;
    sequencer.connected();
    release();
    await sequencer.idle();
    expect(received.sns).to.deep.equal([5, 6, 7, 8, 9]);
    expect(stream.reads).to.deep.equal([4, 5, 8]);
  });

  it("ignores pushes tagged with an ended connection", async () => {
    const stream = new ScriptedStream();
    stream.latest = 0;
    const { sequencer, received } = sequencerOf(stream, 0);
    const old = sequencer.connected();
    await sequencer.idle();
    sequencer.disconnected();
    sequencer.pushed(old, live(1));
    await sequencer.idle();
    expect(received.sns).to.deep.equal([]);
  });

  it("keeps ephemeral entries in arrival order among the sequenced ones", async () => {
    const stream = new ScriptedStream();
    stream.latest = 1;
    const { sequencer, received } = sequencerOf(stream, 1);
    const epoch = sequencer.connected();
    await sequencer.idle();
    stream.latest = 3;
    sequencer.pushed(epoch, live(2));
    sequencer.pushed(epoch, ephemeral("delta-a"));
    sequencer.pushed(epoch, live(3));
    sequencer.pushed(epoch, ephemeral("delta-b"));
    await sequencer.idle();
    expect(received.order).to.deep.equal(["sn2", "delta-a", "sn3", "delta-b"]);
  });

  it("asks the application to reload when its sn is no longer retained, then continues from the latest", async () => {
    const stream = new ScriptedStream();
    stream.latest = 50;
    stream.retainedFrom = 40;
    const { sequencer, received } = sequencerOf(stream, 10);
    const epoch = sequencer.connected();
    await sequencer.idle();
    stream.latest = 51;
    sequencer.pushed(epoch, live(51));
    await sequencer.idle();
    expect(received.resyncs).to.deep.equal([50]);
    expect(received.sns).to.deep.equal([51]);
  });

  it("reports a handler that throws and goes on with the next entry", async () => {
    const stream = new ScriptedStream();
    stream.latest = 3;
    const { sequencer, received } = sequencerOf(stream, 0, (e) => {
      if (e.sn === 2) throw new Error("handler broke");
    });
    sequencer.connected();
    await sequencer.idle();
    expect(received.sns).to.deep.equal([1, 2, 3]);
    expect(received.errors.map((e) => (e as Error).message)).to.deep.equal(["handler broke"]);
  });

  it("gives up the connection when a catch-up read fails, dropping what it queued, and recovers on the next", async () => {
    const stream = new ScriptedStream();
    stream.latest = 2;
    stream.failNext = true;
    const { sequencer, received } = sequencerOf(stream, 0);
    const epoch = sequencer.connected();
    sequencer.pushed(epoch, live(3));
    await sequencer.idle();
    expect(received.catchUpFailures).to.have.length(1);
    expect(received.sns).to.deep.equal([]);
    stream.latest = 3;
    sequencer.connected();
    await sequencer.idle();
    expect(received.sns).to.deep.equal([1, 2, 3]);
  });

  it("without GetDifference (agents), drops repeats of a replay and accepts an sn that skips", async () => {
    const { sequencer, received } = sequencerOf(undefined, 3);
    const epoch = sequencer.connected();
    for (const sn of [2, 3, 4, 5, 4, 5, 9, 10]) sequencer.pushed(epoch, live(sn));
    await sequencer.idle();
    expect(received.sns).to.deep.equal([4, 5, 9, 10]);
  });
});
