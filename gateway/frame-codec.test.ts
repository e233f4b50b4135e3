import { expect } from "chai";
import { create, fromBinary, fromJson, toBinary, toJson, type JsonObject } from "@bufbuild/protobuf";
import { ServerFrameSchema, ServerFrameType } from "../shared/gen/api/v1/gateway_pb.js";
import { UpdateSchema } from "../shared/gen/api/v1/updates_pb.js";
import { UserInfoSchema } from "../shared/gen/shared/v1/common_pb.js";
import { GroupInfoSchema } from "../shared/gen/shared/v1/group_pb.js";
import { SequencedFrames } from "./frame-codec.js";

const sns = [1, 2, 127, 128, 300, 16383, 16384, 2097151, 2097152, 268435455, 268435456, 2 ** 31 - 1];

/** An Update's JSON as the engine pushes a stream entry: snUpdate without sn. */
const updates: Record<string, JsonObject> = {
  "a bare entry": { snUpdate: { userProfileUpdated: { userId: 10001, newNickname: "Ann" } } },
  "an entry with users and groups": {
    users: [toJson(UserInfoSchema, create(UserInfoSchema, { userId: 10001, nickname: "Ann", username: "ann_1" })) as JsonObject],
    groups: [toJson(GroupInfoSchema, create(GroupInfoSchema, { groupId: 7, name: "g".repeat(200) })) as JsonObject],
    snUpdate: { messageEnvelope: { messageId: "12", conversationId: "7", senderId: 10001, body: { type: "MESSAGE_TYPE_TEXT", text: { text: "x".repeat(150) } }, createdAt: "1700000000000" } },
  },
  "an entry with an empty event": { snUpdate: { userProfileUpdated: {} } },
};

/** The frame protobuf-es builds for the update at `sn`. */
function expected(requestId: bigint, update: JsonObject, sn: number) {
  const message = fromJson(UpdateSchema, update);
  if (message.update.case === "snUpdate") message.update.value.sn = sn;
  return create(ServerFrameSchema, { requestId, type: ServerFrameType.UPDATE, payload: { case: "update", value: message } });
}

describe("SequencedFrames (one encoding per stream entry, each recipient's sn put in)", () => {
  for (const [name, update] of Object.entries(updates)) {
    for (const requestId of [-1n, -300n, -(2n ** 40n)]) {
      it(`builds the bytes protobuf-es builds for ${name}, request id ${requestId}, at every sn size`, () => {
        const frames = new SequencedFrames(requestId, update);
        for (const sn of sns) {
          const frame = expected(requestId, update, sn);
          const bytes = frames.withSn(sn).encoded("binary") as Uint8Array;
          expect(Buffer.from(bytes).toString("hex"), `sn ${sn}`).to.equal(Buffer.from(toBinary(ServerFrameSchema, frame)).toString("hex"));
          const decoded = fromBinary(ServerFrameSchema, bytes);
          expect(decoded.payload.case === "update" && decoded.payload.value.update.case === "snUpdate" && decoded.payload.value.update.value.sn).to.equal(sn);
        }
      });

      it(`builds JSON that decodes to the same frame for ${name}, request id ${requestId}, at every sn size`, () => {
        const frames = new SequencedFrames(requestId, update);
        for (const sn of sns) {
          const text = frames.withSn(sn).encoded("json") as string;
          const decoded = fromJson(ServerFrameSchema, JSON.parse(text));
          expect(toJson(ServerFrameSchema, decoded), `sn ${sn}`).to.deep.equal(toJson(ServerFrameSchema, expected(requestId, update, sn)));
        }
      });
    }
  }

  it("gives each recipient its own sn from the same encoding, also when one recipient's frame is asked for twice", () => {
    const frames = new SequencedFrames(-5n, updates["a bare entry"]);
    const [first, second] = [frames.withSn(9), frames.withSn(200)];
    const snOf = (text: string) => (JSON.parse(text) as { update: { snUpdate: { sn: number } } }).update.snUpdate.sn;
    expect([snOf(first.encoded("json") as string), snOf(second.encoded("json") as string), snOf(first.encoded("json") as string)]).to.deep.equal([9, 200, 9]);
  });
});
