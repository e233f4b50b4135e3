// How protocol messages travel between tiers (API node ↔ engine actors), decided once:
// as their canonical proto3 JSON form. Moleculer serializers (JSON, MsgPack, Notepack) cannot
// carry bigint or class instances, and proto JSON already spells int64 as decimal strings, so a
// message crosses any transporter intact and is rebuilt with full types on the other side.
import { create, fromJson, toJson, type DescMessage, type JsonObject, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";

export type WireMessage = JsonObject;

/** Encodes a message (or the init shape of one) for an action parameter or result. */
export function toWire<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc> | MessageInitShape<Desc>): WireMessage {
  const full = (message as { $typeName?: string }).$typeName ? (message as MessageShape<Desc>) : create(schema, message as MessageInitShape<Desc>);
  return toJson(schema, full) as WireMessage;
}

/** Decodes what toWire produced. */
export function fromWire<Desc extends DescMessage>(schema: Desc, wire: WireMessage | undefined): MessageShape<Desc> {
  return fromJson(schema, wire ?? {});
}
