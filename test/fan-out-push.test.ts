// A group event is one push for all its recipients: each member's socket gets the frame with the
// sn the event has in that member's own stream, in JSON and in binary, identical to what
// GetDifference answers, with the users the entry references.
import { expect } from "chai";
import { toJson } from "@bufbuild/protobuf";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { SnUpdateSchema, type SnUpdate } from "../shared/gen/shared/v1/updates_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, type TestServer, type WireMode } from "./support/harness.js";
import { nextClientMessageId, textBody } from "./support/messaging.js";
import { GatewayClient } from "./support/ws-client.js";

describe("one push per fan-out, each recipient's sn put into one encoding", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
  });
  after(async () => server.dispose());

  const latestSn = async (user: SignedIn) => (await client(server, SyncService, "json", user.accessToken).getCurrentState({})).state!.latestSn;

  it("gives every member of a group its own sn, in JSON and binary frames alike, as GetDifference has it", async () => {
    const users = [await signInWithCode(server), await signInWithCode(server), await signInWithCode(server), await signInWithCode(server)];
    const [owner] = users;
    const { group } = await client(server, GroupService, "json", owner.accessToken).createGroup({ name: "sn", memberIds: users.slice(1).map((user) => user.userId) });
    // Streams of different lengths: the members' sn values for the next event differ.
    for (const [index, user] of users.entries()) {
      for (let i = 0; i < index * 3; i++) await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: `n${index}-${i}` });
    }
    const modes: WireMode[] = ["json", "binary", "json", "binary"];
    const sockets = await Promise.all(
      users.map(async (user, index) => {
        const socket = await GatewayClient.connect(server.url, modes[index]);
        await socket.authenticate(user.accessToken);
        return socket;
      }),
    );
    const bases = await Promise.all(users.map(latestSn));
    expect(new Set(bases).size).to.equal(users.length);
    const { messageId } = await client(server, MessageService, "json", owner.accessToken).sendMessage({
      conversationId: BigInt(group!.groupId),
      clientMessageId: nextClientMessageId(),
      body: textBody("to all"),
    });
    for (const [index, socket] of sockets.entries()) {
      const frame = await socket.next(
        (f) =>
          f.payload.case === "update" &&
          f.payload.value.update.case === "snUpdate" &&
          f.payload.value.update.value.update.case === "messageEnvelope" &&
          f.payload.value.update.value.update.value.messageId === messageId,
      );
      const update = frame.payload.case === "update" ? frame.payload.value : undefined;
      const pushed = update?.update.value as SnUpdate;
      expect(pushed.sn, `member ${index}`).to.equal(bases[index] + 1);
      expect(update?.users.map((user) => user.userId)).to.deep.equal([owner.userId]);
      const [stored] = (await client(server, SyncService, "json", users[index].accessToken).getDifference({ sn: bases[index] })).updates;
      expect(toJson(SnUpdateSchema, pushed)).to.deep.equal(toJson(SnUpdateSchema, stored));
      socket.close();
    }
  });
});
