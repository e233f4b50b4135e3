import { create, createFileRegistry, type DescMessage } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Label as Label, FieldDescriptorProto_Type as Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { expect } from "chai";
import { GetMessageResponseSchema, DeleteMessagesRequestSchema, SendMessageRequestSchema } from "./gen/api/v1/message_pb.js";
import { UpdateProfileRequestSchema } from "./gen/api/v1/user_pb.js";
import { containsInt64, isStrictInt64Json, lenientInt64, strictJsonDecoder } from "./strict-json.js";

/** A message with an int64-keyed map and an int64-valued map, which our protocol does not have (yet). */
function mapsMessage(): DescMessage {
  const entry = (name: string, key: Type, value: Type) => ({
    name,
    options: { mapEntry: true },
    field: [
      { name: "key", number: 1, label: Label.OPTIONAL, type: key, jsonName: "key" },
      { name: "value", number: 2, label: Label.OPTIONAL, type: value, jsonName: "value" },
    ],
  });
  const file = create(FileDescriptorProtoSchema, {
    name: "maps.proto",
    package: "test",
    syntax: "proto3",
    messageType: [
      {
        name: "Maps",
        field: [
          { name: "by_id", number: 1, label: Label.REPEATED, type: Type.MESSAGE, typeName: ".test.Maps.ByIdEntry", jsonName: "byId" },
          { name: "counts", number: 2, label: Label.REPEATED, type: Type.MESSAGE, typeName: ".test.Maps.CountsEntry", jsonName: "counts" },
        ],
        nestedType: [entry("ByIdEntry", Type.INT64, Type.STRING), entry("CountsEntry", Type.STRING, Type.UINT64)],
      },
    ],
  });
  return createFileRegistry(file, () => undefined).getMessage("test.Maps")!;
}

describe("strict int64 JSON", () => {
  it("takes decimal strings and exact integer numbers only", () => {
    for (const good of ["0", "12", "-12", "0012", "9223372036854775807", 0, -5, 9007199254740991]) expect(isStrictInt64Json(good), String(good)).to.equal(true);
    for (const bad of ["", " 1", "1 ", "+1", "0x1", "0b1", "0o1", "1e3", "1.0", "--1", "1-", 2 ** 53, -(2 ** 53), 1.5]) expect(isStrictInt64Json(bad), String(bad)).to.equal(false);
  });

  it("knows which messages can hold an int64, through nesting", () => {
    expect(containsInt64(UpdateProfileRequestSchema)).to.equal(false);
    expect(containsInt64(GetMessageResponseSchema)).to.equal(true);
    expect(containsInt64(mapsMessage())).to.equal(true);
  });

  it("finds a lenient value under either field name, in lists, nested messages and maps", () => {
    expect(lenientInt64(DeleteMessagesRequestSchema, { conversationId: "1", messageIds: ["2", "3"] })).to.equal(undefined);
    expect(lenientInt64(DeleteMessagesRequestSchema, { conversation_id: "0x1" })).to.equal('api.v1.DeleteMessagesRequest.conversation_id: "0x1"');
    expect(lenientInt64(DeleteMessagesRequestSchema, { messageIds: ["2", " 3"] })).to.equal('api.v1.DeleteMessagesRequest.messageIds[1]: " 3"');
    expect(lenientInt64(GetMessageResponseSchema, { message: { messageId: "+4" } })).to.equal('api.v1.GetMessageResponse.message.messageId: "+4"');
    const maps = mapsMessage();
    expect(lenientInt64(maps, { byId: { "12": "a" }, counts: { a: "3" } })).to.equal(undefined);
    expect(lenientInt64(maps, { byId: { "0x12": "a" } })).to.equal('test.Maps.byId: key "0x12"');
    expect(lenientInt64(maps, { counts: { a: "3", b: "3 " } })).to.equal('test.Maps.counts["b"]: "3 "');
  });

  it("leaves values of the wrong shape to protobuf-es, which refuses them itself", () => {
    expect(lenientInt64(DeleteMessagesRequestSchema, { conversationId: true, messageIds: "1" })).to.equal(undefined);
    expect(lenientInt64(SendMessageRequestSchema, { body: [] })).to.equal(undefined);
    expect(lenientInt64(SendMessageRequestSchema, "not an object")).to.equal(undefined);
  });

  it("decodes bodies: invalid UTF-8 and lenient int64 throw, anything else passes through as text", () => {
    const decoder = strictJsonDecoder(DeleteMessagesRequestSchema);
    expect(decoder.decode(new TextEncoder().encode('{"conversationId":"1"}'))).to.equal('{"conversationId":"1"}');
    expect(decoder.decode(new TextEncoder().encode("{not json"))).to.equal("{not json");
    expect(() => decoder.decode(new Uint8Array([0x7b, 0xff, 0x7d]))).to.throw(TypeError);
    expect(() => decoder.decode(new TextEncoder().encode('{"conversationId":"0x1"}'))).to.throw(/conversationId/);
    // A type without int64 fields is not parsed here at all.
    expect(strictJsonDecoder(UpdateProfileRequestSchema).decode(new TextEncoder().encode('{"nickname":"0x1"}'))).to.equal('{"nickname":"0x1"}');
  });
});
