// Frames on the wire: a text frame is the JSON form of a ClientFrame/ServerFrame, a binary frame
// its protobuf form. The server answers each connection in the form of its first frame.
import { create, fromBinary, fromJson, toBinary, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ClientFrameSchema, ServerFrameSchema, ServerFrameType, type ClientFrame, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { UpdateSchema } from "../shared/gen/api/v1/updates_pb.js";
import { int64RuleBroken } from "../shared/strict-json.js";

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

/**
 * An UPDATE frame for every socket of a user, encoded lazily at most once per form. The update
 * arrives from the engine already in proto3 JSON, so the text form wraps it without decoding;
 * only a binary socket pays for building the message.
 */
export class PushFrame {
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
