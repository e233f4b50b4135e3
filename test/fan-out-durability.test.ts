// Acknowledged means complete: a failure at any step of a call that produces events (the change,
// an append to one recipient's stream, marking the fan-out finished) never leaves an accepted
// change without its events, and never delivers an event twice. The store is made to fail on
// purpose; everything else is a real server with real clients.
import { expect } from "chai";
import { Code, ConnectError } from "@connectrpc/connect";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import type { SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import type { Store } from "../ports/store/store.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { nextClientMessageId, textBody, textOf } from "./support/messaging.js";
import { befriend } from "./support/social.js";
import { shardOf, userStreamKey } from "../shared/shards.js";
import { engineNodes, ownerOf } from "../engine/shard-owners.js";

/** Failures to inject, each consumed by the next matching store call; `held` keeps stream writes waiting. */
class Faults {
  messageWrites = 0;
  /** Stream writes to fail that hold an entry of the user (a write holds many fan-outs and users: all of it fails). */
  appendsFor = new Map<number, number>();
  finishes = 0;
  /** Fan-outs (events) in each stream write that failed. */
  failedWriteSizes: number[] = [];
  held: Promise<void> | undefined;

  wrap = (store: Store): Store => {
    const fail = (step: string) => {
      throw new Error(`injected failure: ${step}`);
    };
    return {
      ...store,
      messages: {
        ...store.messages,
        insertMessage: async (...args) => {
          if (this.messageWrites > 0 && this.messageWrites--) fail("message write");
          return store.messages.insertMessage(...args);
        },
      },
      updates: {
        ...store.updates,
        append: async (write) => {
          await this.held;
          const hit = [...new Set(write.entries.map((entry) => entry.userId))].filter((userId) => (this.appendsFor.get(userId) ?? 0) > 0);
          for (const userId of hit) this.appendsFor.set(userId, this.appendsFor.get(userId)! - 1);
          if (hit.length > 0) {
            this.failedWriteSizes.push(write.events.length);
            fail(`append for ${hit.join(", ")}`);
          }
          return store.updates.append(write);
        },
      },
      outbox: {
        ...store.outbox,
        finish: async (fanOut) => {
          if (this.finishes > 0 && this.finishes--) fail("finish");
          return store.outbox.finish(fanOut);
        },
      },
    };
  };
}

const messageIdsOf = (entries: SnUpdate[]) =>
  entries.flatMap((entry) => (entry.update.case === "messageEnvelope" ? [entry.update.value.messageId] : []));

describe("events of accepted changes reach every stream exactly once, whatever step fails", () => {
  let server: TestServer;
  let faults: Faults;
  let alice: SignedIn;
  let bob: SignedIn;
  let conversationId: bigint;
  beforeEach(async () => {
    faults = new Faults();
    server = await startTestServer({ adapters: { store: faults.wrap }, env: { LOG_LEVEL: "fatal" } });
    [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    conversationId = await befriend(server, alice, bob);
  });
  afterEach(async () => server.dispose());

  const messages = (user: SignedIn) => client(server, MessageService, "json", user.accessToken);
  const send = (user: SignedIn, clientMessageId: bigint, text: string) => messages(user).sendMessage({ conversationId, clientMessageId, body: textBody(text) });
  const history = async () => (await messages(alice).getMessageHistory({ conversationId })).messages.map((m) => [m.messageId, textOf(m)]);

  /** Each user's latest sn now, to read their streams from later (also across restarts). */
  class Watch {
    private constructor(private readonly bases: Map<SignedIn, number>) {}
    static async of(users: SignedIn[]): Promise<Watch> {
      const bases = new Map<SignedIn, number>();
      for (const user of users) bases.set(user, (await client(server, SyncService, "json", user.accessToken).getCurrentState({})).state!.latestSn);
      return new Watch(bases);
    }
    /** The entries since the snapshot, every page, from the server running now; their sn values must be dense. */
    async entries(user: SignedIn): Promise<SnUpdate[]> {
      const sync = client(server, SyncService, "json", user.accessToken);
      const base = this.bases.get(user)!;
      const found: SnUpdate[] = [];
      for (let sn = base; ; ) {
        const page = await sync.getDifference({ sn });
        found.push(...page.updates);
        sn = page.sn;
        if (!page.hasMore) break;
      }
      expect(found.map((entry) => entry.sn)).to.deep.equal(found.map((_, index) => base + index + 1));
      return found;
    }
    async kinds(user: SignedIn) {
      return (await this.entries(user)).map((entry) => entry.update.case);
    }
  }

  const streamedMessageIds = async (watch: Watch, user: SignedIn) => messageIdsOf(await watch.entries(user));

  async function expectFailure(call: Promise<unknown>): Promise<void> {
    const err = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(ConnectError);
    expect((err as ConnectError).code).to.equal(Code.Internal);
  }

  it("a failed message write stores nothing and streams nothing; the retry is an ordinary first send", async () => {
    const watch = await Watch.of([alice, bob]);
    const clientMessageId = nextClientMessageId();
    faults.messageWrites = 1;
    await expectFailure(send(alice, clientMessageId, "hello"));
    expect(await history()).to.deep.equal([]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([]);
    const { messageId } = await send(alice, clientMessageId, "hello");
    expect(messageId).to.equal(1n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n]);
  });

  it("an append failing for one recipient is finished by the client's retry, which answers the same id; no stream gets it twice", async () => {
    await send(alice, nextClientMessageId(), "before");
    const watch = await Watch.of([alice, bob]);
    const clientMessageId = nextClientMessageId();
    faults.appendsFor.set(bob.userId, 1);
    await expectFailure(send(alice, clientMessageId, "hello"));
    // The message is accepted and stored; bob's stream misses it until the fan-out is finished.
    expect(await history()).to.deep.equal([
      [2n, "hello"],
      [1n, "before"],
    ]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([]);
    const retried = await send(alice, clientMessageId, "hello");
    expect(retried.messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([2n]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([2n]);
    // A second retry changes nothing.
    expect((await send(alice, clientMessageId, "hello")).messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([2n]);
  });

  it("a fan-out cut short is finished before the conversation's next event, which follows it in every stream", async () => {
    const watch = await Watch.of([alice, bob]);
    faults.appendsFor.set(bob.userId, 1);
    await expectFailure(send(alice, nextClientMessageId(), "first"));
    // Bob, not retrying anything, writes next: alice's message reaches him first, then his own.
    expect((await send(bob, nextClientMessageId(), "second")).messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n, 2n]);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n, 2n]);
  });

  it("a fan-out whose finish failed after every append is not appended again by the retry", async () => {
    const watch = await Watch.of([alice, bob]);
    const clientMessageId = nextClientMessageId();
    faults.finishes = 1;
    await expectFailure(send(alice, clientMessageId, "hello"));
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n]);
    expect((await send(alice, clientMessageId, "hello")).messageId).to.equal(1n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n]);
  });

  it("a fan-out cut short is finished at start-up, before anything else is served, without a retry", async () => {
    const watch = await Watch.of([alice, bob]);
    faults.appendsFor.set(alice.userId, 1);
    faults.appendsFor.set(bob.userId, 1);
    await expectFailure(send(alice, nextClientMessageId(), "hello"));
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([]);
    server = await server.restart();
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n]);
    // The conversation goes on densely after it.
    expect((await send(bob, nextClientMessageId(), "next")).messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n, 2n]);
  });

  it("a recorded fan-out the sweep finds is finished in its conversation's order", async () => {
    const watch = await Watch.of([alice, bob]);
    faults.appendsFor.set(bob.userId, 1);
    await expectFailure(send(alice, nextClientMessageId(), "hello"));
    await server.broker.call("messages.finishFanOuts", { request: { conversationId: String(conversationId) } });
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n]);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n]);
  });

  it("a group change whose system message failed posts it at start-up, once, to every member's stream", async () => {
    const carol = await signInWithCode(server);
    const { group } = await client(server, GroupService, "json", alice.accessToken).createGroup({ name: "before", memberIds: [bob.userId, carol.userId] });
    const groupConversation = BigInt(group!.groupId);
    const watch = await Watch.of([alice, bob, carol]);
    faults.messageWrites = 1;
    await expectFailure(client(server, GroupService, "json", alice.accessToken).updateGroupName({ groupId: group!.groupId, name: "after" }));
    // The rename is stored; its announcement is recorded but not posted yet.
    expect((await client(server, GroupService, "json", bob.accessToken).getGroupInfo({ groupId: group!.groupId })).group?.name).to.equal("after");
    const announcements = async () =>
      (await messages(bob).getMessageHistory({ conversationId: groupConversation })).messages.flatMap((m) =>
        m.body?.content.case === "group" ? [m.body.content.value.event.case] : [],
      );
    expect(await announcements()).to.deep.equal(["memberJoined"]);
    server = await server.restart();
    expect(await announcements()).to.deep.equal(["groupInfoChanged", "memberJoined"]);
    for (const user of [alice, bob, carol]) expect(await streamedMessageIds(watch, user)).to.deep.equal([2n]);
    // Asking for a system message no longer recorded (a sweep or a start after it was posted) posts nothing.
    await server.broker.call("messages.postSystemMessage", {
      request: { conversationId: String(groupConversation) },
      body: { type: "MESSAGE_TYPE_GROUP" },
      systemMessageId: "12345",
    });
    server = await server.restart();
    expect(await announcements()).to.deep.equal(["groupInfoChanged", "memberJoined"]);
    for (const user of [alice, bob, carol]) expect(await streamedMessageIds(watch, user)).to.deep.equal([2n]);
  });

  it("an event of a change outside conversations (a profile update) is finished at start-up once", async () => {
    const watch = await Watch.of([alice]);
    faults.appendsFor.set(alice.userId, 1);
    await expectFailure(client(server, UserService, "json", alice.accessToken).updateProfile({ nickname: "Renamed" }));
    expect(await watch.kinds(alice)).to.deep.equal([]);
    server = await server.restart();
    expect(await watch.kinds(alice)).to.deep.equal(["userProfileUpdated"]);
    server = await server.restart();
    expect(await watch.kinds(alice)).to.deep.equal(["userProfileUpdated"]);
  });

  it("releases the conversation while a message is delivered: the next one is stored meanwhile, and both reach every stream in order", async () => {
    const watch = await Watch.of([alice, bob]);
    let release!: () => void;
    faults.held = new Promise((resolve) => (release = resolve));
    const stored = async (count: number) => {
      while ((await history()).length < count) await new Promise((resolve) => setTimeout(resolve, 10));
    };
    // The second is sent once the first is stored (through a cluster's two api nodes, two sends
    // at once may reach the conversation in either order); both are durable while no stream
    // write can finish.
    const first = send(alice, nextClientMessageId(), "first");
    await stored(1);
    const second = send(bob, nextClientMessageId(), "second");
    await stored(2);
    expect(await history()).to.deep.equal([
      [2n, "second"],
      [1n, "first"],
    ]);
    release();
    expect((await first).messageId).to.equal(1n);
    expect((await second).messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n, 2n]);
    expect(await streamedMessageIds(watch, bob)).to.deep.equal([1n, 2n]);
  });

  it("a stream write failing with several fan-outs in it stores none of them; each is finished later once per stream, in order, densely", async () => {
    const [carol, dave] = [await signInWithCode(server), await signInWithCode(server)];
    const conversations = [conversationId, await befriend(server, carol, bob), await befriend(server, dave, bob)];
    const senders = [alice, carol, dave];
    const watch = await Watch.of([alice, bob, carol, dave]);
    // Every stream write holding an entry of bob fails, whichever fan-outs were taken together.
    faults.appendsFor.set(bob.userId, 1000);
    const sends = senders.map((sender, index) =>
      messages(sender).sendMessage({ conversationId: conversations[index], clientMessageId: nextClientMessageId(), body: textBody(`to bob ${index}`) }),
    );
    for (const sent of sends) await expectFailure(sent);
    expect(faults.failedWriteSizes.reduce((sum, size) => sum + size, 0)).to.be.at.least(3);
    // Nothing half-written: the senders' streams written together with bob's do not have their
    // messages either. A cluster writes each engine's streams apart (a fan-out goes to each owner
    // of its recipients' streams), so a stream another engine owns gets its message meanwhile.
    const writer = (user: SignedIn) => ownerOf(shardOf(userStreamKey(user.userId)), engineNodes(server.broker));
    for (const user of [alice, bob, carol, dave]) if (writer(user) === writer(bob)) expect(await streamedMessageIds(watch, user)).to.deep.equal([]);
    faults.appendsFor.clear();
    server = await server.restart();
    for (const user of [alice, carol, dave]) expect(await streamedMessageIds(watch, user)).to.deep.equal([1n]);
    const bobs = await watch.entries(bob);
    expect(bobs.map((entry) => (entry.update.case === "messageEnvelope" ? entry.update.value.conversationId : undefined)).sort()).to.deep.equal([...conversations].sort());
    // Each conversation goes on after its first message, in every stream.
    expect((await messages(bob).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("after") })).messageId).to.equal(2n);
    expect(await streamedMessageIds(watch, alice)).to.deep.equal([1n, 2n]);
  });
});
