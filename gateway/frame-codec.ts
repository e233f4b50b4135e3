// Frames on the wire: a text frame is the JSON form of a ClientFrame/ServerFrame, a binary frame
// its protobuf form. The server answers each connection in the form of its first frame.
import { fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf";
import { ClientFrameSchema, ServerFrameSchema, type ClientFrame, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";

export type FrameForm = "json" | "binary";

export type Decoded = { ok: true; frame: ClientFrame; form: FrameForm } | { ok: false; form: FrameForm; reason: string };

export function decodeClientFrame(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): Decoded {
  const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
  const form: FrameForm = isBinary ? "binary" : "json";
  try {
    const frame = isBinary ? fromBinary(ClientFrameSchema, bytes) : fromJson(ClientFrameSchema, JSON.parse(bytes.toString("utf8")));
    return { ok: true, frame, form };
  } catch (err) {
    return { ok: false, form, reason: err instanceof Error ? err.message : "undecodable frame" };
  }
}

export function encodeServerFrame(frame: ServerFrame, form: FrameForm): string | Uint8Array {
  return form === "binary" ? toBinary(ServerFrameSchema, frame) : JSON.stringify(toJson(ServerFrameSchema, frame));
}

/** Encodes one frame lazily in each form, at most once per form, for fan-out to many sockets. */
export class SharedFrame {
  private json?: string;
  private binary?: Uint8Array;
  constructor(readonly frame: ServerFrame) {}

  encoded(form: FrameForm): string | Uint8Array {
    if (form === "binary") return (this.binary ??= toBinary(ServerFrameSchema, this.frame));
    return (this.json ??= JSON.stringify(toJson(ServerFrameSchema, this.frame)));
  }
}
