import type { Clock } from "../../shared/clock.js";
import type { FanOutAppend } from "../../engine/delivery/fan-out-contracts.js";
import type { AppendedFanOut } from "../../engine/delivery/fan-out-contracts.js";
import type { Inbox } from "../../engine/sync/inbox.js";
import { Ownership } from "../../engine/ownership.js";
import type { Store } from "../../ports/store/store.js";
import { encodeEntry, snUpdateOf } from "../../engine/delivery/stream-entry.js";
import { nextTestFanOutId } from "./fan-outs.js";

/** A user's stream as (sn, nickname) pairs: the entries these races append are profile changes. */
export async function nicknamesIn(store: Store, userId: number): Promise<[number, string][]> {
  return (await store.updates.readUpdates(userId, 0, 1000))
    .map(snUpdateOf)
    .map((update) => [update.sn, update.update.case === "userProfileUpdated" ? (update.update.value.newNickname ?? "") : ""]);
}

const profileFanOut = (recipients: number[], nickname: string, again: boolean): FanOutAppend => ({
  fanOutId: String(nextTestFanOutId()),
  entry: encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId: 1, newNickname: nickname } }),
  recipients,
  again,
});

/**
 * Two engines finish one recorded fan-out across a lease move, as the kill -9 probe of issue 22
 * caught it: the new owner reads who holds it (nobody yet); the old owner, not yet told its lease
 * is going, appends it; the streams are placed on the new owner, which takes the lease with the
 * next epoch, reads the streams' latest sn (the old owner's entry included) and writes. Then the
 * recording engine's first delivery arrives late at the new owner. Each engine has its own store
 * handle. Answers what the new owner appended each time; the streams first took "before".
 */
export async function finishAcrossLeaseMove(options: {
  stores: { old: Store; new: Store };
  clock: Clock;
  inboxOf: (store: Store, ownership: Ownership) => Inbox;
  recipients: number[];
}): Promise<{ recovered: AppendedFanOut["sns"]; late: AppendedFanOut["sns"] }> {
  const { stores, clock, inboxOf, recipients } = options;
  const oldOwner = new Ownership(stores.old.leases, clock, "race-old-owner");
  const newOwner = new Ownership(stores.new.leases, clock, "race-new-owner");
  try {
    const a = inboxOf(stores.old, oldOwner);
    await a.appendFanOuts([profileFanOut(recipients, "before", false)]);
    const recorded = profileFanOut(recipients, "recovered", true);
    let raced = false;
    const racing: Store = {
      ...stores.new,
      updates: {
        ...stores.new.updates,
        holders: async (eventId, userIds) => {
          const held = await stores.new.updates.holders(eventId, userIds);
          if (!raced) {
            raced = true;
            await a.appendFanOuts([recorded]);
            await oldOwner.place({ isMine: () => false, isGone: () => false });
          }
          return held;
        },
      },
    };
    const b = inboxOf(racing, newOwner);
    const [recovered] = await b.appendFanOuts([recorded]);
    const [late] = await b.appendFanOuts([{ ...recorded, again: false }]);
    return { recovered: recovered.sns, late: late.sns };
  } finally {
    await Promise.all([oldOwner.stop(), newOwner.stop()]);
  }
}
