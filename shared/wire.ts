// How protocol messages travel between tiers (API node ↔ engine actors), decided once:
// as their canonical proto3 JSON form. Moleculer serializers (JSON, MsgPack, Notepack) cannot
// carry bigint or class instances, and proto JSON already spells int64 as decimal strings, so a
// message crosses any transporter intact and is rebuilt with full types on the other side.
//
// Top-level bytes fields (uploads carry megabytes in one) are base64-coded with Node's native
// codec: protobuf-es codes bytes in JavaScript, about a second for 5 MB with the event loop
// blocked. The result is the same canonical JSON either way.
import {
  ScalarType,
  create,
  fromJson,
  toJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";

export type WireMessage = JsonObject;

const bytesFieldsOf = new WeakMap<DescMessage, DescField[]>();

function topLevelBytesFields(schema: DescMessage): DescField[] {
  let fields = bytesFieldsOf.get(schema);
  if (!fields) {
    fields = schema.fields.filter((field) => field.fieldKind === "scalar" && field.scalar === ScalarType.BYTES && field.oneof === undefined);
    bytesFieldsOf.set(schema, fields);
  }
  return fields;
}

/**
 * Whether the wire form of a `schema` message is exactly its canonical proto3 JSON, key order
 * included, so that it can be written to a JSON client as it is: top-level bytes fields come
 * after the others in the wire form, so a schema with one is not.
 */
export function wireIsCanonicalJson(schema: DescMessage): boolean {
  return topLevelBytesFields(schema).length === 0;
}

/** Encodes a message (or the init shape of one) for an action parameter or result. */
export function toWire<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc> | MessageInitShape<Desc>): WireMessage {
  const full = (message as { $typeName?: string }).$typeName ? (message as MessageShape<Desc>) : create(schema, message as MessageInitShape<Desc>);
  const bytesFields = topLevelBytesFields(schema);
  if (bytesFields.length === 0) return toJson(schema, full) as WireMessage;
  const withoutBytes = { ...full } as Record<string, unknown>;
  for (const field of bytesFields) withoutBytes[field.localName] = new Uint8Array();
  const wire = toJson(schema, withoutBytes as MessageShape<Desc>) as WireMessage;
  for (const field of bytesFields) {
    const bytes = (full as Record<string, unknown>)[field.localName] as Uint8Array;
    if (bytes.byteLength > 0) wire[field.jsonName] = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  }
  return wire;
}

/** Decodes what toWire produced. */
export function fromWire<Desc extends DescMessage>(schema: Desc, wire: WireMessage | undefined): MessageShape<Desc> {
  const bytesFields = topLevelBytesFields(schema);
  if (bytesFields.length === 0 || !wire) return fromJson(schema, wire ?? {});
  const rest = { ...wire };
  for (const field of bytesFields) delete rest[field.jsonName];
  const message = fromJson(schema, rest) as Record<string, unknown>;
  // Buffer decodes standard and URL-safe base64 alike, as proto3 JSON allows both.
  for (const field of bytesFields) {
    const encoded = wire[field.jsonName];
    if (typeof encoded === "string") message[field.localName] = Buffer.from(encoded, "base64");
  }
  return message as MessageShape<Desc>;
}
