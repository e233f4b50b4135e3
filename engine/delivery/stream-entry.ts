// A stream entry is encoded once per event, without sn; each stream's sn joins it only where it
// is read (GetDifference, an agent's catch-up) or pushed (the gateway splices it into the frame).
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { SnUpdateSchema, type SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { toWire, type WireMessage } from "../../shared/wire.js";
import type { StoredUpdate } from "../../ports/store/store.js";

/**
 * A stream entry encoded once for every recipient: its wire form and its protobuf binary form
 * (base64, so any serializer carries it), both without sn.
 */
export interface EncodedEntry {
  wire: WireMessage;
  binary: string;
}

export function encodeEntry(update: MessageInitShape<typeof SnUpdateSchema>["update"]): EncodedEntry {
  const entry = create(SnUpdateSchema, { update } as MessageInitShape<typeof SnUpdateSchema>);
  return { wire: toWire(SnUpdateSchema, entry), binary: Buffer.from(toBinary(SnUpdateSchema, entry)).toString("base64") };
}

/** A stored entry as the SnUpdate its stream holds at its sn. */
export function snUpdateOf(stored: StoredUpdate): SnUpdate {
  const update = fromBinary(SnUpdateSchema, stored.entry);
  update.sn = stored.sn;
  return update;
}
