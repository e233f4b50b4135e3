// Frames on the wire: a text frame is the JSON form of a ClientFrame/ServerFrame, a binary frame
// its protobuf form. The server answers each connection in the form of its first frame.
import { create, fromBinary, fromJson, toBinary, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ClientFrameSchema, ServerFrameSchema, ServerFrameType, type ClientFrame, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { UpdateSchema } from "../shared/gen/api/v1/updates_pb.js";
import { SnUpdateSchema } from "../shared/gen/shared/v1/updates_pb.js";
import { int64RuleBroken } from "../shared/strict-json.js";

// Pushes carry server-generated request ids counting down from -1, so they can never collide
// with the client's own (positive) correlation ids.
let lastPushId = 0n;
export const nextPushId = () => --lastPushId;

export type FrameForm = "json" | "binary";

export type Decoded = { ok: true; frame: ClientFrame; form: FrameForm } | { ok: false; form: FrameForm; reason: string };

export function decodeClientFrame(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): Decoded {
  const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
  const form: FrameForm = isBinary ? "binary" : "json";
  try {
    if (isBinary) return { ok: true, frame: fromBinary(ClientFrameSchema, bytes), form };
    const json: unknown = JSON.parse(bytes.toString("utf8"));
    // The same int64 rule as for JSON requests: protobuf-es alone would take "0x10" or " 12".
    const broken = int64RuleBroken(ClientFrameSchema, json);
    if (broken) return { ok: false, form, reason: broken };
    return { ok: true, frame: fromJson(ClientFrameSchema, json as JsonValue), form };
  } catch (err) {
    return { ok: false, form, reason: err instanceof Error ? err.message : "undecodable frame" };
  }
}

export function encodeServerFrame(frame: ServerFrame, form: FrameForm): string | Uint8Array {
  return form === "binary" ? toBinary(ServerFrameSchema, frame) : JSON.stringify(toJson(ServerFrameSchema, frame));
}

/** A frame built once for many sockets, encoded at most once per form. */
export interface PushFrame {
  encoded(form: FrameForm): string | Uint8Array;
}

/**
 * An UPDATE frame for every socket of a user, encoded lazily at most once per form. The update
 * arrives from the engine already in proto3 JSON, so the text form wraps it without decoding;
 * only a binary socket pays for building the message.
 */
export class UpdateFrame implements PushFrame {
  private json?: string;
  private binary?: Uint8Array;
  constructor(
    private readonly requestId: bigint,
    private readonly update: JsonObject,
  ) {}

  encoded(form: FrameForm): string | Uint8Array {
    if (form === "json") {
      return (this.json ??= JSON.stringify({ requestId: String(this.requestId), type: "SERVER_FRAME_TYPE_UPDATE", update: this.update }));
    }
    return (this.binary ??= toBinary(
      ServerFrameSchema,
      create(ServerFrameSchema, { requestId: this.requestId, type: ServerFrameType.UPDATE, payload: { case: "update", value: fromJson(UpdateSchema, this.update) } }),
    ));
  }
}

/** How many bytes the varint of a non-negative 32-bit value takes. */
function varintLength(value: number): number {
  let length = 1;
  for (; value >= 0x80; value >>>= 7) length += 1;
  return length;
}

/** Writes the varint of a non-negative 32-bit value at `at`; answers where it ends. */
function writeVarint(bytes: Uint8Array, at: number, value: number): number {
  for (; value >= 0x80; value >>>= 7) bytes[at++] = (value & 0x7f) | 0x80;
  bytes[at++] = value;
  return at;
}

// Protobuf keys (field number << 3 | wire type) of the fields the splice writes.
const serverFrameUpdateKey = (11 << 3) | 2;
const updateSnUpdateKey = (10 << 3) | 2;
const snUpdateSnKey = (1 << 3) | 0;

/**
 * The UPDATE frames of one stream entry for all its recipients: the update is encoded once per
 * form, without sn, and each recipient's frame is that encoding with its sn put in.
 * - JSON: the text before and after the sn's digits.
 * - Binary: protobuf-es writes fields in field-number order, so a ServerFrame is
 *   [request_id, type][key 11][length][Update: users, groups][key 10][length][SnUpdate: sn, entry];
 *   the sn is SnUpdate's first field, and only it and the two lengths around it depend on the sn
 *   (its varint takes 1 to 5 bytes). The parts are kept and the frame is assembled per sn.
 */
export class SequencedFrames {
  private json?: { before: string; after: string };
  private binary?: { head: Uint8Array; related: Uint8Array; entry: Uint8Array };

  /** `update` is the Update's JSON whose snUpdate has no sn. */
  constructor(
    private readonly requestId: bigint,
    private readonly update: JsonObject,
  ) {}

  /** The frame of the recipient whose stream holds the entry at `sn`. */
  withSn(sn: number): PushFrame {
    return new FrameWithSn(this, sn);
  }

  jsonWithSn(sn: number): string {
    if (!this.json) {
      const { snUpdate, ...related } = this.update;
      const relatedText = Object.entries(related)
        .map(([key, value]) => `${JSON.stringify(key)}:${JSON.stringify(value)},`)
        .join("");
      const entryText = JSON.stringify(snUpdate ?? {}).slice(1);
      this.json = {
        before: `{"requestId":"${this.requestId}","type":"SERVER_FRAME_TYPE_UPDATE","update":{${relatedText}"snUpdate":{"sn":`,
        after: `${entryText === "}" ? "" : ","}${entryText}}}`,
      };
    }
    return this.json.before + String(sn) + this.json.after;
  }

  binaryWithSn(sn: number): Uint8Array {
    if (!this.binary) {
      const update = fromJson(UpdateSchema, this.update);
      const entry = update.update.case === "snUpdate" ? update.update.value : create(SnUpdateSchema);
      entry.sn = 0;
      this.binary = {
        head: toBinary(ServerFrameSchema, create(ServerFrameSchema, { requestId: this.requestId, type: ServerFrameType.UPDATE })),
        related: toBinary(UpdateSchema, create(UpdateSchema, { users: update.users, groups: update.groups })),
        entry: toBinary(SnUpdateSchema, entry),
      };
    }
    const { head, related, entry } = this.binary;
    // Written in place: a group message builds this once per recipient. From Node's buffer pool:
    // a typed array of its own over 64 bytes is an allocation outside the heap, which took most
    // of the frame's time.
    const snUpdateLength = 1 + varintLength(sn) + entry.length;
    const updateLength = related.length + 1 + varintLength(snUpdateLength) + snUpdateLength;
    const frame = Buffer.allocUnsafe(head.length + 1 + varintLength(updateLength) + updateLength);
    frame.set(head);
    let at = head.length;
    frame[at++] = serverFrameUpdateKey;
    at = writeVarint(frame, at, updateLength);
    frame.set(related, at);
    at += related.length;
    frame[at++] = updateSnUpdateKey;
    at = writeVarint(frame, at, snUpdateLength);
    frame[at++] = snUpdateSnKey;
    at = writeVarint(frame, at, sn);
    frame.set(entry, at);
    return frame;
  }
}

/** One recipient's frame of a SequencedFrames, encoded at most once per form. */
class FrameWithSn implements PushFrame {
  private json?: string;
  private binary?: Uint8Array;

  constructor(
    private readonly frames: SequencedFrames,
    private readonly sn: number,
  ) {}

  encoded(form: FrameForm): string | Uint8Array {
    return form === "json" ? (this.json ??= this.frames.jsonWithSn(this.sn)) : (this.binary ??= this.frames.binaryWithSn(this.sn));
  }
}
