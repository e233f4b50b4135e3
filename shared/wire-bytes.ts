// The wire form of shared/wire.ts for messages that carry megabytes in one top-level bytes field
// (uploads). protobuf-es encodes bytes to base64 in JavaScript, which takes about a second for
// 5 MB and blocks the event loop meanwhile; Node's native base64 does it in milliseconds. The
// result is the same canonical proto3 JSON, so either side may use the plain functions instead.
import { create, fromJson, toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { WireMessage } from "./wire.js";

function jsonNameOf(schema: DescMessage, field: string): string {
  const descriptor = schema.fields.find((f) => f.localName === field && f.fieldKind === "scalar");
  if (!descriptor) throw new Error(`${schema.typeName} has no scalar field ${field}`);
  return descriptor.jsonName;
}

/** toWire for a message whose `field` is a large bytes field. */
export function toWireWithBytes<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>, field: string): WireMessage {
  const bytes = (message as Record<string, unknown>)[field] as Uint8Array;
  const wire = toJson(schema, create(schema, { ...message, [field]: new Uint8Array() } as never)) as WireMessage;
  if (bytes.byteLength > 0) wire[jsonNameOf(schema, field)] = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  return wire;
}

/** fromWire for a message whose `field` is a large bytes field. */
export function fromWireWithBytes<Desc extends DescMessage>(schema: Desc, wire: WireMessage | undefined, field: string): MessageShape<Desc> {
  const name = jsonNameOf(schema, field);
  const encoded = wire?.[name];
  const { [name]: _skipped, ...rest } = wire ?? {};
  const message = fromJson(schema, rest);
  // Buffer decodes standard and URL-safe base64 alike, as proto3 JSON allows both.
  if (typeof encoded === "string") (message as Record<string, unknown>)[field] = Buffer.from(encoded, "base64");
  return message;
}
