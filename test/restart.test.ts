import { expect } from "chai";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType } from "../shared/gen/shared/v1/message_pb.js";
import { device, signInAnotherDevice, signInWithCode } from "./support/accounts.js";
import { befriend } from "./support/social.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";

describe("restart durability", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("keeps every account, session, password, username, push token and update across a restart", async () => {
    server = await startTestServer();
    const user = await signInWithCode(server);
    const other = await signInAnotherDevice(server, user.email);
    const users = client(server, UserService, "json", user.accessToken);
    await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: "durable password 1" });
    await users.setUsername({ username: `durable_${process.pid}` });
    for (let i = 0; i < 5; i++) await users.updateProfile({ nickname: `n${i}` });
    await client(server, PushService, "json", user.accessToken).registerToken({ deviceId: user.deviceId, token: "apns-1", platform: PushPlatform.APNS });
    const before = await client(server, SyncService, "json", user.accessToken).getDifference({ sn: 0 });

    server = await server.restart();

    const after = client(server, UserService, "json", user.accessToken);
    const { profile } = await after.getProfile({});
    expect(profile).to.deep.include({ userId: user.userId, nickname: "n4", username: `durable_${process.pid}`, hasPassword: true, canChangeUsername: false });
    expect((await after.listDevices({})).devices.map((d) => d.deviceId).sort()).to.deep.equal([user.deviceId, other.deviceId].sort());
    const diff = await client(server, SyncService, "json", user.accessToken).getDifference({ sn: 0 });
    expect(diff.updates).to.deep.equal(before.updates);
    expect(diff.sn).to.equal(6);
    // The stream continues densely after the restart.
    await after.updateProfile({ nickname: "after restart" });
    expect((await client(server, SyncService, "json", user.accessToken).getCurrentState({})).state?.latestSn).to.equal(7);
    await client(server, AuthService, "json").refreshToken({ refreshToken: other.refreshToken });
    await client(server, AuthService, "json").loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "durable password 1", deviceInfo: device() });
    await client(server, PushService, "json", user.accessToken).unregisterToken({ deviceId: user.deviceId });
  });

  it("keeps contacts, conversations, messages and read positions, and continues message ids densely", async () => {
    const alice = await signInWithCode(server);
    const bob = await signInWithCode(server);
    const conversationId = await befriend(server, alice, bob);
    const send = (from: typeof alice, t: string, clientMessageId: bigint) =>
      client(server, MessageService, "json", from.accessToken).sendMessage({ conversationId, clientMessageId, body: { type: MessageType.TEXT, content: { case: "text", value: { text: t } } } });
    await send(alice, "before 1", 1n);
    await send(bob, "before 2", 2n);
    await client(server, ConversationService, "json", bob.accessToken).markAsRead({ conversationId, upToMessageId: 2n });

    server = await server.restart();

    expect((await client(server, ContactService, "json", alice.accessToken).listContacts({})).contacts.map((c) => c.user?.userId)).to.deep.equal([bob.userId]);
    const { conversation } = await client(server, ConversationService, "json", bob.accessToken).getConversation({ conversationId });
    expect(conversation).to.deep.include({ lastMessageId: 2n, lastReadMessageId: 2n });
    const third = await send(alice, "after", 3n);
    expect(third.messageId).to.equal(3n);
    const again = await send(alice, "before 1", 1n);
    expect(again.messageId).to.equal(1n);
    const history = await client(server, MessageService, "json", bob.accessToken).getMessageHistory({ conversationId });
    expect(history.messages.map((m) => (m.body?.content.case === "text" ? m.body.content.value.text : ""))).to.deep.equal(["after", "before 2", "before 1"]);
  });
});
