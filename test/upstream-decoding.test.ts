// What a client generated from the upstream .proto files reads from Parley: binary answers and
// pushes decoded by field number, with the numbers taken from the upstream facts
// (test/fixtures/nexus-proto-v0.0.12.json), not from Parley's generated code.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { expect } from "chai";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { signInWithCode } from "./support/accounts.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { postRpc } from "./support/raw-rpc.js";
import { textBody } from "./support/messaging.js";
import { befriend } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

const facts = JSON.parse(readFileSync(resolve(import.meta.dirname, "fixtures/nexus-proto-v0.0.12.json"), "utf8")) as {
  messages: Record<string, { name: string; number: number }[]>;
  enums: Record<string, Record<string, number>>;
};
const number = (message: string, field: string) => facts.messages[message].find((f) => f.name === field)!.number;

/** A protobuf message as its fields by number, each a list of raw values (varint as bigint, bytes). */
function fieldsOf(bytes: Uint8Array): Map<number, (bigint | Uint8Array)[]> {
  const fields = new Map<number, (bigint | Uint8Array)[]>();
  const varint = (at: number): [bigint, number] => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[at++];
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return [value, at];
    }
  };
  for (let at = 0; at < bytes.length; ) {
    const [key, afterKey] = varint(at);
    const [fieldNumber, wireType] = [Number(key >> 3n), Number(key & 7n)];
    let value: bigint | Uint8Array;
    if (wireType === 0) [value, at] = varint(afterKey);
    else if (wireType === 2) {
      const [length, start] = varint(afterKey);
      value = bytes.subarray(start, start + Number(length));
      at = start + Number(length);
    } else throw new Error(`wire type ${wireType} not expected here`);
    fields.set(fieldNumber, [...(fields.get(fieldNumber) ?? []), value]);
  }
  return fields;
}
const one = (fields: Map<number, (bigint | Uint8Array)[]>, fieldNumber: number) => fields.get(fieldNumber)?.[0];

describe("an upstream-generated client reads Parley's binary wire", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
  });
  after(async () => server.dispose());

  it("finds a new message as message_envelope in GetDifference and in a live push, and a group announcement with its members", async () => {
    const [alice, bob, carol] = [await signInWithCode(server), await signInWithCode(server), await signInWithCode(server)];
    const conversationId = await befriend(server, alice, bob);
    const socket = await GatewayClient.connect(server.url, "binary");
    await socket.authenticate(bob.accessToken);
    const raw: Uint8Array[] = [];
    socket.socket.on("message", (data: Buffer) => raw.push(new Uint8Array(data)));
    await client(server, MessageService, "binary", alice.accessToken).sendMessage({ conversationId, clientMessageId: 1n, body: textBody("hello") });

    // GetDifference, binary: the message is the SnUpdate's message_envelope, not another event.
    const difference = await postRpc(server, "/api.v1.SyncService/GetDifference", new Uint8Array([]), { contentType: "application/proto", token: bob.accessToken });
    expect(difference.status).to.equal(200);
    const updates = fieldsOf(difference.bytes).get(number("api.v1.GetDifferenceResponse", "updates"))!.map((entry) => fieldsOf(entry as Uint8Array));
    const messageEntry = updates.find((update) => update.has(number("shared.v1.SnUpdate", "message_envelope")))!;
    const envelope = fieldsOf(one(messageEntry, number("shared.v1.SnUpdate", "message_envelope")) as Uint8Array);
    expect(one(envelope, number("shared.v1.MessageEnvelope", "conversation_id"))).to.equal(conversationId);
    const body = fieldsOf(one(envelope, number("shared.v1.MessageEnvelope", "body")) as Uint8Array);
    expect(one(body, number("shared.v1.MessageBody", "type"))).to.equal(BigInt(facts.enums["shared.v1.MessageType"].MESSAGE_TYPE_TEXT));

    // The live push: ServerFrame.update → Update.sn_update → the same message_envelope.
    const deadline = Date.now() + 5000;
    let pushed: Map<number, (bigint | Uint8Array)[]> | undefined;
    while (!pushed && Date.now() < deadline) {
      for (const frame of raw) {
        const update = one(fieldsOf(frame), number("api.v1.ServerFrame", "update"));
        const snUpdate = update && one(fieldsOf(update as Uint8Array), number("api.v1.Update", "sn_update"));
        if (snUpdate && fieldsOf(snUpdate as Uint8Array).has(number("shared.v1.SnUpdate", "message_envelope"))) pushed = fieldsOf(snUpdate as Uint8Array);
      }
      if (!pushed) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(pushed, "a pushed message_envelope").to.not.equal(undefined);
    socket.close();

    // A group announcement: GroupContent.member_joined names members by MemberInfo (user ids), and
    // their UserInfo travels in the pushed Update's users.
    const carolSocket = await GatewayClient.connect(server.url, "binary");
    await carolSocket.authenticate(carol.accessToken);
    const carolFrames: Uint8Array[] = [];
    carolSocket.socket.on("message", (data: Buffer) => carolFrames.push(new Uint8Array(data)));
    const { group } = await client(server, GroupService, "binary", alice.accessToken).createGroup({ name: "g", memberIds: [bob.userId, carol.userId] });
    let announced: { update: Map<number, (bigint | Uint8Array)[]>; body: Map<number, (bigint | Uint8Array)[]> } | undefined;
    for (const until = Date.now() + 5000; !announced && Date.now() < until; await new Promise((resolve) => setTimeout(resolve, 20))) {
      for (const frame of carolFrames) {
        const update = one(fieldsOf(frame), number("api.v1.ServerFrame", "update"));
        if (!update) continue;
        const updateFields = fieldsOf(update as Uint8Array);
        const snUpdate = one(updateFields, number("api.v1.Update", "sn_update"));
        const envelope = snUpdate instanceof Uint8Array ? one(fieldsOf(snUpdate), number("shared.v1.SnUpdate", "message_envelope")) : undefined;
        if (!(envelope instanceof Uint8Array)) continue;
        const body = fieldsOf(one(fieldsOf(envelope), number("shared.v1.MessageEnvelope", "body")) as Uint8Array);
        if (body.has(number("shared.v1.MessageBody", "group"))) announced = { update: updateFields, body };
      }
    }
    carolSocket.close();
    expect(announced, "a pushed group announcement").to.not.equal(undefined);
    expect(one(announced!.body, number("shared.v1.MessageBody", "type"))).to.equal(BigInt(facts.enums["shared.v1.MessageType"].MESSAGE_TYPE_GROUP));
    const content = fieldsOf(one(announced!.body, number("shared.v1.MessageBody", "group")) as Uint8Array);
    expect(one(content, number("shared.v1.GroupContent", "group_id"))).to.equal(BigInt(group!.groupId));
    const joined = fieldsOf(one(content, number("shared.v1.GroupContent", "member_joined")) as Uint8Array);
    const members = joined.get(number("shared.v1.MemberJoinedEvent", "members"))!.map((m) => one(fieldsOf(m as Uint8Array), number("shared.v1.MemberInfo", "user_id")));
    const everyone = [alice, bob, carol].map((user) => BigInt(user.userId));
    expect(members).to.deep.equal(everyone);
    const users = (announced!.update.get(number("api.v1.Update", "users")) ?? []).map((u) => one(fieldsOf(u as Uint8Array), number("shared.v1.UserInfo", "user_id")));
    expect([...users].sort()).to.deep.equal([...everyone].sort());
  });
});
