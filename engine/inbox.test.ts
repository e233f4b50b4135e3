import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { fromBinary } from "@bufbuild/protobuf";
import { SnUpdateSchema } from "../shared/gen/shared/v1/updates_pb.js";
import { loadConfig } from "../shared/config.js";
import type { PushEvent } from "../shared/bus.js";
import { AdjustableClock } from "./clock.js";
import type { EngineDeps } from "./deps.js";
import { MemoryEphemeralState } from "./ephemeral/memory-ephemeral-state.js";
import { FanOuts } from "./fan-out.js";
import { Inbox, encodeEntry } from "./inbox.js";
import { Ownership } from "./ownership.js";
import { openSqliteStore } from "./store/sqlite/sqlite-store.js";
import type { Store } from "./store/store.js";

describe("Inbox actor", () => {
  let dir: string;
  let store: Store;
  let deps: EngineDeps;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-inbox-"));
    store = await openSqliteStore(dir);
    const clock = new AdjustableClock();
    deps = {
      config: loadConfig({ DATA_DIR: dir }),
      clock,
      store,
      ephemeral: new MemoryEphemeralState(clock),
      codeSender: { supports: () => true, send: async () => {}, close: async () => {} },
      pushNotifier: { send: async () => {} },
      fanOuts: new FanOuts(store, clock),
      ownership: new Ownership(store.leases, clock, "inbox-test"),
    };
  });
  after(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const entry = (nickname: string) => encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: 1, newNickname: nickname } });

  it("assigns dense sn values and publishes each entry once, in order", async () => {
    const published: PushEvent[] = [];
    const inbox = new Inbox(deps, (event) => published.push(event));
    const sns = await Promise.all(Array.from({ length: 25 }, (_, i) => inbox.append({ userId: 501, entries: [entry(`n${i}`)] })));
    expect(sns.flat().sort((a, b) => a - b)).to.deep.equal(Array.from({ length: 25 }, (_, i) => i + 1));
    expect(published.map((p) => (p.update.snUpdate as { sn: number }).sn)).to.deep.equal(Array.from({ length: 25 }, (_, i) => i + 1));
  });

  it("never forks a stream when two owners write it (a reshard): the stale one reloads and retries", async () => {
    const first = new Inbox(deps, () => {});
    const second = new Inbox(deps, () => {});
    await first.append({ userId: 502, entries: [entry("a")] });
    await second.append({ userId: 502, entries: [entry("b")] });
    // `first` still believes the latest sn is 1; the store refuses sn 2 and it must move on to 3.
    const [sn] = await first.append({ userId: 502, entries: [entry("c")] });
    expect(sn).to.equal(3);
    const rows = await store.updates.readUpdates(502, 0, 10);
    expect(rows.map((r) => r.sn)).to.deep.equal([1, 2, 3]);
    // The stored payload is a complete SnUpdate: the sn prefix plus the entry encoded once.
    const decoded = rows.map((r) => fromBinary(SnUpdateSchema, r.payload));
    expect(decoded.map((u) => u.sn)).to.deep.equal([1, 2, 3]);
    expect(decoded.map((u) => u.update.case === "userProfileUpdated" && u.update.value.newNickname)).to.deep.equal(["a", "b", "c"]);
  });

  it("encodes sn values beyond one varint byte correctly", async () => {
    const inbox = new Inbox(deps, () => {});
    const batch = Array.from({ length: 300 }, (_, i) => entry(`n${i}`));
    await inbox.append({ userId: 504, entries: batch });
    const [row] = await store.updates.readUpdates(504, 299, 1);
    expect(fromBinary(SnUpdateSchema, row.payload).sn).to.equal(300);
  });

  it("appends a batch atomically with consecutive sn values", async () => {
    const inbox = new Inbox(deps, () => {});
    expect(await inbox.append({ userId: 503, entries: [entry("x"), entry("y"), entry("z")] })).to.deep.equal([1, 2, 3]);
  });
});
