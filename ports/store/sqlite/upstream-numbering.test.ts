import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import Database from "better-sqlite3";
import { expect } from "chai";
import { fromBinary } from "@bufbuild/protobuf";
import { MemberRole } from "../../../shared/gen/shared/v1/group_pb.js";
import { MessageBodySchema, MessageType, type MessageBody } from "../../../shared/gen/shared/v1/message_pb.js";
import { SnUpdateSchema } from "../../../shared/gen/shared/v1/updates_pb.js";
import { snUpdateOf } from "../../../engine/delivery/stream-entry.js";
import { migrate } from "./migrations.js";
import { openSqliteStore } from "./sqlite-store.js";
import { messageBodyToUpstream, snUpdateToUpstream } from "./upstream-numbering.js";

const samples = (JSON.parse(readFileSync(resolve(import.meta.dirname, "../../../test/fixtures/wire-before-upstream-numbering.json"), "utf8")) as { samples: Record<string, string> }).samples;
const bytes = (name: string) => new Uint8Array(Buffer.from(samples[name], "hex"));
const body = (name: string) => fromBinary(MessageBodySchema, messageBodyToUpstream(bytes(`MessageBody:${name}`)));
const groupEvent = (message: MessageBody) => (message.content.case === "group" ? message.content.value : undefined);

describe("stored protobuf in the upstream numbering (migration 9)", () => {
  it("moves group events to their numbers, naming members by user id", () => {
    const joined = groupEvent(body("memberJoined"));
    expect(joined?.groupId).to.equal(5);
    expect(joined?.event.case === "memberJoined" && joined.event.value.members.map((m) => [m.userId, m.role, m.joinedAt])).to.deep.equal([
      [10001, MemberRole.UNSPECIFIED, 0n],
      [10002, MemberRole.UNSPECIFIED, 0n],
    ]);
    expect(joined?.event.case === "memberJoined" && joined.event.value.inviter?.userId).to.equal(10003);
    const left = groupEvent(body("memberLeft"));
    expect(left?.event.case === "memberLeft" && left.event.value.member?.userId).to.equal(10002);
    const removed = groupEvent(body("memberRemoved"));
    expect(removed?.event.case === "memberRemoved" && [removed.event.value.member?.userId, removed.event.value.operator?.userId]).to.deep.equal([10002, 10001]);
    const changed = groupEvent(body("groupInfoChanged"));
    expect(changed?.event.case === "groupInfoChanged" && [changed.event.value.operator?.userId, changed.event.value.field]).to.deep.equal([10001, "name"]);
    expect(body("memberJoined").type).to.equal(MessageType.GROUP);
  });

  it("moves the RECALLED type and the custom payload, and leaves the rest alone", () => {
    expect(body("recalled")).to.deep.include({ type: MessageType.RECALLED });
    expect(body("recalled").content.case).to.equal("recalled");
    const custom = body("customPayload");
    expect(custom.content.case === "customPayload" && [...custom.content.value]).to.deep.equal([1, 2, 3]);
    const text = body("text");
    expect(text.content.case === "text" && [text.content.value.text, text.content.value.entities[0]?.data.case]).to.deep.equal(["hi", "mention"]);
    expect(messageBodyToUpstream(bytes("MessageBody:text"))).to.deep.equal(bytes("MessageBody:text"));
  });

  it("moves SnUpdate's entries to their numbers, the message inside an envelope too", () => {
    const update = (name: string) => fromBinary(SnUpdateSchema, snUpdateToUpstream(bytes(`SnUpdate:${name}`)));
    const group = update("messageEnvelopeGroup");
    expect(group.sn).to.equal(7);
    const envelope = group.update.case === "messageEnvelope" ? group.update.value : undefined;
    expect([envelope?.messageId, envelope?.body?.type, groupEvent(envelope!.body!)?.event.case]).to.deep.equal([3n, MessageType.GROUP, "memberJoined"]);
    const text = update("messageEnvelopeText");
    expect(text.update.case === "messageEnvelope" && [text.update.value.senderId, text.update.value.replyTo?.senderNickname]).to.deep.equal([10001, "Bo"]);
    expect(update("contactAdded").update).to.deep.include({ case: "contactAdded" });
    const receipt = update("readReceipt").update;
    expect(receipt.case === "readReceipt" && receipt.value.lastReadMessageId).to.equal(3n);
    expect(update("groupDissolved").update.case).to.equal("groupDissolved");
    const profile = update("userProfileUpdated").update;
    expect(profile.case === "userProfileUpdated" && profile.value.newNickname).to.equal("Ann2");
  });

  it("rewrites what a database stored before, when it opens", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-migration-9-"));
    try {
      // The database as version 8 left it, holding bytes in the old numbering.
      const db = new Database(join(dir, "parley.db"));
      migrate(db, 8);
      db.prepare("INSERT INTO updates (user_id, sn, payload, created_at) VALUES (?, ?, ?, ?)").run(10001, 7, Buffer.from(bytes("SnUpdate:messageEnvelopeGroup")), 1);
      db.prepare("INSERT INTO updates (user_id, sn, payload, created_at) VALUES (?, ?, ?, ?)").run(10001, 9, Buffer.from(bytes("SnUpdate:contactAdded")), 1);
      db.prepare(
        "INSERT INTO messages (conversation_id, message_id, sender_id, client_message_id, body, reply_to, metadata, created_at, updated_at, edited) VALUES (?, ?, ?, ?, ?, NULL, '{}', 1, NULL, 0)",
      ).run(5, 3, 0, 0, Buffer.from(bytes("MessageBody:recalled")));
      db.close();
      const store = await openSqliteStore(dir);
      try {
        const updates = (await store.updates.readUpdates(10001, 0, 10)).map(snUpdateOf);
        expect(updates.map((update) => [update.sn, update.update.case])).to.deep.equal([
          [7, "messageEnvelope"],
          [9, "contactAdded"],
        ]);
        expect(fromBinary(MessageBodySchema, (await store.messages.getMessage(5n, 3n))!.body).type).to.equal(MessageType.RECALLED);
      } finally {
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
