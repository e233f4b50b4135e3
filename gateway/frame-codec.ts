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

/** Bytes of a varint. */
function varint(value: number): number[] {
  const bytes: number[] = [];
  for (; value >= 0x80; value >>>= 7) bytes.push((value & 0x7f) | 0x80);
  bytes.push(value);
  return bytes;
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
    let json: string | undefined;
    let binary: Uint8Array | undefined;
    return { encoded: (form) => (form === "json" ? (json ??= this.jsonWithSn(sn)) : (binary ??= this.binaryWithSn(sn))) };
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
    const snField = [snUpdateSnKey, ...varint(sn)];
    const snUpdateLength = snField.length + entry.length;
    const snUpdateHead = [updateSnUpdateKey, ...varint(snUpdateLength)];
    const updateLength = related.length + snUpdateHead.length + snUpdateLength;
    const updateHead = [serverFrameUpdateKey, ...varint(updateLength)];
    const frame = new Uint8Array(head.length + updateHead.length + updateLength);
    let at = 0;
    for (const part of [head, updateHead, related, snUpdateHead, snField, entry]) {
      frame.set(part, at);
      at += part.length;
    }
    return frame;
  }
}
