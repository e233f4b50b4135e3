// The promises of the storage port, as one mocha suite every adapter must pass.
import { expect } from "chai";
import {
  AccountType,
  AgentChangeRefused,
  AgentStatus,
  AgentVisibility,
  DeliveryMode,
  maxQueuedWebhooksPerAgent,
  OwnershipLostError,
  type FanOutRecord,
  type Fence,
  type FenceHolder,
  type MediaFileRecord,
  type SessionRecord,
  type Store,
  type UploadSessionRecord,
  type WebhookHandoff,
} from "./store.js";
import { shardOf, userStreamKey } from "../../shared/shards.js";

export interface StoreUnderTest {
  store: Store;
  /** Closes the store and opens it again on the same data; adapters without durable data leave it out. */
  reopen?: () => Promise<Store>;
  /** A second handle on the same data, as another node would hold it (closed by cleanup); the suite uses the first handle twice without it. */
  another?: () => Promise<Store>;
  cleanup(): Promise<void>;
}

export function describeStoreConformance(name: string, open: () => Promise<StoreUnderTest>): void {
  describe(`store conformance: ${name}`, () => {
    let subject: StoreUnderTest;
    let store: Store;
    beforeEach(async () => {
      subject = await open();
      store = subject.store;
    });
    afterEach(async () => subject.cleanup());

    const expectRejected = async (write: Promise<unknown>) => {
      const outcome = await write.then(
        () => "accepted",
        () => "rejected",
      );
      expect(outcome).to.equal("rejected");
    };

    const newUser = (email: string | null, phone: string | null = null) =>
      store.users.createUser({ accountType: AccountType.user, email, phone, nickname: "n", createdAt: 1000 });

    const session = (userId: number, deviceId: string, overrides: Partial<SessionRecord> = {}): SessionRecord => ({
      userId,
      deviceId,
      deviceType: 5,
      deviceName: "name",
      deviceModel: "model",
      osVersion: "os",
      appVersion: "app",
      loginIp: "127.0.0.1",
      loginAt: 1000,
      lastActiveAt: 1000,
      accessTokenHash: `access-${userId}-${deviceId}`,
      accessExpiresAt: 5000,
      refreshTokenHash: `refresh-${userId}-${deviceId}`,
      refreshExpiresAt: 9000,
      ...overrides,
    });

    describe("users", () => {
      it("assigns ids from 10001 upward with the default username u_<id>", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser("b@x.io");
        expect(a.userId).to.equal(10001);
        expect(b.userId).to.equal(10002);
        expect(a).to.deep.include({ username: "u_10001", usernameCustom: false, email: "a@x.io", phone: null, passwordHash: null, createdAt: 1000 });
      });

      it("finds users by id, email, phone and username, and several by ids", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser(null, "+15550001");
        expect((await store.users.getUser(a.userId))?.email).to.equal("a@x.io");
        expect((await store.users.findByEmail("a@x.io"))?.userId).to.equal(a.userId);
        expect((await store.users.findByPhone("+15550001"))?.userId).to.equal(b.userId);
        expect((await store.users.findByUsername(`u_${b.userId}`))?.userId).to.equal(b.userId);
        expect(await store.users.getUser(1)).to.equal(undefined);
        expect((await store.users.getUsers([a.userId, b.userId, 42])).map((u) => u.userId).sort()).to.deep.equal([a.userId, b.userId]);
        expect(await store.users.getUsers([])).to.deep.equal([]);
      });

      it("refuses a second account with the same email or phone", async () => {
        await newUser("a@x.io", "+15550002");
        let failures = 0;
        await newUser("a@x.io").catch(() => failures++);
        await newUser("c@x.io", "+15550002").catch(() => failures++);
        expect(failures).to.equal(2);
      });

      it("sets a custom username once: ok, then already-set; taken when another account holds it", async () => {
        const a = await newUser("a@x.io");
        const b = await newUser("b@x.io");
        expect(await store.users.setCustomUsername(a.userId, "alpha_one")).to.equal("ok");
        expect(await store.users.setCustomUsername(a.userId, "alpha_two")).to.equal("already-set");
        expect(await store.users.setCustomUsername(b.userId, "alpha_one")).to.equal("taken");
        const c = await newUser("c@x.io");
        expect(await store.users.setCustomUsername(b.userId, `u_${c.userId}`)).to.equal("taken");
        expect((await store.users.getUser(a.userId))?.username).to.equal("alpha_one");
        expect((await store.users.getUser(b.userId))?.usernameCustom).to.equal(false);
      });

      it("updates only the given profile fields and the password hash", async () => {
        const a = await newUser("a@x.io");
        await store.users.updateProfile(a.userId, { nickname: "Ada" });
        const after = await store.users.updateProfile(a.userId, { signature: "hi", avatarUrl: "" });
        expect(after).to.deep.include({ nickname: "Ada", signature: "hi", avatarUrl: "" });
        expect(await store.users.setPasswordHash(a.userId, "hash")).to.equal(true);
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("hash");
      });

      it("sets a password hash on condition: none set, or the expected one; of two writers expecting the same hash one applies", async () => {
        const a = await newUser("a@x.io");
        expect(await store.users.setPasswordHash(a.userId, "h1", { ifPasswordHash: "h0" })).to.equal(false);
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(null);
        const firsts = await Promise.all(["h1a", "h1b"].map((hash) => store.users.setPasswordHash(a.userId, hash, { ifPasswordHash: null })));
        expect(firsts.filter(Boolean)).to.have.length(1);
        const first = firsts[0] ? "h1a" : "h1b";
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(first);
        expect(await store.users.setPasswordHash(a.userId, "h1c", { ifPasswordHash: null })).to.equal(false);
        const changes = await Promise.all(["h2a", "h2b"].map((hash) => store.users.setPasswordHash(a.userId, hash, { ifPasswordHash: first })));
        expect(changes.filter(Boolean)).to.have.length(1);
        const second = changes[0] ? "h2a" : "h2b";
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal(second);
        // Unconditional (a reset) replaces whatever is stored.
        expect(await store.users.setPasswordHash(a.userId, "h3")).to.equal(true);
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("h3");
        expect(await store.users.setPasswordHash(a.userId, "h4", { ifPasswordHash: second })).to.equal(false);
        expect((await store.users.getUser(a.userId))?.passwordHash).to.equal("h3");
        expect(await store.users.setPasswordHash(999_999_999, "h", { ifPasswordHash: null })).to.equal(false);
        expect(await store.users.setPasswordHash(999_999_999, "h")).to.equal(false);
        expect(await store.users.getUser(999_999_999)).to.equal(undefined);
      });
    });

    describe("sessions", () => {
      it("upserts by (user, device) and finds by token hashes", async () => {
        const a = await newUser("a@x.io");
        await store.sessions.upsertSession(session(a.userId, "d1"));
        await store.sessions.upsertSession(session(a.userId, "d1", { accessTokenHash: "new-access", refreshTokenHash: "new-refresh" }));
        expect(await store.sessions.findByAccessHash(`access-${a.userId}-d1`)).to.equal(undefined);
        expect((await store.sessions.findByAccessHash("new-access"))?.deviceId).to.equal("d1");
        expect((await store.sessions.findByRefreshHash("new-refresh"))?.userId).to.equal(a.userId);
        expect(await store.sessions.listSessions(a.userId)).to.have.length(1);
      });

      it("rotates tokens only while the expected refresh hash is current", async () => {
        const a = await newUser("a@x.io");
        await store.sessions.upsertSession(session(a.userId, "d1"));
        const next = { accessTokenHash: "a2", accessExpiresAt: 1, refreshTokenHash: "r2", refreshExpiresAt: 2, lastActiveAt: 3 };
        expect(await store.sessions.rotateTokens(a.userId, "d1", `refresh-${a.userId}-d1`, next)).to.equal(true);
        expect(await store.sessions.rotateTokens(a.userId, "d1", `refresh-${a.userId}-d1`, { ...next, refreshTokenHash: "r3" })).to.equal(false);
        expect(await store.sessions.rotateTokens(a.userId, "other", "r2", { ...next, refreshTokenHash: "r4" })).to.equal(false);
        expect(await store.sessions.findByRefreshHash(`refresh-${a.userId}-d1`)).to.equal(undefined);
        expect((await store.sessions.findByRefreshHash("r2"))?.lastActiveAt).to.equal(3);
      });

      it("lists most recently active first, touches, and deletes one or all but one with their push tokens", async () => {
        const a = await newUser("a@x.io");
        for (const [device, active] of [["d1", 10], ["d2", 30], ["d3", 20]] as const) {
          await store.sessions.upsertSession(session(a.userId, device, { lastActiveAt: active }));
          await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: device, token: `t-${device}`, platform: 1, isSandbox: false, updatedAt: 1 });
        }
        expect((await store.sessions.listSessions(a.userId)).map((s) => s.deviceId)).to.deep.equal(["d2", "d3", "d1"]);
        await store.sessions.touchSession(a.userId, "d1", 99);
        expect((await store.sessions.listSessions(a.userId))[0].deviceId).to.equal("d1");
        expect(await store.sessions.deleteSession(a.userId, "d3")).to.equal(true);
        expect(await store.sessions.deleteSession(a.userId, "d3")).to.equal(false);
        expect((await store.pushTokens.listPushTokens(a.userId)).map((t) => t.deviceId).sort()).to.deep.equal(["d1", "d2"]);
        expect((await store.sessions.deleteSessionsExcept(a.userId, "d1")).sort()).to.deep.equal(["d2"]);
        expect((await store.pushTokens.listPushTokens(a.userId)).map((t) => t.deviceId)).to.deep.equal(["d1"]);
        expect(await store.sessions.deleteSessionsExcept(a.userId, null)).to.deep.equal(["d1"]);
        expect(await store.pushTokens.listPushTokens(a.userId)).to.deep.equal([]);
      });
    });

    describe("push tokens", () => {
      it("replaces a device's token and deletes it once", async () => {
        const a = await newUser("a@x.io");
        await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "one", platform: 1, isSandbox: true, updatedAt: 1 });
        await store.pushTokens.upsertPushToken({ userId: a.userId, deviceId: "d", token: "two", platform: 2, isSandbox: false, updatedAt: 2 });
        expect(await store.pushTokens.listPushTokens(a.userId)).to.deep.equal([
          { userId: a.userId, deviceId: "d", token: "two", platform: 2, isSandbox: false, updatedAt: 2 },
        ]);
        expect(await store.pushTokens.deletePushToken(a.userId, "d")).to.equal(true);
        expect(await store.pushTokens.deletePushToken(a.userId, "d")).to.equal(false);
      });

      it("reads the tokens of several users at once", async () => {
        const [a, b, c] = [await newUser("a@x.io"), await newUser("b@x.io"), await newUser("c@x.io")];
        for (const [user, device] of [[a, "a1"], [a, "a2"], [b, "b1"], [c, "c1"]] as const) {
          await store.pushTokens.upsertPushToken({ userId: user.userId, deviceId: device, token: `t-${device}`, platform: 1, isSandbox: false, updatedAt: 1 });
        }
        expect((await store.pushTokens.listPushTokensOf([a.userId, b.userId, 99])).map((t) => t.deviceId).sort()).to.deep.equal(["a1", "a2", "b1"]);
        expect(await store.pushTokens.listPushTokensOf([])).to.deep.equal([]);
      });
    });

    describe("group writes", () => {
      const member = (userId: number) => ({ userId, role: 2, joinedAt: 5 });

      it("creates the group with its GROUP conversation and each member's state in it; added members get theirs", async () => {
        const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }, member(8)]);
        const conversationId = BigInt(group.groupId);
        expect(await store.conversations.getConversation(conversationId)).to.deep.include({ type: 2, lastMessageId: 0n, lastMessageTime: 5 });
        await store.conversations.setMuted(9, conversationId, true);
        expect(await store.groups.addMembers(group.groupId, [member(8), member(9)])).to.deep.equal([9]);
        const listed = async (userId: number) => (await store.conversations.listForUser(userId, Number.MAX_SAFE_INTEGER, 10)).map((row) => row.conversation.conversationId);
        for (const userId of [7, 8, 9]) expect(await listed(userId)).to.deep.equal([conversationId]);
        expect((await store.conversations.getUserState(9, conversationId)).isMuted).to.equal(true);
      });

      it("records a group change's system message with it; the message's write deletes the record", async () => {
        const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }]);
        const conversationId = BigInt(group.groupId);
        const systemMessage = { systemMessageId: 2n ** 61n + 3n, conversationId, body: new Uint8Array([8, 7]), extraRecipients: [9], createdAt: 6 };
        await store.groups.updateGroup(group.groupId, { name: "renamed" }, (updated) => (updated.name === "renamed" ? [systemMessage] : []));
        expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([systemMessage]);
        expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(true);
        const message = { conversationId, messageId: 1n, senderId: 0, clientMessageId: 0n, body: new Uint8Array([8, 7]), replyTo: null, metadata: {}, createdAt: 7, updatedAt: null, edited: false };
        // A refused insert leaves it recorded.
        await store.messages.insertMessage(message);
        expect((await store.messages.insertMessage(message, { postsSystemMessage: systemMessage.systemMessageId })).outcome).to.equal("conflict");
        expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(true);
        expect((await store.messages.insertMessage({ ...message, messageId: 2n }, { postsSystemMessage: systemMessage.systemMessageId })).outcome).to.equal("ok");
        expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
        expect(await store.outbox.isSystemMessagePending(systemMessage.conversationId, systemMessage.systemMessageId)).to.equal(false);
      });

      describe("under the owner's fence", () => {
        const ttl = 30_000;
        const oldOwner = { node: "node-a", instance: "a-1" };
        const newOwner = { node: "node-b", instance: "b-1" };
        // Any shard will do: the store checks the fence it is given against that shard's lease.
        const shard = 12;
        const fenceOf = (lease: { shard: number; epoch: number }): Fence => ({ shard: lease.shard, epoch: lease.epoch });
        const refused = async (write: Promise<unknown>, fence: Fence) => {
          let caught: unknown;
          await write.catch((err: unknown) => (caught = err));
          expect(caught).to.be.instanceOf(OwnershipLostError);
          expect((caught as OwnershipLostError).fence).to.deep.equal(fence);
        };
        const systemMessage = (conversationId: bigint, n: bigint) => ({ systemMessageId: 2n ** 61n + n, conversationId, body: new Uint8Array([8, Number(n)]), extraRecipients: [], createdAt: 6 });
        const fanOut = (n: bigint): FanOutRecord => ({ fanOutId: 900n + n, scope: "user:7", recipients: [8], entry: new Uint8Array([Number(n)]), related: "{}", createdAt: 6 });
        /** A group of 7 (owner), 8 and 9, then 10 added by the old owner while it held the lease; the lease then taken by another node. */
        const takenOver = async () => {
          const old = fenceOf(await store.leases.acquire(shard, oldOwner, 1000, ttl));
          const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 7, createdAt: 5 }, [{ userId: 7, role: 1, joinedAt: 5 }, member(8), member(9)]);
          expect(await store.groups.addMembers(group.groupId, [member(10)], undefined, { fence: old })).to.deep.equal([10]);
          const current = fenceOf(await store.leases.acquire(shard, newOwner, 1000 + ttl, ttl));
          expect(current.epoch).to.equal(old.epoch + 1);
          return { groupId: group.groupId, conversationId: BigInt(group.groupId), old, current };
        };
        const memberIds = async (groupId: number) => (await store.groups.listMembers(groupId)).map((m) => m.userId);

        it("refuses a stale fence for every group change, leaving no trace: no row, no reverse index, no event", async () => {
          const { groupId, conversationId, old } = await takenOver();
          const stale = { fence: old };
          await refused(store.groups.updateGroup(groupId, { name: "stale", description: "stale" }, () => [systemMessage(conversationId, 1n)], stale), old);
          await refused(store.groups.addMembers(groupId, [member(11)], () => [systemMessage(conversationId, 2n), fanOut(2n)], stale), old);
          await refused(store.groups.removeMember(groupId, 8, () => [fanOut(3n), systemMessage(conversationId, 3n)], stale), old);
          await refused(store.groups.dissolveGroup(groupId, () => [fanOut(4n)], stale), old);
          // A fence for a shard nobody leased is refused too.
          await refused(store.groups.removeMember(groupId, 9, undefined, { fence: { shard: shard + 1, epoch: 1 } }), { shard: shard + 1, epoch: 1 });
          expect(await store.groups.getGroup(groupId)).to.deep.include({ name: "g", description: "", status: 1 });
          expect(await memberIds(groupId)).to.deep.equal([7, 8, 9, 10]);
          expect(await store.groups.getMember(groupId, 11)).to.equal(undefined);
          expect(await store.groups.groupIdsOf(11)).to.deep.equal([]);
          expect(await store.groups.groupIdsOf(8)).to.deep.equal([groupId]);
          expect((await store.groups.listGroupsOf(9, 0, 10)).map((g) => g.groupId)).to.deep.equal([groupId]);
          expect((await store.conversations.listForUser(11, Number.MAX_SAFE_INTEGER, 10)).map((row) => row.conversation.conversationId)).to.deep.equal([]);
          expect(await store.outbox.pending(10)).to.deep.equal([]);
          expect(await store.outbox.pending(10, "user:7")).to.deep.equal([]);
          expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
        });

        it("writes every group change under the current fence, with its events; messages of the conversation still write after them", async () => {
          const { groupId, conversationId, current } = await takenOver();
          const write = { fence: current };
          expect(await store.groups.updateGroup(groupId, { name: "renamed" }, () => [systemMessage(conversationId, 1n)], write)).to.deep.include({ name: "renamed" });
          expect(await store.groups.addMembers(groupId, [member(11), member(8)], (added) => (added.length > 0 ? [fanOut(2n)] : []), write)).to.deep.equal([11]);
          expect(await store.groups.removeMember(groupId, 8, () => [fanOut(3n)], write)).to.equal(true);
          expect(await store.groups.removeMember(groupId, 8, (done) => (done ? [fanOut(9n)] : []), write)).to.equal(false);
          expect(await memberIds(groupId)).to.deep.equal([7, 9, 10, 11]);
          expect(await store.groups.groupIdsOf(11)).to.deep.equal([groupId]);
          expect(await store.groups.groupIdsOf(8)).to.deep.equal([]);
          expect((await store.outbox.pendingSystemMessages(10)).map((m) => m.systemMessageId)).to.deep.equal([2n ** 61n + 1n]);
          expect((await store.outbox.pending(10, "user:7")).map((f) => f.fanOutId)).to.deep.equal([902n, 903n]);
          // The owner posts the change's system message through the same conversation, under the same fence.
          const message = { conversationId, messageId: 1n, senderId: 0, clientMessageId: 0n, body: new Uint8Array([8, 1]), replyTo: null, metadata: {}, createdAt: 7, updatedAt: null, edited: false };
          expect((await store.messages.insertMessage(message, { fence: current, postsSystemMessage: 2n ** 61n + 1n })).outcome).to.equal("ok");
          expect(await store.outbox.pendingSystemMessages(10)).to.deep.equal([]);
          expect(await store.groups.dissolveGroup(groupId, () => [fanOut(4n)], write)).to.deep.equal([7, 9, 10, 11]);
          expect(await store.groups.getGroup(groupId)).to.deep.include({ status: 2 });
          expect(await memberIds(groupId)).to.deep.equal([]);
          expect(await store.groups.groupIdsOf(11)).to.deep.equal([]);
          expect(await store.messages.latestMessageId(conversationId)).to.equal(1n);
        });

        it("of two owners changing one group at once, only the current one writes", async () => {
          const other = subject.another ? await subject.another() : store;
          const { groupId, old, current } = await takenOver();
          const [stale, fresh] = await Promise.allSettled([
            store.groups.addMembers(groupId, [member(11)], () => [fanOut(1n)], { fence: old }),
            other.groups.addMembers(groupId, [member(12)], () => [fanOut(2n)], { fence: current }),
          ]);
          expect(stale.status === "rejected" && stale.reason).to.be.instanceOf(OwnershipLostError);
          expect(fresh).to.deep.equal({ status: "fulfilled", value: [12] });
          expect(await memberIds(groupId)).to.deep.equal([7, 8, 9, 10, 12]);
          expect((await store.outbox.pending(10, "user:7")).map((f) => f.fanOutId)).to.deep.equal([902n]);
        });
      });
    });

    describe("social writes that carry their consequences", () => {
      it("accepting a request connects both users and their PRIVATE conversation; rejecting connects nothing", async () => {
        const [a, b, c] = [await newUser("ra@x.io"), await newUser("rb@x.io"), await newUser("rc@x.io")];
        const accepted = await store.social.createFriendRequest(a.userId, b.userId, "", 1);
        expect(await store.social.resolveFriendRequest(accepted.requestId, 2, 2)).to.equal(true);
        expect((await store.social.getContact(a.userId, b.userId))?.createdAt).to.equal(2);
        expect((await store.social.getContact(b.userId, a.userId))?.createdAt).to.equal(2);
        const conversationId = (BigInt(b.userId) << 32n) | BigInt(a.userId);
        expect((await store.conversations.getConversation(conversationId))?.type).to.equal(1);
        const rejected = await store.social.createFriendRequest(c.userId, a.userId, "", 3);
        expect(await store.social.resolveFriendRequest(rejected.requestId, 3, 4)).to.equal(true);
        expect(await store.social.getContact(a.userId, c.userId)).to.equal(undefined);
        expect((await store.social.getFriendRequest(rejected.requestId))?.status).to.equal(3);
      });

      it("connects both sides once, keeping sides that exist", async () => {
        const conversationId = (9n << 32n) | 8n;
        await store.social.connect(8, 9, conversationId, 10);
        await store.social.removeContact(8, 9);
        await store.social.connect(8, 9, conversationId, 20);
        expect((await store.social.getContact(8, 9))?.createdAt).to.equal(20);
        expect((await store.social.getContact(9, 8))?.createdAt).to.equal(10);
        expect((await store.conversations.getConversation(conversationId))?.createdAt).to.equal(10);
      });

      it("a block removes the blocker's contact side and the pending requests between them, once", async () => {
        const conversationId = (9n << 32n) | 8n;
        await store.social.connect(8, 9, conversationId, 10);
        const pending = await store.social.createFriendRequest(9, 8, "", 11);
        expect(await store.social.block(8, 9, 12)).to.deep.equal({ blocked: true, contactRemoved: true });
        expect(await store.social.getContact(8, 9)).to.equal(undefined);
        expect((await store.social.getContact(9, 8))?.contactId).to.equal(8);
        expect(await store.social.getFriendRequest(pending.requestId)).to.equal(undefined);
        expect(await store.social.block(8, 9, 13)).to.deep.equal({ blocked: false, contactRemoved: false });
        expect(await store.social.block(9, 8, 14)).to.deep.equal({ blocked: true, contactRemoved: true });
      });

      it("request ids increase across handles (processes), also after a refused creation gave its id back", async () => {
        const other = subject.another ? await subject.another() : store;
        const [a, b] = [await newUser("ia@x.io"), await newUser("ib@x.io")];
        const ids: number[] = [];
        // Alternating handles, one request after the other: each id above every earlier one.
        for (let i = 0; i < 4; i++) ids.push((await (i % 2 === 0 ? store : other).social.createFriendRequest(a.userId, b.userId, "", i)).requestId);
        // A creation refused before anything is written (its events throw) may give its id back…
        await expectRejected(
          store.social.createFriendRequest(a.userId, b.userId, "", 10, () => {
            throw new Error("refused");
          }),
        );
        // …but once the other handle took a larger id, never after it.
        ids.push((await other.social.createFriendRequest(a.userId, b.userId, "", 11)).requestId);
        ids.push((await store.social.createFriendRequest(a.userId, b.userId, "", 12)).requestId);
        for (let i = 1; i < ids.length; i++) expect(ids[i], `ids ${ids.join(", ")}`).to.be.above(ids[i - 1]);
      });

      it("a request id past any the store assigns names no request", async () => {
        for (const requestId of [2 ** 31 + 7, Number.MAX_SAFE_INTEGER]) {
          expect(await store.social.getFriendRequest(requestId)).to.equal(undefined);
          expect(await store.social.resolveFriendRequest(requestId, 2, 1)).to.equal(false);
        }
      });

      it("clearing history and deleting with clearing move the read position to what was cleared, never back", async () => {
        const conversationId = (9n << 32n) | 8n;
        await store.conversations.clearHistory(8, conversationId, 4n);
        expect(await store.conversations.getUserState(8, conversationId)).to.deep.include({ clearedUpTo: 4n, lastReadMessageId: 4n });
        await store.conversations.advanceRead(8, conversationId, 7n);
        await store.conversations.markDeleted(8, conversationId, 6n);
        expect(await store.conversations.getUserState(8, conversationId)).to.deep.include({ clearedUpTo: 6n, lastReadMessageId: 7n, isDeleted: true });
      });
    });

    describe("conversation state", () => {
      it("answers which of the users muted a conversation, without creating state", async () => {
        const conversationId = (2n ** 40n) | 3n;
        await store.social.connect(1, 2, conversationId, 10);
        await store.conversations.setMuted(2, conversationId, true);
        expect(await store.conversations.mutedAmong(conversationId, [1, 2, 3])).to.deep.equal([2]);
        expect(await store.conversations.mutedAmong(conversationId + 1n, [2])).to.deep.equal([]);
        expect(await store.conversations.mutedAmong(conversationId, [])).to.deep.equal([]);
        await store.conversations.setMuted(2, conversationId, false);
        expect(await store.conversations.mutedAmong(conversationId, [1, 2])).to.deep.equal([]);
      });
    });

    describe("conversation list", () => {
      const minute = 60_000;
      const pairWith = (other: number) => (BigInt(other) << 32n) | 1n;
      const listed = async (userId: number, beforeTime = Number.MAX_SAFE_INTEGER, limit = 100) =>
        (await store.conversations.listForUser(userId, beforeTime, limit)).map((row) => [row.conversation.conversationId, row.conversation.lastMessageTime]);

      it("lists newest last message first, moves a conversation with its new last message, and pages by time", async () => {
        await store.social.connect(1, 2, pairWith(2), 3 * minute);
        const group = await store.groups.createGroup({ name: "g", avatarUrl: "", description: "", ownerId: 1, createdAt: 5 * minute + 1 }, [
          { userId: 1, role: 1, joinedAt: 1 },
          { userId: 3, role: 2, joinedAt: 1 },
        ]);
        const groupId = BigInt(group.groupId);
        await store.social.connect(1, 4, pairWith(4), 5 * minute + 2);
        expect(await listed(1)).to.deep.equal([
          [pairWith(4), 5 * minute + 2],
          [groupId, 5 * minute + 1],
          [pairWith(2), 3 * minute],
        ]);
        await store.conversations.recordMessage(pairWith(2), 1n, 9 * minute, [1, 2]);
        // An older message id records nothing.
        await store.conversations.recordMessage(pairWith(2), 1n, 10 * minute, [1, 2]);
        expect(await listed(1)).to.deep.equal([
          [pairWith(2), 9 * minute],
          [pairWith(4), 5 * minute + 2],
          [groupId, 5 * minute + 1],
        ]);
        expect(await listed(2)).to.deep.equal([[pairWith(2), 9 * minute]]);
        expect(await listed(1, 9 * minute, 2)).to.deep.equal([
          [pairWith(4), 5 * minute + 2],
          [groupId, 5 * minute + 1],
        ]);
        expect(await listed(1, 5 * minute + 2, 10)).to.deep.equal([[groupId, 5 * minute + 1]]);
        expect(await listed(1, 5 * minute + 1, 10)).to.deep.equal([]);
      });

      it("leaves out a deleted conversation until a new message lists it again", async () => {
        await store.social.connect(1, 2, pairWith(2), 1000);
        await store.social.connect(1, 3, pairWith(3), 2000);
        await store.conversations.markDeleted(1, pairWith(3), 0n);
        expect(await listed(1)).to.deep.equal([[pairWith(2), 1000]]);
        expect(await listed(3)).to.deep.equal([[pairWith(3), 2000]]);
        await store.conversations.recordMessage(pairWith(3), 1n, 2 * minute, [1, 3]);
        expect(await listed(1)).to.deep.equal([
          [pairWith(3), 2 * minute],
          [pairWith(2), 1000],
        ]);
        expect((await store.conversations.getUserState(1, pairWith(3))).isDeleted).to.equal(false);
      });

      it("orders many conversations of one minute by time then id, and pages through them whole", async () => {
        const expected: [bigint, number][] = [];
        for (let other = 2; other < 42; other++) {
          const at = 7 * minute + (other % 5);
          await store.social.connect(1, other, pairWith(other), at);
          expected.push([pairWith(other), at]);
        }
        await store.social.connect(1, 50, pairWith(50), 2 * minute);
        expected.push([pairWith(50), 2 * minute]);
        expected.sort((x, y) => y[1] - x[1] || (y[0] > x[0] ? 1 : -1));
        expect(await listed(1)).to.deep.equal(expected);
        const paged: (number | bigint)[][] = [];
        let before = Number.MAX_SAFE_INTEGER;
        for (;;) {
          const page = await listed(1, before, 3);
          if (page.length === 0) break;
          const lastTime = page[page.length - 1][1] as number;
          // Pages cut by time: everything at the page's last time is taken with it, however many.
          paged.push(...page.filter((row) => row[1] > lastTime), ...(await listed(1, lastTime + 1, 100)).filter((row) => row[1] === lastTime));
          before = lastTime;
        }
        expect(paged).to.deep.equal(expected);
      });
    });

    describe("update log", () => {
      const event = (eventId: bigint, byte = Number(eventId % 200n)) => ({ eventId, entry: new Uint8Array([byte, 1, 2]) });
      /** A write of the given events to the given (user, sn, event) positions. */
      const write = (events: { eventId: bigint; entry: Uint8Array }[], entries: [number, number, bigint][], handoffs?: Parameters<Store["updates"]["append"]>[0]["handoffs"]) =>
        store.updates.append({ events, entries: entries.map(([userId, sn, eventId]) => ({ userId, sn, eventId })), handoffs, createdAt: 10 });
      const stream = async (userId: number, afterSn = 0, limit = 100) => (await store.updates.readUpdates(userId, afterSn, limit)).map((row) => [row.sn, [...row.entry]]);

      it("answers 0 and nothing for a user without entries", async () => {
        expect(await store.updates.latestSn(7)).to.equal(0);
        expect(await store.updates.latestSns([7, 8])).to.deep.equal(new Map([[7, 0], [8, 0]]));
        expect(await store.updates.latestSns([])).to.deep.equal(new Map());
        expect(await store.updates.oldestRetainedSn(7)).to.equal(undefined);
        expect(await store.updates.readUpdates(7, 0, 10)).to.deep.equal([]);
      });

      it("stores an event once for many streams, reads each stream in order with a limit, and prunes", async () => {
        expect(await write([event(1n), event(2n)], [[7, 1, 1n], [8, 1, 1n], [7, 2, 2n], [9, 5, 2n]])).to.deep.equal({ ok: true });
        expect(await write([event(3n), event(4n)], [[7, 3, 3n], [7, 4, 4n]])).to.deep.equal({ ok: true });
        expect(await store.updates.latestSn(7)).to.equal(4);
        expect(await store.updates.latestSns([7, 8, 9, 10])).to.deep.equal(new Map([[7, 4], [8, 1], [9, 5], [10, 0]]));
        expect(await stream(7)).to.deep.equal([[1, [1, 1, 2]], [2, [2, 1, 2]], [3, [3, 1, 2]], [4, [4, 1, 2]]]);
        expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
        expect(await stream(7, 1, 2)).to.deep.equal([[2, [2, 1, 2]], [3, [3, 1, 2]]]);
        expect(await store.updates.readUpdates(7, 4, 10)).to.deep.equal([]);
        await store.updates.pruneUpdates(7, 2);
        expect(await store.updates.oldestRetainedSn(7)).to.equal(3);
        // The other streams still read the events user 7 no longer holds.
        expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
        expect(await stream(9)).to.deep.equal([[5, [2, 1, 2]]]);
      });

      it("references an event stored before again without rewriting it", async () => {
        await write([event(1n)], [[7, 1, 1n]]);
        expect(await write([event(1n)], [[8, 1, 1n]])).to.deep.equal({ ok: true });
        await store.updates.pruneUpdates(7, 1);
        expect(await stream(8)).to.deep.equal([[1, [1, 1, 2]]]);
      });

      it("forgets an event once no stream holds it: its id may then hold another entry", async () => {
        await write([event(1n, 50)], [[7, 1, 1n], [8, 1, 1n]]);
        await expectRejected(write([event(1n, 60)], [[9, 1, 1n]]));
        expect(await store.updates.latestSn(9)).to.equal(0);
        await store.updates.pruneUpdates(7, 1);
        await expectRejected(write([event(1n, 60)], [[9, 1, 1n]]));
        await store.updates.pruneUpdates(8, 1);
        expect(await write([event(1n, 60)], [[9, 1, 1n]])).to.deep.equal({ ok: true });
        expect(await stream(9)).to.deep.equal([[1, [60, 1, 2]]]);
      });

      it("refuses a taken sn, naming the users whose sn was taken, and writes nothing of that write", async () => {
        await write([event(1n), event(3n)], [[7, 1, 1n], [7, 2, 3n]]);
        expect(await write([event(2n), event(4n)], [[8, 1, 2n], [7, 3, 2n], [7, 2, 4n]])).to.deep.equal({ ok: false, conflicts: [7] });
        expect(await store.updates.latestSn(7)).to.equal(2);
        expect(await store.updates.latestSn(8)).to.equal(0);
        // The event was not kept either: its id is free for any entry.
        expect(await write([event(2n, 99)], [[8, 1, 2n]])).to.deep.equal({ ok: true });
        expect(await stream(8)).to.deep.equal([[1, [99, 1, 2]]]);
      });

      it("refuses a write that gives one sn twice, writing none of it", async () => {
        expect(await write([event(1n), event(2n)], [[7, 1, 1n], [7, 2, 2n], [7, 2, 2n]])).to.deep.equal({ ok: false, conflicts: [7] });
        expect(await store.updates.latestSn(7)).to.equal(0);
        expect(await write([event(1n)], [[7, 1, 1n]])).to.deep.equal({ ok: true });
      });

      it("refuses an event a stream already holds, or is given twice, naming the user, and writes nothing of that write", async () => {
        expect(await write([event(1n)], [[7, 1, 1n]])).to.deep.equal({ ok: true });
        expect(await write([event(1n), event(2n)], [[8, 1, 1n], [7, 2, 2n], [7, 3, 1n]])).to.deep.equal({ ok: false, conflicts: [7] });
        expect(await write([event(2n)], [[8, 1, 2n], [8, 2, 2n]])).to.deep.equal({ ok: false, conflicts: [8] });
        expect(await store.updates.latestSns([7, 8])).to.deep.equal(new Map([[7, 1], [8, 0]]));
        expect(await write([event(1n), event(2n)], [[8, 1, 1n], [7, 2, 2n]])).to.deep.equal({ ok: true });
        expect(await stream(7)).to.deep.equal([[1, [1, 1, 2]], [2, [2, 1, 2]]]);
        // Held means retained: once pruned, the entry is no longer there to repeat.
        await store.updates.pruneUpdates(7, 1);
        expect(await write([event(1n)], [[7, 3, 1n]])).to.deep.equal({ ok: true });
      });

      it("tells which streams hold an event, however far back among their retained entries", async () => {
        await write([event(41n)], [[7, 1, 41n], [8, 1, 41n]]);
        expect((await store.updates.holders(41n, [7, 8, 9])).sort()).to.deep.equal([7, 8]);
        expect(await store.updates.holders(42n, [7, 8])).to.deep.equal([]);
        expect(await store.updates.holders(41n, [])).to.deep.equal([]);
        for (let sn = 2; sn <= 300; sn++) await write([event(BigInt(1000 + sn))], [[7, sn, BigInt(1000 + sn)]]);
        expect(await store.updates.holders(41n, [7])).to.deep.equal([7]);
        await store.updates.pruneUpdates(8, 1);
        expect(await store.updates.holders(41n, [7, 8])).to.deep.equal([7]);
      });
    });

    describe("outbox", () => {
      // Ids come from the engine; they run past 2^53.
      let nextId = 2n ** 60n;
      const fanOut = (scope: string, createdAt: number, recipients = [7, 8]) => ({
        fanOutId: nextId++,
        scope,
        recipients,
        entry: new Uint8Array([1, createdAt % 256]),
        related: JSON.stringify({ users: [{ userId: 7 }] }),
        createdAt,
      });
      const ids = (fanOuts: { fanOutId: bigint }[]) => fanOuts.map((f) => f.fanOutId);
      /** Records fan-outs as a change does: with a write of its own (here a mute flag). */
      const record = (fanOuts: FanOutRecord[]) => store.conversations.setMuted(1, 1n, false, () => fanOuts);

      it("lists recorded fan-outs whole, by id, by scope too, and forgets finished ones", async () => {
        const [a, b, c] = [fanOut("1", 10), fanOut("user:7", 20, [9]), fanOut("1", 30)];
        await record([c, b]);
        await record([a]);
        expect(await store.outbox.pending(10)).to.deep.equal([a, b, c]);
        expect(ids(await store.outbox.pending(1))).to.deep.equal([a.fanOutId]);
        expect(ids(await store.outbox.pending(10, "1"))).to.deep.equal([a.fanOutId, c.fanOutId]);
        await store.outbox.finish(a);
        await store.outbox.finish(a);
        expect(ids(await store.outbox.pending(10))).to.deep.equal([b.fanOutId, c.fanOutId]);
        expect(await store.outbox.pending(10, "2")).to.deep.equal([]);
      });

      it("records the fan-outs of one change with it: a repeated id records none of them, nor the change", async () => {
        const [a, b] = [fanOut("1", 10), fanOut("1", 20)];
        await record([a]);
        let refused = false;
        await store.conversations.setMuted(1, 1n, true, () => [b, { ...a }]).catch(() => (refused = true));
        expect(refused).to.equal(true);
        expect(await store.outbox.pending(10)).to.deep.equal([a]);
        expect((await store.conversations.getUserState(1, 1n)).isMuted).to.equal(false);
      });

      it("records a message's fan-out and its place as the last message with the message, in one write", async () => {
        const conversationId = 2n ** 33n + 3n;
        await store.social.connect(7, 8, conversationId, 500);
        await store.conversations.markDeleted(8, conversationId, 0n);
        const message = { conversationId, messageId: 1n, senderId: 7, clientMessageId: 1n, body: new Uint8Array([1]), replyTo: null, metadata: {}, createdAt: 1000, updatedAt: null, edited: false };
        const inserted = fanOut(String(conversationId), 1000);
        expect(await store.messages.insertMessage(message, { recordAsLast: { participants: [7, 8] }, fanOut: inserted })).to.deep.equal({ outcome: "ok" });
        expect(await store.outbox.pending(10)).to.deep.equal([inserted]);
        const conversation = await store.conversations.getConversation(conversationId);
        expect([conversation?.lastMessageId, conversation?.lastMessageTime]).to.deep.equal([1n, 1000]);
        expect((await store.conversations.getUserState(8, conversationId)).isDeleted).to.equal(false);
        // A refused insert records nothing.
        expect((await store.messages.insertMessage({ ...message, clientMessageId: 2n }, { fanOut: fanOut(String(conversationId), 1001) })).outcome).to.equal("conflict");
        const updated = fanOut(String(conversationId), 1100);
        await store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([2]), updatedAt: 1100, edited: true }, { fanOut: updated });
        expect(await store.outbox.pending(10)).to.deep.equal([inserted, updated]);
      });

      it("records a change's events with the change, given what it answers; a change that did nothing records what its events say", async () => {
        const a = await newUser("ea@x.io");
        const b = await newUser("eb@x.io");
        const recorded = async () => (await store.outbox.pending(100)).map((f) => f.scope);
        const tagged = (tag: string) => () => [fanOut(tag, 1)];
        await store.users.updateProfile(a.userId, { nickname: "N" }, (user) => [fanOut(`profile:${user.nickname}`, 1)]);
        expect(await store.users.setCustomUsername(a.userId, "taken_name", tagged("username"))).to.equal("ok");
        expect(await store.users.setCustomUsername(b.userId, "taken_name", (outcome) => (outcome === "ok" ? [fanOut("never", 1)] : []))).to.equal("taken");
        const request = await store.social.createFriendRequest(a.userId, b.userId, "hi", 5, (made) => [fanOut(`request:${made.requestId}`, 1)]);
        expect(await store.social.resolveFriendRequest(request.requestId, 2, 6, tagged("accepted"))).to.equal(true);
        expect(await store.social.resolveFriendRequest(request.requestId, 2, 7, (done) => (done ? [fanOut("never", 1)] : []))).to.equal(false);
        expect(await store.social.setAlias(a.userId, b.userId, "B", tagged("alias"))).to.equal(true);
        expect(await store.social.removeContact(a.userId, b.userId, (existed) => [fanOut(`removed:${existed}`, 1)])).to.equal(true);
        const conversationId = (BigInt(b.userId) << 32n) | BigInt(a.userId);
        await store.conversations.setMuted(a.userId, conversationId, true, tagged("muted"));
        expect(await store.conversations.advanceRead(a.userId, conversationId, 3n, (position) => [fanOut(`read:${position}`, 1)])).to.equal(3n);
        await store.conversations.clearHistory(a.userId, conversationId, 2n, tagged("cleared"));
        await store.conversations.markDeleted(a.userId, conversationId, 0n, tagged("deleted"));
        expect(await store.messages.deleteFor(a.userId, conversationId, [9n], 0n, (ids) => [fanOut(`deleted:${ids.length}`, 1)])).to.deep.equal([]);
        expect(await store.social.unblock(a.userId, b.userId, (done) => [fanOut(`unblocked:${done}`, 1)])).to.equal(false);
        expect(await recorded()).to.deep.equal([
          "profile:N",
          "username",
          `request:${request.requestId}`,
          "accepted",
          "alias",
          "removed:true",
          "muted",
          "read:3",
          "cleared",
          "deleted",
          "deleted:0",
          "unblocked:false",
        ]);
      });

      it("writes nothing of a change whose events cannot be recorded", async () => {
        const a = await newUser("fa@x.io");
        const failing = () => {
          throw new Error("events failed");
        };
        let failed = false;
        await store.users.updateProfile(a.userId, { nickname: "Changed" }, failing).catch(() => (failed = true));
        expect(failed).to.equal(true);
        expect((await store.users.getUser(a.userId))?.nickname).to.equal("n");
        expect(await store.outbox.pending(10)).to.deep.equal([]);
      });

      it("keeps recorded fan-outs across close and reopen", async function () {
        if (!subject.reopen) this.skip();
        const kept = fanOut("1", 10);
        await record([kept]);
        store = await subject.reopen!();
        expect(await store.outbox.pending(10)).to.deep.equal([kept]);
      });
    });

    describe("agents", () => {
      type NewAgent = Parameters<Store["agents"]["createAgent"]>[1];
      const record = (creatorId: number, overrides: Partial<NewAgent> = {}): NewAgent => ({
        creatorId,
        status: AgentStatus.active,
        visibility: AgentVisibility.private,
        isSystem: false,
        tokenHash: `token-${creatorId}-${Math.random()}`,
        tokenPrefix: "nxa_prefix",
        secretKey: "nxk_secret",
        deliveryMode: DeliveryMode.websocket,
        webhookUrl: "",
        ipWhitelist: [],
        commands: [],
        miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
        createdAt: 1000,
        updatedAt: 1000,
        ...overrides,
      });
      const account = (username: string, userId?: number) => ({ accountType: AccountType.agent, username, nickname: "Bot", signature: "helps", createdAt: 1000, userId });

      it("creates the account and the agent together, a reserved id leaving the id sequence alone", async () => {
        const system = await store.agents.createAgent(account("system_bot", 10000), record(0, { isSystem: true, visibility: AgentVisibility.public }));
        expect(system.user).to.deep.include({ userId: 10000, accountType: AccountType.agent, username: "system_bot", usernameCustom: true, nickname: "Bot", signature: "helps" });
        expect(system.agent).to.deep.include({ agentUserId: 10000, creatorId: 0, isSystem: true });
        expect((await store.agents.getAgent(10000))?.isSystem).to.equal(true);
        const creator = await newUser("a@x.io");
        expect(creator.userId).to.equal(10001);
        const bot = await store.agents.createAgent(account("plain_bot"), record(creator.userId, { tokenHash: "hash-1" }));
        expect(bot.user.userId).to.equal(10002);
        expect((await store.agents.findByTokenHash("hash-1"))?.agentUserId).to.equal(10002);
        expect(await store.agents.findByTokenHash("hash-2")).to.equal(undefined);
        expect((await store.agents.listByCreator(creator.userId)).map((a) => a.agentUserId)).to.deep.equal([10002]);
        let refused = 0;
        await store.agents.createAgent(account("other_bot", 10000), record(0)).catch(() => refused++);
        await store.agents.createAgent(account("plain_bot"), record(creator.userId)).catch(() => refused++);
        expect(refused).to.equal(2);
      });

      it("replaces only the fields given and reads them back whole", async () => {
        const { agent } = await store.agents.createAgent(account("change_bot"), record(7, { commands: [{ command: "go", description: "Go" }] }));
        const miniApp = { enabled: true, url: "https://app.example.com/", allowedOrigins: ["https://app.example.com"], permissions: 5 };
        const changed = await store.agents.updateAgent(agent.agentUserId, { ipWhitelist: ["10.0.0.0/8", "::1"], miniApp, webhookUrl: "https://h.example/", updatedAt: 2000 });
        expect(changed).to.deep.equal({ ...agent, ipWhitelist: ["10.0.0.0/8", "::1"], miniApp, webhookUrl: "https://h.example/", updatedAt: 2000 });
        expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(changed);
        const deleted = await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, tokenHash: "next", secretKey: "nxk_next" });
        expect(deleted).to.deep.include({ status: AgentStatus.deleted, tokenHash: "next", secretKey: "nxk_next", commands: [{ command: "go", description: "Go" }], miniApp });
        expect(await store.agents.findByTokenHash(agent.tokenHash)).to.equal(undefined);
      });

      describe("conditional changes", () => {
        let nextFanOutId = 2n ** 61n;
        /** The agent's deletion event, as the engine records it with the change. */
        const deletionEvent = (agentUserId: number): FanOutRecord => ({
          fanOutId: nextFanOutId++,
          scope: `user:${agentUserId}`,
          recipients: [7],
          entry: new Uint8Array([9, 9]),
          related: "{}",
          createdAt: 1000,
        });
        const refusal = async (write: Promise<unknown>): Promise<AgentChangeRefused> => {
          const outcome = await write.then(
            () => undefined,
            (err: unknown) => err,
          );
          expect(outcome).to.be.instanceOf(AgentChangeRefused);
          return outcome as AgentChangeRefused;
        };
        const pendingOf = async (agentUserId: number) => (await store.outbox.pending(100, `user:${agentUserId}`)).map((f) => f.fanOutId);

        it("moves updatedAt forward on every write, also within one millisecond and with a clock that stands still", async () => {
          const { agent } = await store.agents.createAgent(account("version_bot"), record(7));
          const first = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_1", updatedAt: 1000 });
          const second = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_2", updatedAt: 1000 });
          const third = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_3" });
          expect([first.updatedAt, second.updatedAt, third.updatedAt]).to.deep.equal([1001, 1002, 1003]);
          const later = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_4", updatedAt: 5000 });
          expect(later.updatedAt).to.equal(5000);
          expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(later);
        });

        it("applies a change conditioned on the version and status it read, with its events", async () => {
          const { agent } = await store.agents.createAgent(account("cas_bot"), record(7));
          const event = deletionEvent(agent.agentUserId);
          const seen: number[] = [];
          const deleted = await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, updatedAt: 2000 }, (written) => (seen.push(written.updatedAt), [event]), {
            ifUpdatedAt: agent.updatedAt,
            ifStatus: AgentStatus.active,
          });
          expect(deleted).to.deep.include({ status: AgentStatus.deleted, updatedAt: 2000 });
          expect(seen).to.deep.equal([2000]);
          expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(deleted);
          expect(await pendingOf(agent.agentUserId)).to.deep.equal([event.fanOutId]);
        });

        it("refuses a change conditioned on a stale updatedAt: nothing written, the record as it stands answered", async () => {
          const { agent } = await store.agents.createAgent(account("stale_bot"), record(7));
          const other = subject.another ? await subject.another() : store;
          // Another node changed the record after this one read it.
          const meanwhile = await other.agents.updateAgent(agent.agentUserId, { visibility: AgentVisibility.public, updatedAt: 1500 });
          const refused = await refusal(store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_lost", updatedAt: 1600 }, undefined, { ifUpdatedAt: agent.updatedAt }));
          expect(refused.current).to.deep.equal(meanwhile);
          expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(meanwhile);
          // Re-read, the same change applies.
          const applied = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_kept", updatedAt: 1600 }, undefined, { ifUpdatedAt: refused.current!.updatedAt });
          expect(applied).to.deep.equal({ ...meanwhile, secretKey: "nxk_kept", updatedAt: 1600 });
        });

        it("refuses a change conditioned on a status the record left, and records none of its events", async () => {
          const { agent } = await store.agents.createAgent(account("gone_twice_bot"), record(7));
          const first = deletionEvent(agent.agentUserId);
          await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted }, () => [first], { ifStatus: AgentStatus.active });
          const second = deletionEvent(agent.agentUserId);
          let asked = 0;
          const refused = await refusal(
            store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, tokenHash: "after-refusal" }, () => (asked++, [second]), { ifStatus: AgentStatus.active }),
          );
          expect(refused.current?.status).to.equal(AgentStatus.deleted);
          expect(await pendingOf(agent.agentUserId)).to.deep.equal([first.fanOutId]);
          expect((await store.agents.getAgent(agent.agentUserId))?.tokenHash).to.equal(agent.tokenHash);
          expect(await store.agents.findByTokenHash("after-refusal")).to.equal(undefined);
          // A refusal before any write never asks for the events; one found at the write discards them.
          expect(asked).to.be.at.most(1);
        });

        it("of two conditional deletions racing from two handles, exactly one applies and records its event", async () => {
          const { agent } = await store.agents.createAgent(account("race_bot"), record(7));
          const other = subject.another ? await subject.another() : store;
          const events = [deletionEvent(agent.agentUserId), deletionEvent(agent.agentUserId)];
          const outcomes = await Promise.allSettled(
            [store, other].map((handle, i) => handle.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted }, () => [events[i]], { ifStatus: AgentStatus.active })),
          );
          const applied = outcomes.flatMap((outcome, i) => (outcome.status === "fulfilled" ? [i] : []));
          expect(applied).to.have.length(1);
          const rejected = outcomes.find((outcome) => outcome.status === "rejected") as PromiseRejectedResult;
          expect(rejected.reason).to.be.instanceOf(AgentChangeRefused);
          expect(await pendingOf(agent.agentUserId)).to.deep.equal([events[applied[0]].fanOutId]);
        });

        it("keeps both of two unconditioned changes of different fields racing from two handles", async () => {
          const { agent } = await store.agents.createAgent(account("merge_bot"), record(7));
          const other = subject.another ? await subject.another() : store;
          await Promise.all([
            store.agents.updateAgent(agent.agentUserId, { commands: [{ command: "a", description: "A" }] }),
            other.agents.updateAgent(agent.agentUserId, { ipWhitelist: ["10.0.0.1"] }),
          ]);
          expect(await store.agents.getAgent(agent.agentUserId)).to.deep.include({ commands: [{ command: "a", description: "A" }], ipWhitelist: ["10.0.0.1"], updatedAt: 1002 });
        });
      });

      it("samples only public, active agents, at most the limit", async () => {
        const shown = [];
        for (let i = 0; i < 3; i++) shown.push((await store.agents.createAgent(account(`shown_${i}`), record(7, { visibility: AgentVisibility.public }))).agent.agentUserId);
        await store.agents.createAgent(account("private_bot"), record(7));
        await store.agents.createAgent(account("gone_bot"), record(7, { visibility: AgentVisibility.public, status: AgentStatus.deleted }));
        expect((await store.agents.sampleFeatured(10)).map((a) => a.agentUserId).sort()).to.deep.equal(shown.sort());
        expect(await store.agents.sampleFeatured(2)).to.have.length(2);
      });

      it("finds public, active agents by nickname, username or description, by id, following their changes", async () => {
        const listed = { visibility: AgentVisibility.public };
        const search = async (text: string, limit = 10) => (await store.users.searchAgents(text, limit)).map((u) => u.userId);
        const forecaster = (await store.agents.createAgent({ ...account("alpha_bot"), nickname: "Weather Helper", signature: "Daily Forecasts" }, record(7, listed))).agent.agentUserId;
        const named = (await store.agents.createAgent(account("beta_weather"), record(7, listed))).agent.agentUserId;
        await store.agents.createAgent(account("weather_private"), record(7));
        await store.agents.createAgent(account("weather_gone"), record(7, { ...listed, status: AgentStatus.deleted }));
        await newUser("weather@x.io");
        expect(await search("WEATHER")).to.deep.equal([forecaster, named]);
        expect(await search("weather", 1)).to.deep.equal([forecaster]);
        expect(await search("forecast")).to.deep.equal([forecaster]);
        await store.agents.updateAgent(named, { visibility: AgentVisibility.private });
        await store.users.updateProfile(forecaster, { nickname: "Rain", signature: "" });
        expect(await search("weather")).to.deep.equal([]);
        expect(await search("rain")).to.deep.equal([forecaster]);
        await store.agents.updateAgent(named, { visibility: AgentVisibility.public });
        expect(await search("weather")).to.deep.equal([named]);
      });
    });

    describe("media", () => {
      const file = (fileId: string, overrides: Partial<MediaFileRecord> = {}): MediaFileRecord => ({
        fileId,
        ownerId: 7,
        purpose: 3,
        fileName: "photo.png",
        contentType: "image/png",
        size: 1234,
        checksum: "ab".repeat(32),
        width: 640,
        height: 480,
        durationMs: 0,
        thumbnailFileId: "",
        createdAt: 1000,
        ...overrides,
      });
      const session = (sessionId: string, overrides: Partial<UploadSessionRecord> = {}): UploadSessionRecord => ({
        sessionId,
        ownerId: 7,
        fileId: `file-of-${sessionId}`,
        fileName: "movie.mp4",
        contentType: "video/mp4",
        size: 5000,
        uploaded: 0,
        parts: [],
        createdAt: 1000,
        expiresAt: 2000,
        ...overrides,
      });

      it("stores files with their metadata, a file and its thumbnail together", async () => {
        await store.media.insertFiles([file("thumb1", { size: 10, width: 32, height: 24 }), file("main1", { thumbnailFileId: "thumb1", durationMs: 1500 })]);
        expect(await store.media.getFile("main1")).to.deep.equal(file("main1", { thumbnailFileId: "thumb1", durationMs: 1500 }));
        expect((await store.media.getFile("thumb1"))?.width).to.equal(32);
        expect(await store.media.getFile("nope")).to.equal(undefined);
      });

      it("refuses a repeated file id and stores none of that batch", async () => {
        await store.media.insertFiles([file("dup")]);
        let refused = false;
        await store.media.insertFiles([file("fresh"), file("dup")]).catch(() => (refused = true));
        expect(refused).to.equal(true);
        expect(await store.media.getFile("fresh")).to.equal(undefined);
      });

      it("creates, reads and advances a session only from the expected position, recording each accepted part in order", async () => {
        await store.media.createSession(session("s1"));
        expect(await store.media.getSession("s1")).to.deep.equal(session("s1"));
        expect(await store.media.advanceSession("s1", 0, 100, "p0-a")).to.equal(true);
        expect(await store.media.advanceSession("s1", 0, 200, "p0-b")).to.equal(false);
        expect(await store.media.advanceSession("s1", 100, 250, "p100-a")).to.equal(true);
        expect(await store.media.getSession("s1")).to.deep.include({ uploaded: 250, parts: ["p0-a", "p100-a"] });
        expect(await store.media.advanceSession("missing", 0, 1, "p0")).to.equal(false);
        expect(await store.media.getSession("missing")).to.equal(undefined);
      });

      it("lets exactly one of writers racing from the same position advance, and records only its part", async () => {
        await store.media.createSession(session("race"));
        const parts = ["000-a", "000-b", "000-c", "000-d"];
        const outcomes = await Promise.all(parts.map((part, i) => store.media.advanceSession("race", 0, 10 + i, part)));
        expect(outcomes.filter(Boolean)).to.have.length(1);
        const winner = outcomes.indexOf(true);
        expect(await store.media.getSession("race")).to.deep.include({ uploaded: 10 + winner, parts: [parts[winner]] });
      });

      it("finds the owner's newest open session with the same name, type and size", async () => {
        await store.media.createSession(session("old", { createdAt: 1000, expiresAt: 5000 }));
        await store.media.createSession(session("new", { createdAt: 1100, expiresAt: 5100 }));
        await store.media.createSession(session("other-owner", { ownerId: 8, createdAt: 1200, expiresAt: 5200 }));
        await store.media.createSession(session("other-size", { size: 5001, createdAt: 1300, expiresAt: 5300 }));
        expect((await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 1500))?.sessionId).to.equal("new");
        expect((await store.media.findResumableSession(8, "movie.mp4", "video/mp4", 5000, 1500))?.sessionId).to.equal("other-owner");
        expect(await store.media.findResumableSession(7, "movie.mp4", "video/webm", 5000, 1500)).to.equal(undefined);
        expect(await store.media.findResumableSession(7, "MOVIE.mp4", "video/mp4", 5000, 1500)).to.equal(undefined);
        // Expired at exactly expiresAt.
        expect((await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 5050))?.sessionId).to.equal("new");
        expect(await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 5100)).to.equal(undefined);
      });

      it("completes a session by storing its files and deleting it, once", async () => {
        await store.media.createSession(session("s2", { uploaded: 5000 }));
        expect(await store.media.completeSession("s2", [file("done2", { size: 5000 })])).to.equal(true);
        expect(await store.media.getSession("s2")).to.equal(undefined);
        expect((await store.media.getFile("done2"))?.size).to.equal(5000);
        expect(await store.media.completeSession("s2", [file("again2")])).to.equal(false);
        expect(await store.media.getFile("again2")).to.equal(undefined);
      });

      it("lists expired sessions oldest first and deletes sessions", async () => {
        await store.media.createSession(session("e1", { expiresAt: 3000 }));
        await store.media.createSession(session("e2", { expiresAt: 2000 }));
        await store.media.createSession(session("live", { expiresAt: 9000 }));
        expect((await store.media.listExpiredSessions(3000, 10)).map((s) => s.sessionId)).to.deep.equal(["e2", "e1"]);
        expect((await store.media.listExpiredSessions(3000, 1)).map((s) => s.sessionId)).to.deep.equal(["e2"]);
        expect(await store.media.deleteSession("e2")).to.equal(true);
        expect(await store.media.deleteSession("e2")).to.equal(false);
        expect((await store.media.listExpiredSessions(3000, 10)).map((s) => s.sessionId)).to.deep.equal(["e1"]);
      });

      it("completing with a file id taken already stores nothing and keeps the session", async () => {
        await store.media.insertFiles([file("taken")]);
        await store.media.createSession(session("s3", { uploaded: 5000 }));
        let refused = false;
        await store.media.completeSession("s3", [file("thumb3"), file("taken", { ownerId: 9 })]).catch(() => (refused = true));
        expect(refused).to.equal(true);
        expect(await store.media.getFile("thumb3")).to.equal(undefined);
        expect((await store.media.getFile("taken"))?.ownerId).to.equal(7);
        expect(await store.media.getSession("s3")).to.deep.equal(session("s3", { uploaded: 5000 }));
        expect(await store.media.completeSession("s3", [file("done3")])).to.equal(true);
      });

      it("lists sessions expired by a clock days ahead of today's, only once they expire", async () => {
        const day = 86_400_000;
        const today = Date.now();
        await store.media.createSession(session("tomorrow", { createdAt: today, expiresAt: today + day }));
        await store.media.createSession(session("in-ten-days", { createdAt: today, expiresAt: today + 10 * day }));
        const expired = async (now: number) => (await store.media.listExpiredSessions(now, 10)).map((s) => s.sessionId);
        expect(await expired(today + day - 1)).to.deep.equal([]);
        expect(await expired(today + day)).to.deep.equal(["tomorrow"]);
        expect(await expired(today + 11 * day)).to.deep.equal(["tomorrow", "in-ten-days"]);
      });

      it("keeps the first candidate of a secret", async () => {
        expect(await store.media.ensureSecret("signing", "first", 1)).to.equal("first");
        expect(await store.media.ensureSecret("signing", "second", 2)).to.equal("first");
        expect(await store.media.ensureSecret("other", "third", 3)).to.equal("third");
      });

      it("keeps files, sessions and secrets across close and reopen", async function () {
        if (!subject.reopen) this.skip();
        await store.media.insertFiles([file("kept")]);
        await store.media.createSession(session("kept-session", { uploaded: 42 }));
        await store.media.ensureSecret("signing", "durable", 1);
        store = await subject.reopen!();
        expect(await store.media.getFile("kept")).to.deep.equal(file("kept"));
        expect((await store.media.getSession("kept-session"))?.uploaded).to.equal(42);
        expect(await store.media.ensureSecret("signing", "replacement", 2)).to.equal("durable");
      });
    });

    describe("webhook jobs and agent cursors", () => {
      const heads = async (now: number, busy: number[] = [], limit = 10) =>
        (await store.webhookJobs.due(now, busy, limit)).map((job) => [job.agentUserId, job.body, job.attempts]);

      it("answers only the due head of each agent's queue, oldest due first, skipping busy agents", async () => {
        await store.webhookJobs.enqueue(1, "a1", 100);
        await store.webhookJobs.enqueue(2, "b1", 50);
        await store.webhookJobs.enqueue(1, "a2", 100);
        await store.webhookJobs.enqueue(3, "c1", 500);
        expect(await heads(100)).to.deep.equal([[2, "b1", 0], [1, "a1", 0]]);
        expect(await heads(500)).to.deep.equal([[2, "b1", 0], [1, "a1", 0], [3, "c1", 0]]);
        expect(await heads(500, [1, 3])).to.deep.equal([[2, "b1", 0]]);
        expect(await heads(500, [], 1)).to.deep.equal([[2, "b1", 0]]);
        expect(await heads(500, [], 0)).to.deep.equal([]);
        expect(await heads(49)).to.deep.equal([]);
      });

      it("answers only the agents of a slice when given one (a webhook-fleet node's share)", async () => {
        for (const agentUserId of [4, 5, 6, 7, 9]) await store.webhookJobs.enqueue(agentUserId, `j${agentUserId}`, agentUserId);
        const modulo = (owned: number[]) => (agentUserId: number) => owned.includes(agentUserId % 4);
        const sliced = async (owned: number[], limit = 10) => (await store.webhookJobs.due(100, [], limit, modulo(owned))).map((job) => job.agentUserId);
        expect(await sliced([1])).to.deep.equal([5, 9]);
        expect(await sliced([0, 3])).to.deep.equal([4, 7]);
        expect(await sliced([0, 3], 1)).to.deep.equal([4]);
        expect(await sliced([])).to.deep.equal([]);
        expect((await store.webhookJobs.due(100, [5], 10, modulo([1]))).map((job) => job.agentUserId)).to.deep.equal([9]);
      });

      it("answers when each job was queued, whatever its retries", async () => {
        await store.webhookJobs.enqueue(1, "a1", 100);
        await store.webhookJobs.handOver(2, ["b1"], 40, 3);
        expect((await store.webhookJobs.due(100, [], 10)).map((job) => [job.body, job.queuedAt])).to.deep.equal([["b1", 40], ["a1", 100]]);
        const [head] = await store.webhookJobs.due(100, [2], 10);
        await store.webhookJobs.reschedule(head, 1, 300);
        expect((await store.webhookJobs.due(300, [2], 10)).map((job) => [job.body, job.attempts, job.queuedAt])).to.deep.equal([["a1", 1, 100]]);
        expect((await store.webhookJobs.pending(1)).map((job) => job.queuedAt)).to.deep.equal([100]);
      });

      it("keeps a rescheduled head in front: the jobs behind it wait, then follow in order", async () => {
        await store.webhookJobs.enqueue(1, "a1", 100);
        await store.webhookJobs.enqueue(1, "a2", 100);
        const [head] = await store.webhookJobs.due(100, [], 10);
        await store.webhookJobs.reschedule(head, 1, 1100);
        expect(await heads(1000)).to.deep.equal([]);
        expect(await store.webhookJobs.due(1100, [], 10)).to.deep.equal([{ ...head, attempts: 1, nextAttemptAt: 1100 }]);
        await store.webhookJobs.remove(head);
        expect(await heads(1100)).to.deep.equal([[1, "a2", 0]]);
      });

      it("clears one agent's queue and answers how many jobs it held", async () => {
        await store.webhookJobs.enqueue(1, "a1", 100);
        await store.webhookJobs.enqueue(1, "a2", 100);
        await store.webhookJobs.enqueue(2, "b1", 100);
        expect((await store.webhookJobs.pending(1)).map((job) => job.body)).to.deep.equal(["a1", "a2"]);
        expect(await store.webhookJobs.clearAgent(1)).to.equal(2);
        expect(await store.webhookJobs.clearAgent(1)).to.equal(0);
        expect(await store.webhookJobs.pending(1)).to.deep.equal([]);
        expect(await heads(100)).to.deep.equal([[2, "b1", 0]]);
      });

      it(`keeps at most about ${maxQueuedWebhooksPerAgent} jobs per agent, dropping the oldest`, async () => {
        // Two agents receiving in turn, as members of one group do.
        const total = maxQueuedWebhooksPerAgent + 300;
        for (let index = 1; index <= total; index++) {
          await store.webhookJobs.enqueue(1, `a${index}`, 100);
          await store.webhookJobs.enqueue(2, `b${index}`, 100);
        }
        await store.webhookJobs.enqueue(3, "c1", 100);
        for (const [agent, prefix] of [[1, "a"], [2, "b"]] as const) {
          const kept = (await store.webhookJobs.pending(agent)).map((job) => job.body);
          expect(kept.length).to.be.within(maxQueuedWebhooksPerAgent, maxQueuedWebhooksPerAgent + 100);
          expect(kept.at(-1)).to.equal(`${prefix}${total}`);
          expect(kept[0]).to.equal(`${prefix}${total - kept.length + 1}`);
        }
        expect((await store.webhookJobs.pending(3)).map((job) => job.body)).to.deep.equal(["c1"]);
      });

      it("moves the delivered position forward only", async () => {
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(0);
        await store.webhookJobs.advanceDelivered(1, 5);
        await store.webhookJobs.advanceDelivered(1, 3);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(5);
        expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
      });

      it("moves the delivered position back only, and never creates one", async () => {
        await store.webhookJobs.advanceDelivered(1, 9);
        await store.webhookJobs.rewindDelivered(1, 12);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(9);
        await store.webhookJobs.rewindDelivered(1, 4);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(4);
        await store.webhookJobs.rewindDelivered(1, 0);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(0);
        // Forward moves still work after a rewind: the position is not stuck at its low point.
        await store.webhookJobs.advanceDelivered(1, 6);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(6);
        await store.webhookJobs.rewindDelivered(2, 3);
        expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
        await store.webhookJobs.advanceDelivered(2, 2);
        expect(await store.webhookJobs.deliveredSn(2)).to.equal(2);
      });

      it("a hand-over queues its bodies in order and moves the delivered position forward only", async () => {
        await store.webhookJobs.enqueue(1, "live", 50);
        await store.webhookJobs.handOver(1, ["b1", "b2"], 60, 8);
        expect((await store.webhookJobs.pending(1)).map((job) => [job.body, job.nextAttemptAt])).to.deep.equal([["live", 50], ["b1", 60], ["b2", 60]]);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(8);
        await store.webhookJobs.handOver(1, [], 70, 5);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(8);
        expect(await store.webhookJobs.pending(2)).to.deep.equal([]);
      });

      it("an append with hand-offs queues their bodies and moves the delivered positions in the same write", async () => {
        // One event per sn: a stream holds an event once.
        const write = (entries: [number, number][], handoffs: { agentUserId: number; bodies: string[]; queuedAt: number; deliveredSn: number }[]) =>
          store.updates.append({
            events: entries.map(([, sn]) => ({ eventId: BigInt(900 + sn), entry: new Uint8Array([9]) })),
            entries: entries.map(([userId, sn]) => ({ userId, sn, eventId: BigInt(900 + sn) })),
            handoffs,
            createdAt: 7,
          });
        expect(await write([[1, 1], [1, 2], [1, 3], [2, 1]], [{ agentUserId: 1, bodies: ["m1", "m3"], queuedAt: 70, deliveredSn: 3 }])).to.deep.equal({ ok: true });
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
        expect(await store.webhookJobs.deliveredSn(2)).to.equal(0);
        const queued = await store.webhookJobs.due(70, [], 10);
        expect(queued.map((job) => [job.agentUserId, job.body, job.nextAttemptAt])).to.deep.equal([[1, "m1", 70]]);
        await store.webhookJobs.remove(queued[0]);
        expect(await heads(70)).to.deep.equal([[1, "m3", 0]]);
        // A refused append writes none of it: no entry, no job, no position.
        expect(await write([[1, 4], [1, 3]], [{ agentUserId: 1, bodies: ["lost"], queuedAt: 80, deliveredSn: 4 }])).to.deep.equal({ ok: false, conflicts: [1] });
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
        expect(await heads(80)).to.deep.equal([[1, "m3", 0]]);
        // Without a hand-off an append leaves the agent delivery state alone.
        await write([[1, 4]], []);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(3);
      });

      it("keeps queued jobs and positions across close and reopen", async function () {
        if (!subject.reopen) this.skip();
        await store.webhookJobs.enqueue(1, "a1", 100);
        await store.webhookJobs.advanceDelivered(1, 9);
        store = await subject.reopen!();
        expect(await heads(100)).to.deep.equal([[1, "a1", 0]]);
        expect(await store.webhookJobs.deliveredSn(1)).to.equal(9);
      });
    });

    describe("messages", () => {
      type NewMessage = Parameters<Store["messages"]["insertMessage"]>[0];
      const conversationId = (2n ** 40n) | 5n;
      const message = (messageId: bigint, overrides: Partial<NewMessage> = {}): NewMessage => ({
        conversationId,
        messageId,
        senderId: 7,
        clientMessageId: 100n + messageId,
        body: new Uint8Array([1, Number(messageId)]),
        replyTo: null,
        metadata: {},
        createdAt: 1000,
        updatedAt: null,
        edited: false,
        ...overrides,
      });

      it("stores a message whole, metadata included; a taken id is a conflict, a repeated client id a duplicate", async () => {
        const first = message(1n, { metadata: { origin: "import", "x-trace": "ä/1" }, replyTo: new Uint8Array([9]) });
        expect(await store.messages.insertMessage(first)).to.deep.equal({ outcome: "ok" });
        expect(await store.messages.getMessage(conversationId, 1n)).to.deep.equal(first);
        expect(await store.messages.insertMessage(message(1n, { clientMessageId: 999n }))).to.deep.equal({ outcome: "conflict" });
        const duplicate = await store.messages.insertMessage(message(2n, { clientMessageId: first.clientMessageId }));
        expect(duplicate.outcome === "duplicate" && duplicate.existing).to.deep.equal(first);
        // The same client id from another sender is another message.
        expect(await store.messages.insertMessage(message(2n, { senderId: 8, clientMessageId: first.clientMessageId }))).to.deep.equal({ outcome: "ok" });
        expect(await store.messages.latestMessageId(conversationId)).to.equal(2n);
        expect(await store.messages.latestMessageId(conversationId + 1n)).to.equal(0n);
      });

      it("lists stream messages opened with their insert until an update closes them, oldest first, up to a start time", async () => {
        await store.messages.insertMessage(message(1n, { createdAt: 1000 }), { opensStream: true });
        await store.messages.insertMessage(message(2n, { createdAt: 900, senderId: 9 }), { opensStream: true });
        await store.messages.insertMessage(message(3n, { createdAt: 800 }));
        // A refused insert opens nothing.
        expect((await store.messages.insertMessage(message(1n, { createdAt: 10, clientMessageId: 555n }), { opensStream: true })).outcome).to.equal("conflict");
        expect(await store.messages.listOpenStreams(1000, 10)).to.deep.equal([
          { conversationId, messageId: 2n, senderId: 9, startedAt: 900 },
          { conversationId, messageId: 1n, senderId: 7, startedAt: 1000 },
        ]);
        expect((await store.messages.listOpenStreams(950, 10)).map((open) => open.messageId)).to.deep.equal([2n]);
        expect((await store.messages.listOpenStreams(1000, 1)).map((open) => open.messageId)).to.deep.equal([2n]);
        const finished = { body: new Uint8Array([7]), updatedAt: 1100, edited: false };
        await store.messages.updateMessage(conversationId, 2n, finished);
        expect(await store.messages.listOpenStreams(1000, 10)).to.have.length(2);
        await store.messages.updateMessage(conversationId, 2n, finished, { closesStream: true });
        expect((await store.messages.listOpenStreams(1000, 10)).map((open) => open.messageId)).to.deep.equal([1n]);
        expect((await store.messages.getMessage(conversationId, 2n))?.body).to.deep.equal(new Uint8Array([7]));
      });

      it("deletes for one user only: answers the ids deleted now, each once, skipping missing and cleared ones", async () => {
        for (let id = 1n; id <= 5n; id++) await store.messages.insertMessage(message(id));
        expect(await store.messages.deleteFor(7, conversationId, [4n, 2n, 2n, 99n, 1n], 1n)).to.deep.equal([4n, 2n]);
        expect(await store.messages.deleteFor(7, conversationId, [2n, 4n], 0n)).to.deep.equal([]);
        expect(await store.messages.isDeletedFor(7, conversationId, 2n)).to.equal(true);
        expect(await store.messages.isDeletedFor(8, conversationId, 2n)).to.equal(false);
        const ids = (rows: { messageId: bigint }[]) => rows.map((r) => r.messageId);
        expect(ids(await store.messages.listVisible(7, conversationId, "before", 100n, 1n, 10))).to.deep.equal([5n, 3n]);
        expect(ids(await store.messages.listVisible(7, conversationId, "after", 0n, 1n, 10))).to.deep.equal([3n, 5n]);
        expect(ids(await store.messages.listVisible(8, conversationId, "after", 2n, 0n, 2))).to.deep.equal([3n, 4n]);
      });

      it("a message id past any the sequence assigns names no message", async () => {
        await store.messages.insertMessage(message(1n));
        const beyond = [2n ** 31n + 7n, 2n ** 53n + 1n, 2n ** 63n - 1n];
        for (const messageId of beyond) expect(await store.messages.getMessage(conversationId, messageId)).to.equal(undefined);
        expect(await store.messages.deleteFor(7, conversationId, beyond, 0n)).to.deep.equal([]);
        expect((await store.messages.listVisible(7, conversationId, "before", 2n ** 63n - 1n, 0n, 10)).map((m) => m.messageId)).to.deep.equal([1n]);
        expect(await store.messages.listVisible(7, conversationId, "after", 2n ** 63n - 1n, 0n, 10)).to.deep.equal([]);
      });
    });

    describe("leases and fences", () => {
      const nodeA = { node: "node-a", instance: "a-1" };
      const nodeB = { node: "node-b", instance: "b-1" };
      const ttl = 30_000;
      const fenceOf = (lease: { shard: number; epoch: number }): Fence => ({ shard: lease.shard, epoch: lease.epoch });
      /** One entry of user `userId` at `sn`, naming an event of its own, under the given fences. */
      const appendOne = (userId: number, sn: number, fences: Fence[], handoffs?: WebhookHandoff[]) =>
        store.updates.append({ events: [{ eventId: BigInt(userId * 1000 + sn), entry: new Uint8Array([sn]) }], entries: [{ userId, sn, eventId: BigInt(userId * 1000 + sn) }], handoffs, createdAt: sn, fences });
      const conversationId = (2n ** 41n) | 3n;
      const message = (messageId: bigint) => ({
        conversationId,
        messageId,
        senderId: 7,
        clientMessageId: 500n + messageId,
        body: new Uint8Array([1]),
        replyTo: null,
        metadata: {},
        createdAt: 1000,
        updatedAt: null,
        edited: false,
      });
      const refused = async (write: Promise<unknown>): Promise<OwnershipLostError> => {
        let caught: unknown;
        await write.catch((err: unknown) => (caught = err));
        expect(caught).to.be.instanceOf(OwnershipLostError);
        return caught as OwnershipLostError;
      };

      it("acquires a free shard at epoch 1, extends its own lease with the same epoch, and refuses another node until it expires", async () => {
        const first = await store.leases.acquire(5, nodeA, 1000, ttl);
        expect(first).to.deep.equal({ shard: 5, node: "node-a", instance: "a-1", epoch: 1, expiresAt: 1000 + ttl });
        expect(await store.leases.acquire(5, nodeA, 2000, ttl)).to.deep.include({ instance: "a-1", epoch: 1, expiresAt: 2000 + ttl });
        expect(await store.leases.acquire(5, nodeB, 2000 + ttl - 1, ttl)).to.deep.include({ instance: "a-1", epoch: 1 });
        expect(await store.leases.getLease(5)).to.deep.include({ instance: "a-1", epoch: 1 });
        expect(await store.leases.getLease(6)).to.equal(undefined);
      });

      it("keeps a lease numbered below zero (a fan-out id slot) apart from the shard of the same magnitude", async () => {
        expect(await store.leases.acquire(-6, nodeA, 1000, ttl)).to.deep.equal({ shard: -6, node: "node-a", instance: "a-1", epoch: 1, expiresAt: 1000 + ttl });
        expect(await store.leases.acquire(6, nodeB, 1000, ttl)).to.deep.include({ instance: "b-1", epoch: 1 });
        const slot = (await store.leases.getLease(-6))!;
        expect(await store.leases.renew(nodeA, [{ shard: slot.shard, epoch: slot.epoch }], 2000, ttl)).to.deep.equal([-6]);
        await store.leases.release(nodeA, [{ shard: -6, epoch: 1 }]);
        expect(await store.leases.getLease(-6)).to.deep.include({ instance: "" });
        expect(await store.leases.getLease(6)).to.deep.include({ instance: "b-1" });
      });

      it("renews while the epoch holds, expired or not; a lease taken over after expiry has the next epoch and the old holder's renewal fails", async () => {
        const lease = await store.leases.acquire(5, nodeA, 1000, ttl);
        expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000, ttl)).to.deep.equal([5]);
        expect((await store.leases.getLease(5))?.expiresAt).to.equal(5000 + ttl);
        // Expired, but nobody took it: still A's, same epoch.
        expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000 + 2 * ttl, ttl)).to.deep.equal([5]);
        const takenOver = await store.leases.acquire(5, nodeB, 5000 + 4 * ttl, ttl);
        expect(takenOver).to.deep.include({ node: "node-b", instance: "b-1", epoch: 2 });
        expect(await store.leases.renew(nodeA, [fenceOf(lease)], 5000 + 4 * ttl, ttl)).to.deep.equal([]);
        // A's own acquire now finds B's lease.
        expect(await store.leases.acquire(5, nodeA, 5000 + 4 * ttl, ttl)).to.deep.include({ instance: "b-1", epoch: 2 });
      });

      it("a released lease is taken at once with the next epoch; a new instance of the same node takes its leases at once", async () => {
        const lease = await store.leases.acquire(1, nodeA, 1000, ttl);
        await store.leases.release(nodeA, [fenceOf(lease)]);
        expect(await store.leases.acquire(1, nodeB, 1001, ttl)).to.deep.include({ instance: "b-1", epoch: 2 });
        // Releasing with a stale epoch or as another instance changes nothing.
        await store.leases.release(nodeA, [{ shard: 1, epoch: 2 }]);
        await store.leases.release(nodeB, [{ shard: 1, epoch: 1 }]);
        expect(await store.leases.getLease(1)).to.deep.include({ instance: "b-1", epoch: 2 });
        const restarted = { node: "node-b", instance: "b-2" };
        expect(await store.leases.acquire(1, restarted, 1002, ttl)).to.deep.include({ instance: "b-2", epoch: 3 });
      });

      it("takes over a live lease only while it is exactly the one read, with the next epoch; the old holder's fence is refused after", async () => {
        const held = await store.leases.acquire(4, nodeA, 1000, ttl);
        const taken = await store.leases.takeOver(4, nodeB, held, 1001, ttl);
        expect(taken).to.deep.include({ node: "node-b", instance: "b-1", epoch: held.epoch + 1, expiresAt: 1001 + ttl });
        expect(await store.leases.renew(nodeA, [fenceOf(held)], 1002, ttl)).to.deep.equal([]);
        await refused(store.messages.insertMessage({ ...message(1n), conversationId: conversationId + 4n }, { fence: fenceOf(held) }));
        // A take-over from a lease read before it changed hands changes nothing and answers the lease as it is.
        const nodeC = { node: "node-c", instance: "c-1" };
        expect(await store.leases.takeOver(4, nodeC, held, 1003, ttl)).to.deep.include({ instance: "b-1", epoch: held.epoch + 1 });
        expect(await store.leases.getLease(4)).to.deep.include({ instance: "b-1", epoch: held.epoch + 1 });
      });

      it("refuses a stale fence for message inserts and updates, writing nothing; the current fence writes", async () => {
        const old = fenceOf(await store.leases.acquire(9, nodeA, 1000, ttl));
        expect(await store.messages.insertMessage(message(1n), { fence: old, opensStream: true })).to.deep.equal({ outcome: "ok" });
        const current = fenceOf(await store.leases.acquire(9, nodeB, 1000 + ttl, ttl));
        expect(current.epoch).to.equal(old.epoch + 1);
        const fanOut = { fanOutId: 77n, scope: String(conversationId), recipients: [7], entry: new Uint8Array([1]), related: "{}", createdAt: 1 };
        const lost = await refused(store.messages.insertMessage(message(2n), { fence: old, fanOut, recordAsLast: { participants: [7] } }));
        expect(lost.fence).to.deep.equal(old);
        await refused(store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([2]), updatedAt: 2000, edited: true }, { fence: old, closesStream: true }));
        expect(await store.messages.latestMessageId(conversationId)).to.equal(1n);
        expect((await store.messages.getMessage(conversationId, 1n))?.body).to.deep.equal(new Uint8Array([1]));
        expect(await store.messages.listOpenStreams(1000, 10)).to.have.length(1);
        expect(await store.outbox.pending(10)).to.deep.equal([]);
        // A fence for a shard nobody leased is refused too.
        await refused(store.messages.insertMessage(message(2n), { fence: { shard: 10, epoch: 1 } }));
        expect(await store.messages.insertMessage(message(2n), { fence: current })).to.deep.equal({ outcome: "ok" });
        await store.messages.updateMessage(conversationId, 1n, { body: new Uint8Array([3]), updatedAt: 2000, edited: false }, { fence: current, closesStream: true });
        expect((await store.messages.getMessage(conversationId, 1n))?.body).to.deep.equal(new Uint8Array([3]));
      });

      it("refuses a stale fence for update-stream appends, queuing no webhook", async () => {
        const old = fenceOf(await store.leases.acquire(3, nodeA, 1000, ttl));
        expect(await appendOne(7, 1, [old])).to.deep.equal({ ok: true });
        const current = fenceOf(await store.leases.acquire(3, nodeB, 1000 + ttl, ttl));
        await refused(appendOne(7, 2, [old], [{ agentUserId: 7, bodies: ["b"], queuedAt: 1, deliveredSn: 2 }]));
        // One stale fence among current ones refuses the whole write.
        await refused(appendOne(7, 2, [current, old]));
        expect(await store.updates.latestSn(7)).to.equal(1);
        expect(await store.webhookJobs.pending(7)).to.deep.equal([]);
        expect(await appendOne(7, 2, [current])).to.deep.equal({ ok: true });
      });

      describe("appends confirmed after writing (a FenceHolder)", () => {
        const shard = shardOf(userStreamKey(7));
        /** A holder whose own view still trusts its lease: a pause it did not notice, or a partition. */
        const unaware = (instance: string): FenceHolder => ({ instance, untrusted: () => undefined });
        const appendAs = (on: Store, holder: FenceHolder, fence: Fence, sn: number, eventId: bigint) =>
          on.updates.append({ events: [{ eventId, entry: new Uint8Array([Number(eventId)]) }], entries: [{ userId: 7, sn, eventId }], createdAt: sn, fences: [fence], holder });
        const streamOf7 = async () => (await store.updates.readUpdates(7, 0, 10)).map((row) => [row.sn, row.entry[0]]);

        it("refuses an owner whose live lease was taken over, and nothing it wrote shows once the new owner wrote the stream", async () => {
          const other = subject.another ? await subject.another() : store;
          const lease = await store.leases.acquire(shard, nodeA, 1000, ttl);
          const fenceA = fenceOf(lease);
          expect(await appendAs(store, unaware("a-1"), fenceA, 1, 1n)).to.deep.equal({ ok: true });
          // A is seen leaving the cluster; B takes its shard before the lease runs out.
          const fenceB = fenceOf(await other.leases.takeOver(shard, nodeB, lease, 2000, ttl));
          expect(fenceB.epoch).to.equal(fenceA.epoch + 1);
          expect(await appendAs(other, unaware("b-1"), fenceB, 2, 2n)).to.deep.equal({ ok: true });
          // A wakes, believing itself the owner: at the sn it thinks next, then past the new owner's.
          await refused(appendAs(store, unaware("a-1"), fenceA, 2, 3n));
          await refused(appendAs(store, unaware("a-1"), fenceA, 3, 4n));
          expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2]]);
          expect(await store.updates.latestSn(7)).to.equal(2);
          expect(await store.updates.holders(3n, [7])).to.deep.equal([]);
          expect(await store.updates.holders(4n, [7])).to.deep.equal([]);
          expect(await appendAs(other, unaware("b-1"), fenceB, 3, 5n)).to.deep.equal({ ok: true });
          expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2], [3, 5]]);
        });

        it("refuses an owner whose own clock no longer trusts the lease (taken after it ran out), and its write does not show beside the new owner's", async () => {
          const other = subject.another ? await subject.another() : store;
          const fenceA = fenceOf(await store.leases.acquire(shard, nodeA, 1000, ttl));
          expect(await appendAs(store, unaware("a-1"), fenceA, 1, 1n)).to.deep.equal({ ok: true });
          const fenceB = fenceOf(await other.leases.acquire(shard, nodeB, 1000 + ttl, ttl));
          expect(await appendAs(other, unaware("b-1"), fenceB, 2, 2n)).to.deep.equal({ ok: true });
          const expired: FenceHolder = { instance: "a-1", untrusted: (fences) => fences[0] };
          const lost = await refused(appendAs(store, expired, fenceA, 2, 3n));
          expect(lost.fence).to.deep.equal(fenceA);
          expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2]]);
        });

        it("answers a write whose holder still owns its fences", async () => {
          const fence = fenceOf(await store.leases.acquire(shard, nodeA, 1000, ttl));
          for (let sn = 1; sn <= 3; sn++) expect(await appendAs(store, unaware("a-1"), fence, sn, BigInt(sn))).to.deep.equal({ ok: true });
          expect(await appendAs(store, unaware("a-1"), fence, 3, 9n)).to.deep.equal({ ok: false, conflicts: [7] });
          expect(await streamOf7()).to.deep.equal([[1, 1], [2, 2], [3, 3]]);
        });
      });

      it("concurrent takeovers leave one holder, and of two owners writing the same id at once only the current one writes", async () => {
        const other = subject.another ? await subject.another() : store;
        const holders = [0, 1, 2, 3].map((n) => ({ node: `node-${n}`, instance: `i-${n}` }));
        const results = await Promise.all(holders.map((holder, n) => (n % 2 ? other : store).leases.acquire(11, holder, 1000, ttl)));
        const winner = await store.leases.getLease(11);
        expect(winner?.epoch).to.equal(1);
        for (const result of results) expect(result).to.deep.equal(winner);
        const old = fenceOf(winner!);
        const current = fenceOf(await other.leases.acquire(11, nodeB, 1000 + ttl, ttl));
        const [stale, fresh] = await Promise.allSettled([
          store.messages.insertMessage({ ...message(1n), conversationId: conversationId + 1n }, { fence: old }),
          other.messages.insertMessage({ ...message(1n), conversationId: conversationId + 1n, clientMessageId: 9n }, { fence: current }),
        ]);
        expect(stale.status === "rejected" && stale.reason).to.be.instanceOf(OwnershipLostError);
        expect(fresh).to.deep.equal({ status: "fulfilled", value: { outcome: "ok" } });
        const [staleAppend, freshAppend] = await Promise.allSettled([
          appendOne(8, 1, [old]),
          other.updates.append({ events: [{ eventId: 8001n, entry: new Uint8Array([1]) }], entries: [{ userId: 8, sn: 1, eventId: 8001n }], createdAt: 1, fences: [current] }),
        ]);
        expect(staleAppend.status === "rejected" && staleAppend.reason).to.be.instanceOf(OwnershipLostError);
        expect(freshAppend).to.deep.equal({ status: "fulfilled", value: { ok: true } });
        expect((await store.messages.getMessage(conversationId + 1n, 1n))?.clientMessageId).to.equal(9n);
      });
    });

    it("keeps everything across close and reopen", async function () {
      if (!subject.reopen) this.skip();
      const a = await newUser("a@x.io");
      await store.sessions.upsertSession(session(a.userId, "d1"));
      await store.updates.append({ events: [{ eventId: 1n, entry: new Uint8Array([9]) }], entries: [{ userId: a.userId, sn: 1, eventId: 1n }], createdAt: 5 });
      store = await subject.reopen!();
      expect((await store.users.findByEmail("a@x.io"))?.userId).to.equal(a.userId);
      expect((await store.sessions.findByAccessHash(`access-${a.userId}-d1`))?.deviceId).to.equal("d1");
      expect(await store.updates.latestSn(a.userId)).to.equal(1);
      expect(await store.updates.readUpdates(a.userId, 0, 10)).to.deep.equal([{ sn: 1, entry: new Uint8Array([9]) }]);
      expect((await newUser("b@x.io")).userId).to.equal(a.userId + 1);
    });
  });
}
