import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { ConversationActionType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType } from "../shared/gen/shared/v1/message_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import type { PushNotification, PushNotifier, PushReport } from "../ports/push-notifier/push-notifier.js";
import type { PushTokenRecord, Store } from "../ports/store/store.js";
import { signInAnotherDevice, signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, openServerStore, startTestServer, startTwoNodes, wireModes, type TestServer, type TwoNodes } from "./support/harness.js";
import { eventually, nextClientMessageId, streamStartBody, textBody, type BodyInit } from "./support/messaging.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

interface SentPush {
  tokens: readonly PushTokenRecord[];
  notification: PushNotification;
}

/** Records every notification; can be told to fail, or to hold its answer until released. */
class RecordingNotifier implements PushNotifier {
  readonly sent: SentPush[] = [];
  behaviour: "answer" | "fail" | "hold" = "answer";
  private readonly held: (() => void)[] = [];

  async send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<PushReport> {
    this.sent.push({ tokens, notification });
    if (this.behaviour === "fail") throw new Error("provider unavailable");
    if (this.behaviour === "hold") await new Promise<void>((resolve) => this.held.push(resolve));
    return { rejected: [] };
  }

  get pending(): number {
    return this.held.length;
  }

  release(): void {
    for (const resolve of this.held.splice(0)) resolve();
  }

  /** The notifications that announced this message. */
  about(sent: { conversationId: bigint; messageId: bigint }): SentPush[] {
    return this.sent.filter((push) => push.notification.message?.conversationId === String(sent.conversationId) && push.notification.message.messageId === String(sent.messageId));
  }
}

const imageBody: BodyInit = { type: MessageType.IMAGE, content: { case: "image", value: { fileId: "f_1", width: 10, height: 10, format: "png" } } };

for (const mode of wireModes) {
  describe(`MessageService.SendMessage offline push (${mode})`, () => {
    let server: TestServer;
    let store: Store;
    const notifier = new RecordingNotifier();
    const sockets: GatewayClient[] = [];
    before(async () => {
      server = await startTestServer({ adapters: { pushNotifier: notifier } });
      store = await openServerStore(server);
    });
    afterEach(() => {
      notifier.behaviour = "answer";
      notifier.release();
      for (const socket of sockets.splice(0)) socket.close();
    });
    after(async () => {
      await store.close();
      await server.dispose();
    });

    const messages = (token: string) => client(server, MessageService, mode, token);
    /** Sends a message; answers where it landed, since message ids count per conversation. */
    const send = async (from: SignedIn | TestAgent, conversationId: bigint, body: BodyInit = textBody("hello")) => {
      const { messageId } = await messages("accessToken" in from ? from.accessToken : from.token).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body });
      return { conversationId, messageId };
    };
    const registerToken = async (user: SignedIn, token: string) =>
      client(server, PushService, mode, user.accessToken).registerToken({ deviceId: user.deviceId, token, platform: PushPlatform.FCM });
    /** A signed-in user with one registered device token named after them. */
    const personWithToken = async (label: string) => {
      const user = await signInWithCode(server, mode);
      await registerToken(user, `${label}-${user.userId}`);
      return user;
    };
    const online = async (user: SignedIn) => {
      const socket = await GatewayClient.connect(server.url, mode);
      sockets.push(socket);
      await socket.authenticate(user.accessToken);
      return socket;
    };
    const untilOffline = async (userId: number) => {
      const deadline = Date.now() + 5000;
      while (((await server.broker.call("presence.onlineAmong", { userIds: [userId] })) as number[]).includes(userId)) {
        if (Date.now() > deadline) throw new Error(`user ${userId} still counts as online`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    };
    /** Waits for the one notification announcing the message and answers it. */
    const alertFor = async (sent: { conversationId: bigint; messageId: bigint }) => {
      await eventually(() => notifier.about(sent).length > 0, `a notification for message ${sent.messageId}`);
      return notifier.about(sent)[0];
    };
    const tokenOwners = (pushes: SentPush[]) => [...new Set(pushes.flatMap((push) => push.tokens.map((t) => t.userId)))].sort((a, b) => a - b);
    /** Each user gets their own notification (their badge is theirs): waits for `count` users' and answers whose arrived. */
    const alertedUsers = async (sent: { conversationId: bigint; messageId: bigint }, count: number) => {
      await eventually(() => tokenOwners(notifier.about(sent)).length >= count, `notifications of message ${sent.messageId} to ${count} users`);
      return tokenOwners(notifier.about(sent));
    };
    const ids = (...users: { userId: number }[]) => users.map((u) => u.userId).sort((a, b) => a - b);
    const makeGroup = async (owner: SignedIn, members: { userId: number }[]) =>
      BigInt((await client(server, GroupService, mode, owner.accessToken).createGroup({ name: "team", memberIds: members.map((m) => m.userId) })).group!.groupId);

    it("alerts every device of an offline recipient once, with the conversation, message, sender nickname and preview", async () => {
      const alice = await personWithToken("alice");
      const bob = await personWithToken("bob-phone");
      const bobTablet = await signInAnotherDevice(server, bob.email);
      await registerToken(bobTablet, `bob-tablet-${bob.userId}`);
      const conversationId = await befriend(server, alice, bob, mode);
      const longText = "x".repeat(150);

      const first = await send(alice, conversationId, textBody(longText));
      const { messageId } = first;
      const push = await alertFor(first);
      const nickname = (await store.users.getUser(alice.userId))!.nickname;
      const preview = `${"x".repeat(99)}…`;
      expect(push.tokens.map((t) => t.token).sort()).to.deep.equal([`bob-phone-${bob.userId}`, `bob-tablet-${bob.userId}`]);
      expect(push.notification).to.deep.equal({
        silent: false,
        // Bob's first unread message.
        badge: 1,
        title: nickname,
        body: preview,
        message: { conversationId: String(conversationId), messageId: String(messageId), senderId: alice.userId, senderNickname: nickname, preview },
      });

      // Media say what they are; the badge counts both unread messages; the later alert also shows the first one was not repeated.
      const image = await send(alice, conversationId, imageBody);
      expect((await alertFor(image)).notification).to.include({ body: "[Photo]", badge: 2 });
      expect(notifier.about(first)).to.have.length(1);
    });

    it("does not alert a recipient with a live connection, and alerts them again once it closed", async () => {
      const [owner, bob, witness] = [await personWithToken("owner"), await personWithToken("bob"), await personWithToken("witness")];
      const groupId = await makeGroup(owner, [bob, witness]);
      const socket = await online(bob);

      // The witness is offline, so the alert proves the decision for everyone was taken.
      const first = await send(owner, groupId);
      expect(await alertedUsers(first, 1)).to.deep.equal([witness.userId]);

      socket.close();
      await socket.closed;
      // The server learns of the close on its own schedule; the tracker says when it has.
      await untilOffline(bob.userId);
      const second = await send(owner, groupId);
      expect(await alertedUsers(second, 2)).to.deep.equal(ids(bob, witness));
    });

    it("never alerts the sender, agents, or a recipient who muted the conversation, until they unmute", async () => {
      const [owner, muted, witness] = [await personWithToken("owner"), await personWithToken("muted"), await personWithToken("witness")];
      const agent = await createAgent(server, owner, mode);
      // Agents cannot register tokens through the API; a stored one shows the rule is theirs, not the data's.
      await store.pushTokens.upsertPushToken({ userId: agent.userId, deviceId: "agent-device", token: "agent-token", platform: PushPlatform.FCM, isSandbox: false, updatedAt: 0 });
      const groupId = await makeGroup(owner, [muted, witness, agent]);
      const conversations = client(server, ConversationService, mode, muted.accessToken);
      await conversations.updateConversationAction({ conversationId: groupId, action: ConversationActionType.MUTE });

      const fromOwner = await send(owner, groupId);
      expect(await alertedUsers(fromOwner, 1)).to.deep.equal([witness.userId]);

      const fromAgent = await send(agent, groupId, textBody("agent says hi"));
      expect(await alertedUsers(fromAgent, 2)).to.deep.equal(ids(owner, witness));
      const agentPush = notifier.about(fromAgent)[0];
      expect(agentPush.notification.message).to.include({ senderId: agent.userId, preview: "agent says hi" });

      await conversations.updateConversationAction({ conversationId: groupId, action: ConversationActionType.UNMUTE });
      const afterUnmute = await send(owner, groupId);
      expect(await alertedUsers(afterUnmute, 2)).to.deep.equal(ids(muted, witness));
    });

    it("alerts each offline member of a group who has a token, once each, titled with the group and naming the sender", async () => {
      const owner = await personWithToken("owner");
      const members = [await personWithToken("m1"), await personWithToken("m2"), await personWithToken("m3")];
      const tokenless = await signInWithCode(server, mode);
      const groupId = await makeGroup(owner, [...members, tokenless]);
      const sent = await send(members[0], groupId, textBody("hi all"));
      expect(await alertedUsers(sent, 3)).to.deep.equal(ids(owner, members[1], members[2]));
      const pushes = notifier.about(sent);
      expect(pushes).to.have.length(3);
      const nickname = (await store.users.getUser(members[0].userId))!.nickname;
      for (const push of pushes) {
        expect(push.notification).to.deep.include({ title: "team", body: `${nickname}: hi all` });
        expect(push.notification.message).to.deep.include({ conversationId: String(groupId), senderId: members[0].userId, preview: "hi all" });
      }
    });

    it("badges each user with their own unread count: read messages and muted conversations do not count", async () => {
      const [alice, bob, carol] = [await personWithToken("alice"), await personWithToken("bob"), await personWithToken("carol")];
      const withAlice = await befriend(server, alice, bob, mode);
      const withCarol = await befriend(server, carol, bob, mode);
      const bobsConversations = client(server, ConversationService, mode, bob.accessToken);
      const badgeOf = async (sent: { conversationId: bigint; messageId: bigint }) => (await alertFor(sent)).notification.badge;

      await send(alice, withAlice);
      const second = await send(alice, withAlice);
      expect(await badgeOf(second)).to.equal(2);
      expect(await badgeOf(await send(carol, withCarol))).to.equal(3);

      await bobsConversations.markAsRead({ conversationId: withAlice, upToMessageId: second.messageId });
      expect(await badgeOf(await send(carol, withCarol))).to.equal(2);

      // A muted conversation neither alerts nor counts.
      await bobsConversations.updateConversationAction({ conversationId: withCarol, action: ConversationActionType.MUTE });
      await send(carol, withCarol);
      expect(await badgeOf(await send(alice, withAlice))).to.equal(1);
    });

    it("alerts once for a stream, at END with its final text; not at START, not for ERROR, not for edits or recalls", async () => {
      const owner = await personWithToken("owner");
      const agent = await createAgent(server, owner, mode);
      const asAgent = messages(agent.token);
      const conversationId = agent.conversationId;

      const failed = await send(agent, conversationId, streamStartBody());
      await asAgent.errorStream({ conversationId, messageId: failed.messageId, errorMessage: "model crashed" });
      const streamed = await send(agent, conversationId, streamStartBody());
      await asAgent.pushStreamDelta({ conversationId, messageId: streamed.messageId, seq: 1, delta: "partial" });
      await asAgent.endStream({ conversationId, messageId: streamed.messageId, accumulatedText: "the final answer", entities: [] });
      expect((await alertFor(streamed)).notification.body).to.equal("the final answer");

      const plain = await send(agent, conversationId, textBody("before edit"));
      await alertFor(plain);
      await asAgent.editMessage({ conversationId, messageId: plain.messageId, newBody: textBody("after edit") });
      await asAgent.recallMessage({ conversationId, messageId: plain.messageId });
      // A later message's alert marks the point by which any alert of the changes above had been sent.
      const barrier = await send(agent, conversationId, textBody("barrier"));
      await alertFor(barrier);
      expect(notifier.about(streamed)).to.have.length(1);
      expect(notifier.about(failed)).to.deep.equal([]);
      expect(notifier.about(plain)).to.have.length(1);
      expect(notifier.about(plain)[0].notification.body).to.equal("before edit");
    });

    it("answers SendMessage without waiting for the notifier, and a failing notifier does not fail it", async () => {
      const [alice, bob] = [await personWithToken("alice"), await personWithToken("bob")];
      const conversationId = await befriend(server, alice, bob, mode);

      notifier.behaviour = "hold";
      const held = await send(alice, conversationId);
      await eventually(() => notifier.about(held).length === 1, "the held notification");
      expect(notifier.pending).to.equal(1);
      notifier.release();

      notifier.behaviour = "fail";
      const failed = await send(alice, conversationId, textBody("still delivered"));
      await eventually(() => notifier.about(failed).length === 1, "the failing notification");
      const history = await messages(bob.accessToken).getMessageHistory({ conversationId, limit: 5 });
      expect(history.messages.map((m) => m.messageId)).to.include(failed.messageId);

      // The push service survives the failure: the next message is alerted as usual.
      notifier.behaviour = "answer";
      const next = await send(alice, conversationId);
      expect(await alertedUsers(next, 1)).to.deep.equal([bob.userId]);
    });
  });
}

describe("presence with the gateway and the tracker on two brokers", () => {
  let nodes: TwoNodes;
  let dataDir: string;
  let edgeStopped = false;
  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-presence-"));
    nodes = await startTwoNodes(dataDir, "presence");
  });
  after(async () => {
    if (!edgeStopped) await nodes.edge.stop();
    await nodes.engine.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const onlineOnEngine = async (userId: number) =>
    ((await nodes.engine.broker.call("presence.onlineAmong", { userIds: [userId] })) as number[]).includes(userId);
  const until = async (condition: () => Promise<boolean>, what: string) => {
    const deadline = Date.now() + 10_000;
    while (!(await condition())) {
      if (Date.now() > deadline) throw new Error(`${what} did not hold in time`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  it("counts a remote gateway's connections while they are open and forgets them when the gateway stops", async () => {
    const asServer = { url: nodes.edge.url, codesFile: nodes.codesFile, clock: nodes.clock } as TestServer;
    const user = await signInWithCode(asServer, "json");
    const other = await signInWithCode(asServer, "json");
    const socket = await GatewayClient.connect(nodes.edge.url, "json");
    await socket.authenticate(user.accessToken);
    // The registry is written before the authentication is answered: online at once.
    expect(await onlineOnEngine(user.userId)).to.equal(true);
    const second = await GatewayClient.connect(nodes.edge.url, "json");
    await second.authenticate(other.accessToken);
    second.close();
    await until(async () => !(await onlineOnEngine(other.userId)), "a closed connection's user counting as offline");
    expect(await onlineOnEngine(user.userId)).to.equal(true);

    edgeStopped = true;
    await nodes.edge.stop();
    // The engine keeps the answers it needed: it hears of the stop by the gateway's announcement
    // and the mesh's disconnect, a moment after the registry.
    await until(async () => !(await onlineOnEngine(user.userId)), "a stopped gateway's users counting as offline");
  });
});
