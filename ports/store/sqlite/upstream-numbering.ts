// Stored protobuf bytes written before Parley took the upstream protocol's field numbers
// (nexus-proto v0.0.12), rewritten into them. What moved: SnUpdate's oneof fields, MessageBody's
// custom_payload (20 → 30), the GROUP and RECALLED MessageType values (9, 10 → 10, 11),
// GroupContent's fields, and the group events, which name members by MemberInfo instead of
// UserInfo (only the user id carries over: a member's role and join time were never stored in
// them). The rewrite works on the wire format itself, so it needs no copy of the old schema, and
// everything it does not know is copied unchanged.

interface WireField {
  number: number;
  wireType: number;
  /** The field's value as encoded: varint bytes, 4 or 8 bytes, or the length-delimited payload. */
  value: Uint8Array;
}

const varint = 0;
const lengthDelimited = 2;

function readVarint(bytes: Uint8Array, at: number): { value: number; end: number } {
  let value = 0;
  let shift = 0;
  for (let index = at; index < bytes.length; index++) {
    const byte = bytes[index];
    // Field numbers, lengths and the enum values rewritten here all fit in 32 bits; larger varints
    // are only skipped over, never read for their value.
    if (shift < 32) value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if ((byte & 0x80) === 0) return { value, end: index + 1 };
  }
  throw new Error("truncated varint in stored protobuf");
}

function writeVarint(value: number): number[] {
  const out: number[] = [];
  let rest = value;
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
  return out;
}

function readFields(bytes: Uint8Array): WireField[] {
  const fields: WireField[] = [];
  for (let at = 0; at < bytes.length; ) {
    const key = readVarint(bytes, at);
    const number = Math.floor(key.value / 8);
    const wireType = key.value % 8;
    at = key.end;
    let end: number;
    if (wireType === varint) end = readVarint(bytes, at).end;
    else if (wireType === 1) end = at + 8;
    else if (wireType === 5) end = at + 4;
    else if (wireType === lengthDelimited) {
      const length = readVarint(bytes, at);
      at = length.end;
      end = at + length.value;
    } else throw new Error(`unexpected wire type ${wireType} in stored protobuf`);
    if (end > bytes.length) throw new Error("truncated stored protobuf");
    fields.push({ number, wireType, value: bytes.subarray(at, end) });
    at = end;
  }
  return fields;
}

function writeFields(fields: readonly WireField[]): Uint8Array {
  const out: number[] = [];
  for (const field of fields) {
    out.push(...writeVarint(field.number * 8 + field.wireType));
    if (field.wireType === lengthDelimited) out.push(...writeVarint(field.value.length));
    for (const byte of field.value) out.push(byte);
  }
  return Uint8Array.from(out);
}

/** How one old field becomes a new one: its new number and, for a message, how its payload changes. */
interface Move {
  to: number;
  payload?: (bytes: Uint8Array) => Uint8Array;
}

function rewrite(bytes: Uint8Array, moves: Record<number, Move>, keepOthers = true): Uint8Array {
  const fields: WireField[] = [];
  for (const field of readFields(bytes)) {
    const move = moves[field.number];
    if (!move) {
      if (keepOthers) fields.push(field);
      continue;
    }
    const value = move.payload && field.wireType === lengthDelimited ? move.payload(field.value) : field.value;
    fields.push({ number: move.to, wireType: field.wireType, value });
  }
  return writeFields(fields);
}

/** A UserInfo as a MemberInfo: the user id (field 1 in both) and nothing else. */
const memberInfo = (userInfo: Uint8Array) => rewrite(userInfo, { 1: { to: 1 } }, false);

const groupContent = (bytes: Uint8Array) =>
  rewrite(bytes, {
    1: { to: 7 },
    10: { to: 1, payload: (joined) => rewrite(joined, { 1: { to: 1, payload: memberInfo }, 2: { to: 2, payload: memberInfo } }) },
    11: { to: 2, payload: (left) => rewrite(left, { 1: { to: 1, payload: memberInfo } }) },
    12: { to: 3, payload: (removed) => rewrite(removed, { 1: { to: 1, payload: memberInfo }, 2: { to: 2, payload: memberInfo } }) },
    13: { to: 4, payload: (changed) => rewrite(changed, { 1: { to: 1, payload: memberInfo } }) },
  });

const movedMessageTypes: Record<number, number> = { 9: 10, 10: 11 };

/** A stored api.v1.MessageBody in the upstream numbering. */
export function messageBodyToUpstream(bytes: Uint8Array): Uint8Array {
  const fields = readFields(rewrite(bytes, { 18: { to: 18, payload: groupContent }, 20: { to: 30 } }));
  return writeFields(
    fields.map((field) => {
      if (field.number !== 1 || field.wireType !== varint) return field;
      const type = readVarint(field.value, 0).value;
      return type in movedMessageTypes ? { ...field, value: Uint8Array.from(writeVarint(movedMessageTypes[type])) } : field;
    }),
  );
}

const envelope = (bytes: Uint8Array) => rewrite(bytes, { 4: { to: 4, payload: messageBodyToUpstream } });

/** SnUpdate's oneof fields: old number → new number. */
const snUpdateMoves: Record<number, number> = { 10: 2, 11: 3, 12: 4, 13: 5, 14: 12, 15: 6, 16: 19, 17: 13, 18: 7, 19: 8, 20: 14, 21: 9, 22: 10, 23: 18, 24: 17, 25: 16, 26: 11 };

/** A stored api.v1.SnUpdate (with or without its sn) in the upstream numbering. */
export function snUpdateToUpstream(bytes: Uint8Array): Uint8Array {
  const moves: Record<number, Move> = {};
  for (const [from, to] of Object.entries(snUpdateMoves)) moves[Number(from)] = { to, payload: Number(from) === 10 ? envelope : undefined };
  return rewrite(bytes, moves);
}
