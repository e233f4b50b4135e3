import { expect } from "chai";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { InboxPolicy } from "../engine/sync/inbox.js";
import { encodeEntry } from "../engine/delivery/stream-entry.js";
import { appendThroughInbox, nextTestFanOutId } from "./support/fan-outs.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";

for (const mode of wireModes) {
  describe(`SyncService (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const sync = (user: SignedIn) => client(server, SyncService, mode, user.accessToken);

    /** Appends n profile events straight through the inbox actor (the same path every event takes). */
    async function appendEvents(userId: number, n: number): Promise<void> {
      for (let done = 0; done < n; done += 500) {
        const count = Math.min(500, n - done);
        const fanOuts = Array.from({ length: count }, (_, i) => ({
          fanOutId: String(nextTestFanOutId()),
          entry: encodeEntry({ case: "userProfileUpdated", value: { $typeName: "shared.v1.UserProfileUpdatedEvent", userId, newNickname: `n${done + i}` } }),
          recipients: [userId],
        }));
        await appendThroughInbox(server.broker, fanOuts);
      }
    }

    it("GetCurrentState answers 0 for a new user and the latest sn afterwards", async () => {
      const user = await signInWithCode(server, mode);
      expect((await sync(user).getCurrentState({})).state?.latestSn).to.equal(0);
      await client(server, UserService, mode, user.accessToken).updateProfile({ nickname: "x" });
      expect((await sync(user).getCurrentState({})).state?.latestSn).to.equal(1);
    });

    it("GetDifference pages through every entry in order, dense, with hasMore", async () => {
      const user = await signInWithCode(server, mode);
      const total = InboxPolicy.differencePageSize * 2 + 17;
      await appendEvents(user.userId, total);
      const seen: number[] = [];
      let sn = 0;
      for (;;) {
        const page = await sync(user).getDifference({ sn });
        expect(page.updateTooLong).to.equal(false);
        seen.push(...page.updates.map((u) => u.sn));
        expect(page.sn).to.equal(seen[seen.length - 1]);
        sn = page.sn;
        if (!page.hasMore) break;
        expect(page.updates).to.have.length(InboxPolicy.differencePageSize);
      }
      expect(seen).to.deep.equal(Array.from({ length: total }, (_, i) => i + 1));
      const last = await sync(user).getDifference({ sn: 42 });
      const first = last.updates[0];
      expect(first.sn).to.equal(43);
      expect(first.update.case === "userProfileUpdated" && first.update.value.newNickname).to.equal("n42");
    });

    it("GetDifference at the latest sn answers nothing more", async () => {
      const user = await signInWithCode(server, mode);
      await appendEvents(user.userId, 3);
      const page = await sync(user).getDifference({ sn: 3 });
      expect(page).to.deep.include({ sn: 3, hasMore: false, updateTooLong: false });
      expect(page.updates).to.deep.equal([]);
    });

    it("GetDifference answers updateTooLong with the latest sn when the client is ahead of the stream", async () => {
      const user = await signInWithCode(server, mode);
      await appendEvents(user.userId, 2);
      const page = await sync(user).getDifference({ sn: 50 });
      expect(page).to.deep.include({ sn: 2, updateTooLong: true, hasMore: false });
    });

    it("GetDifference answers updateTooLong once the gap is older than what is retained", async function () {
      this.timeout(60_000);
      const user = await signInWithCode(server, mode);
      await appendEvents(user.userId, InboxPolicy.retainedUpdates + InboxPolicy.pruneEvery);
      const latest = InboxPolicy.retainedUpdates + InboxPolicy.pruneEvery;
      const stale = await sync(user).getDifference({ sn: 10 });
      expect(stale).to.deep.include({ sn: latest, updateTooLong: true });
      expect(stale.updates).to.deep.equal([]);
      const recent = await sync(user).getDifference({ sn: latest - 5 });
      expect(recent.updates.map((u) => u.sn)).to.deep.equal([1, 2, 3, 4, 5].map((i) => latest - 5 + i));
    });

    it("GetDifference answers INVALID_ARGUMENT for a negative sn", async () => {
      const user = await signInWithCode(server, mode);
      await expectError(sync(user).getDifference({ sn: -1 }), Errors.invalidSn);
    });

    it("both answer UNAUTHENTICATED without a valid token", async () => {
      await expectError(client(server, SyncService, mode).getCurrentState({}), Errors.unauthenticated);
      await expectError(client(server, SyncService, mode, "nxs_x").getDifference({ sn: 0 }), Errors.unauthenticated);
    });

    it("keeps sn dense under concurrent appends for one user", async () => {
      const user = await signInWithCode(server, mode);
      const users = client(server, UserService, mode, user.accessToken);
      await Promise.all(Array.from({ length: 40 }, (_, i) => users.updateProfile({ nickname: `c${i}` })));
      const page = await sync(user).getDifference({ sn: 0 });
      expect(page.updates.map((u) => u.sn)).to.deep.equal(Array.from({ length: 40 }, (_, i) => i + 1));
    });
  });
}
