// The promises of the storage port, as one mocha suite every adapter must pass: one part per
// aggregate, each in its own file beside this one, run in this order on a fresh store per test.
import { expect } from "chai";
import { describeAgents } from "./agents.js";
import { describeContacts } from "./contacts.js";
import { describeConversations } from "./conversations.js";
import { describeGroups } from "./groups.js";
import { describeLeases } from "./leases.js";
import { describeMedia } from "./media.js";
import { describeMessages } from "./messages.js";
import { describeOutbox } from "./outbox.js";
import { describePushTokens } from "./push-tokens.js";
import { describeSessions } from "./sessions.js";
import { storeSuite, type StoreUnderTest } from "./suite.js";
import { describeUpdates } from "./updates.js";
import { describeUsers } from "./users.js";
import { describeWebhookJobs } from "./webhook-jobs.js";

export type { StoreUnderTest } from "./suite.js";

export function describeStoreConformance(name: string, open: () => Promise<StoreUnderTest>): void {
  describe(`store conformance: ${name}`, () => {
    const t = storeSuite();
    beforeEach(async () => {
      t.subject = await open();
      t.store = t.subject.store;
    });
    afterEach(async () => t.subject.cleanup());

    describeUsers(t);
    describeSessions(t);
    describePushTokens(t);
    describeGroups(t);
    describeContacts(t);
    describeConversations(t);
    describeUpdates(t);
    describeOutbox(t);
    describeAgents(t);
    describeMedia(t);
    describeWebhookJobs(t);
    describeMessages(t);
    describeLeases(t);

    it("keeps everything across close and reopen", async function () {
      const { subject } = t;
      if (!subject.reopen) this.skip();
      const a = await t.newUser("a@x.io");
      await t.store.sessions.upsertSession(t.session(a.userId, "d1"));
      await t.store.updates.append({ events: [{ eventId: 1n, entry: new Uint8Array([9]) }], entries: [{ userId: a.userId, sn: 1, eventId: 1n }], createdAt: 5 });
      const store = (t.store = await subject.reopen!());
      expect((await store.users.findByEmail("a@x.io"))?.userId).to.equal(a.userId);
      expect((await store.sessions.findByAccessHash(`access-${a.userId}-d1`))?.deviceId).to.equal("d1");
      expect(await store.updates.latestSn(a.userId)).to.equal(1);
      expect(await store.updates.readUpdates(a.userId, 0, 10)).to.deep.equal([{ sn: 1, entry: new Uint8Array([9]) }]);
      expect((await t.newUser("b@x.io")).userId).to.equal(a.userId + 1);
    });
  });
}
