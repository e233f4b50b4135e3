// A node whose lease on a group was taken over cannot change the group. Node A is a real server;
// node B is a second Ownership in this process, on its own store connection, with a clock that
// runs ahead (so A's lease looks expired to it, as after a pause or a clock skew). B takes the
// group conversation's shard while A still trusts its lease: every group change A then tries is
// refused by the store with nothing written, and the client sees exactly what it sees when a
// message write to a conversation is refused the same way.
import { ConnectError, Code } from "@connectrpc/connect";
import { expect } from "chai";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import { AdjustableClock } from "../shared/clock.js";
import { Ownership, OwnershipPolicy } from "../engine/ownership.js";
import { conversationKey, shardOf } from "../shared/shards.js";
import type { Store } from "../ports/store/store.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startTestServer, type TestServer } from "./support/harness.js";
import { nextClientMessageId, textBody } from "./support/messaging.js";

/** What a client is told when a write is refused: everything but the shard is the same for every key. */
async function refusal(call: Promise<unknown>) {
  let caught: unknown;
  await call.catch((err: unknown) => (caught = err));
  expect(caught, "the call should have been refused").to.be.instanceOf(ConnectError);
  const error = caught as ConnectError;
  const [detail] = error.findDetails(ErrorDetailSchema);
  return { code: Code[error.code], message: error.rawMessage, errorName: detail?.errorName, errorCode: detail?.errorCode, metadata: detail?.metadata };
}

describe("group changes under a lease taken over", () => {
  let server: TestServer;
  let people: SignedIn[];
  let store: Store;
  before(async function () {
    this.timeout(60_000);
    // Node B is simulated here beside one server node.
    server = await startTestServer({ topology: "single" });
    people = [];
    for (let i = 0; i < 6; i++) people.push(await signInWithCode(server, "json"));
    store = await openServerStore(server);
  });
  after(async () => {
    await store?.close();
    await server.dispose();
  });

  const groups = (u: SignedIn) => client(server, GroupService, "json", u.accessToken);
  const messages = (u: SignedIn) => client(server, MessageService, "json", u.accessToken);

  /** Node B takes the shard of the group's conversation, as a node that found A's lease expired; answers how to give it back. */
  async function takeOver(groupId: number) {
    const clock = new AdjustableClock();
    clock.advance(2 * OwnershipPolicy.leaseMs);
    const ownership = new Ownership(store.leases, clock, "node-b");
    const fence = await ownership.fence(conversationKey(BigInt(groupId)));
    return { fence, release: () => ownership.stop() };
  }

  /** Everything a group change could write, as the store holds it (its account-scope events are the acting owner's). */
  async function stored(groupId: number, owner: SignedIn) {
    const conversationId = BigInt(groupId);
    return {
      group: await store.groups.getGroup(groupId),
      members: await store.groups.listMembers(groupId),
      memberships: await Promise.all(people.map((p) => store.groups.groupIdsOf(p.userId))),
      latestMessageId: await store.messages.latestMessageId(conversationId),
      systemMessages: await store.outbox.pendingSystemMessages(100),
      ownerEvents: await store.outbox.pending(100, `user:${owner.userId}`),
    };
  }

  it("refuses each group change of the old owner with nothing written, as a message write is refused; the current owner writes", async () => {
    const [owner, a, b, c, d] = people;
    const group = (await groups(owner).createGroup({ name: "team", memberIds: [a.userId, b.userId, c.userId] })).group!;
    const groupId = group.groupId;
    const conversationId = BigInt(groupId);
    const shard = String(shardOf(conversationKey(conversationId)));

    // The reference: a message write refused because B took the conversation over.
    let b1 = await takeOver(groupId);
    const refusedMessage = await refusal(messages(owner).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("to A") }));
    expect(refusedMessage).to.deep.include({ code: Code[Code.Unavailable], errorName: Errors.unavailable.errorName });
    // With the delay the SDK's retry waits (retryAfterMsByReason).
    expect(refusedMessage.metadata).to.deep.equal({ reason: "OWNERSHIP_LOST", shard, retryAfterMs: "250" });
    await b1.release();

    const changes: [string, () => Promise<unknown>][] = [
      ["UpdateGroupName", () => groups(owner).updateGroupName({ groupId, name: "stale" })],
      ["UpdateGroupDescription", () => groups(owner).updateGroupDescription({ groupId, description: "stale" })],
      ["UpdateGroupAvatar", () => groups(owner).updateGroupAvatar({ groupId, avatarUrl: "https://example.com/stale.png" })],
      ["InviteMembers", () => groups(owner).inviteMembers({ groupId, memberIds: [d.userId] })],
      ["RemoveMember", () => groups(owner).removeMember({ groupId, targetId: a.userId })],
      ["LeaveGroup", () => groups(b).leaveGroup({ groupId })],
      ["DissolveGroup", () => groups(owner).dissolveGroup({ groupId })],
    ];
    for (const [name, change] of changes) {
      // A holds the lease again (B gave it back): its message write takes it.
      await messages(owner).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(`before ${name}`) });
      b1 = await takeOver(groupId);
      const before = await stored(groupId, owner);
      expect(await refusal(change()), name).to.deep.equal(refusedMessage);
      expect(await stored(groupId, owner), name).to.deep.equal(before);
      await b1.release();
    }

    // The current owner's fence writes; A, which now knows it lost the shard, refuses before writing.
    const b2 = await takeOver(groupId);
    expect(await store.groups.updateGroup(groupId, { description: "by B" }, undefined, { fence: b2.fence })).to.deep.include({ description: "by B" });
    const elsewhere = await expectError(groups(owner).updateGroupName({ groupId, name: "stale" }), Code.Unavailable);
    expect(elsewhere.metadata).to.deep.include({ reason: "OWNERSHIP_ELSEWHERE", shard });
    await b2.release();

    // Once B gives the shard back, A changes the group again.
    await groups(owner).updateGroupName({ groupId, name: "renamed" });
    const info = await groups(a).getGroupInfo({ groupId });
    expect(info.group).to.deep.include({ name: "renamed", description: "by B", avatarUrl: "" });
    expect(info.members.map((m) => m.userId).sort()).to.deep.equal([owner.userId, a.userId, b.userId, c.userId].sort());
  });
});
