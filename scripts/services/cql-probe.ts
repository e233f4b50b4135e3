// A CQL readiness probe without a driver: the native protocol's OPTIONS request, answered by
// SUPPORTED (opcode 6) with the server's CQL and protocol versions. A server answers it before
// STARTUP and before authentication, so an answer means the CQL port is really serving.
// Frame header (protocol v4): version, flags, stream (int16), opcode, body length (int32).
import { connect } from "node:net";

const protocolV4 = 0x04;
const responseBit = 0x80;
const opcodeError = 0x00;
const opcodeOptions = 0x05;
const opcodeSupported = 0x06;
const headerLength = 9;

/** What a CQL server reports it supports, e.g. CQL_VERSION ["3.4.7"], PROTOCOL_VERSIONS [...]. */
export type CqlSupported = Map<string, string[]>;

/** The bytes of an OPTIONS request on stream 0. */
export function optionsFrame(): Buffer {
  return Buffer.from([protocolV4, 0, 0, 0, opcodeOptions, 0, 0, 0, 0]);
}

/** The body length of a complete response frame at the start of `bytes`, or undefined if more bytes are needed. */
function completeFrameLength(bytes: Buffer): number | undefined {
  if (bytes.length < headerLength) return undefined;
  const total = headerLength + bytes.readInt32BE(5);
  return bytes.length >= total ? total : undefined;
}

/** Decodes a SUPPORTED response ([string multimap] body); an ERROR response or any other opcode throws. */
export function decodeSupported(frame: Buffer): CqlSupported {
  if ((frame[0] & responseBit) === 0) throw new Error("the CQL answer is not a response frame");
  const opcode = frame[4];
  const body = frame.subarray(headerLength, headerLength + frame.readInt32BE(5));
  if (opcode === opcodeError) {
    const message = body.subarray(6, 6 + body.readUInt16BE(4)).toString("utf8");
    throw new Error(`the CQL server answered ERROR 0x${body.readInt32BE(0).toString(16)}: ${message}`);
  }
  if (opcode !== opcodeSupported) throw new Error(`the CQL server answered opcode ${opcode}, not SUPPORTED`);
  let offset = 0;
  const readString = (): string => {
    const length = body.readUInt16BE(offset);
    const value = body.subarray(offset + 2, offset + 2 + length).toString("utf8");
    offset += 2 + length;
    return value;
  };
  const supported: CqlSupported = new Map();
  const keys = body.readUInt16BE(offset);
  offset += 2;
  for (let k = 0; k < keys; k++) {
    const key = readString();
    const values: string[] = [];
    const count = body.readUInt16BE(offset);
    offset += 2;
    for (let v = 0; v < count; v++) values.push(readString());
    supported.set(key, values);
  }
  return supported;
}

/** Sends OPTIONS to host:port and resolves with the SUPPORTED answer; rejects on refusal, ERROR or timeout. */
export function probeCql(host: string, port: number, timeoutMs = 2_000): Promise<CqlSupported> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let received = Buffer.alloc(0);
    const finish = (error: Error | undefined, supported?: CqlSupported): void => {
      socket.destroy();
      if (error) reject(error);
      else resolve(supported as CqlSupported);
    };
    socket.setTimeout(timeoutMs, () => finish(new Error(`no CQL answer from ${host}:${port} within ${timeoutMs} ms`)));
    socket.on("error", (error) => finish(error));
    socket.on("connect", () => socket.write(optionsFrame()));
    socket.on("data", (chunk) => {
      received = Buffer.concat([received, chunk]);
      const length = completeFrameLength(received);
      if (length === undefined) return;
      try {
        finish(undefined, decodeSupported(received.subarray(0, length)));
      } catch (error) {
        finish(error as Error);
      }
    });
    socket.on("end", () => finish(new Error(`${host}:${port} closed the connection before answering OPTIONS`)));
  });
}
