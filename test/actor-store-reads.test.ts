// What a message costs the store once the conversation actor holds its checks: counted through a
// store wrapper that records every call the engine makes.
import { expect } from "chai";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import type { Store } from "../ports/store/store.js";
import { signInWithCode } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { nextClientMessageId, streamStartBody, textBody } from "./support/messaging.js";
import { befriend, createAgent } from "./support/social.js";

/** The store with every method call recorded as "<part>.<method>". */
function counting(opened: Store, calls: string[]): Store {
  return new Proxy(opened, {
    get(target, part) {
      const value: unknown = Reflect.get(target, part);
      if (typeof value !== "object" || value === null) return value;
      return new Proxy(value, {
        get(inner, method) {
          const member: unknown = Reflect.get(inner, method);
          if (typeof member !== "function") return member;
          return (...args: unknown[]) => {
            calls.push(`${String(part)}.${String(method)}`);
            return (member as (...a: unknown[]) => unknown).apply(inner, args);
          };
        },
      });
    },
  });
}

/**
 * Reads of what the conversation actor checks (membership, contacts, blocks, an agent's status,
 * the sender's account, the retry lookup). Authentication (agents.findByTokenHash) and the offline
 * push service (users.getUsers, after the answer) are other services'.
 */
const checkReads = /^(groups|social)\.|^agents\.getAgent$|^users\.getUser$|^conversations\.getConversation$|^messages\.(findByClientMessageId|latestMessageId)$/;

describe("conversation actor: store reads per message", () => {
  let server: TestServer;
  const calls: string[] = [];
  before(async () => {
    server = await startTestServer({ adapters: { store: (opened) => counting(opened, calls) } });
  });
  after(async () => server.dispose());

  const messages = (token: string) => client(server, MessageService, "binary", token);

  it("a private send reads nothing its checks hold: no membership, contact, block, agent or account read per message", async () => {
    const alice = await signInWithCode(server);
    const bob = await signInWithCode(server);
    const conversationId = await befriend(server, alice, bob);
    await messages(alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("warm") });
    await messages(bob.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("warm") });
    calls.length = 0;
    const count = 20;
    for (let i = 0; i < count; i++) {
      await messages(i % 2 ? bob.accessToken : alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(`m${i}`) });
    }
    expect(calls.filter((call) => checkReads.test(call))).to.deep.equal([]);
    expect(calls.filter((call) => call === "messages.insertMessage")).to.have.length(count);
  });

  it("group sends and stream deltas read no membership either", async () => {
    const [owner, a, b] = [await signInWithCode(server), await signInWithCode(server), await signInWithCode(server)];
    const agent = await createAgent(server, owner);
    const created = await client(server, GroupService, "json", owner.accessToken).createGroup({ name: "reads", memberIds: [a.userId, b.userId, agent.userId] });
    const conversationId = BigInt(created.group!.groupId);
    const { messageId } = await messages(agent.token).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
    for (const sender of [owner, a, b]) await messages(sender.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("warm") });
    await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq: 1, delta: "warm" });
    calls.length = 0;
    for (let seq = 2; seq <= 11; seq++) await messages(agent.token).pushStreamDelta({ conversationId, messageId, seq, delta: `d${seq}` });
    for (const sender of [owner, a, b, a]) await messages(sender.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("g") });
    expect(calls.filter((call) => checkReads.test(call))).to.deep.equal([]);
    // A delta writes nothing and reads nothing of the message either.
    expect(calls.filter((call) => call.startsWith("messages.")).filter((call) => call !== "messages.insertMessage")).to.deep.equal([]);
  });
});
