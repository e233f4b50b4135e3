// gRPC and gRPC-Web carry an RPC's outcome in trailers: grpc-status, grpc-message and
// grpc-status-details-bin, a google.rpc.Status whose `details` hold the shared.v1.ErrorDetail
// exactly as a Connect error body's `details` do (gRPC-Web sends the trailers as a last body frame
// flagged 0x80). Connect-ES writes them from the ConnectError a call ends with: errors our
// interceptor saw already carry their ErrorDetail (api/errors.ts); the ones Connect-ES raises
// before our code runs (an undecodable body, the size limit, a bad grpc-timeout, compression) get
// theirs here, chosen as for Connect answers, so every error reaches every client the same way.
import { Code, ConnectError } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import {
  contentTypeRegExp as grpcContentType,
  findTrailerError,
  parseContentType as parseGrpcContentType,
  contentTypeJson as grpcJson,
  contentTypeProto as grpcProto,
  setTrailerStatus,
} from "@connectrpc/connect/protocol-grpc";
import {
  contentTypeRegExp as grpcWebContentType,
  parseContentType as parseGrpcWebContentType,
  contentTypeJson as grpcWebJson,
  contentTypeProto as grpcWebProto,
  trailerFlag,
  trailerParse,
  trailerSerialize,
} from "@connectrpc/connect/protocol-grpc-web";
import type { UniversalServerResponse } from "@connectrpc/connect/protocol";
import { connectErrorOf, isUndecodableBody, protocolErrorEntry } from "./errors.js";

/** Which protocol a request speaks, by its Content-Type: Connect-ES answers each in its own form. */
export type RpcProtocol = "connect" | "grpc" | "grpc-web";

export function protocolOf(contentType: string | null | undefined): RpcProtocol {
  if (!contentType) return "connect";
  // Tested first: application/grpc is a prefix of application/grpc-web.
  if (grpcWebContentType.test(contentType)) return "grpc-web";
  if (grpcContentType.test(contentType)) return "grpc";
  return "connect";
}

const statusTrailers = ["grpc-status", "grpc-message", "grpc-status-details-bin"];

/**
 * grpc-message as the gRPC spec percent-encodes it: only bytes outside printable ASCII, and "%".
 * Connect-ES encodes with encodeURIComponent, which also escapes ":", "," or "/"; grpc-js decodes
 * with decodeURI, which leaves those escaped, so its users would read "field%3A must be …".
 */
export function grpcMessage(message: string): string {
  let encoded = "";
  for (const byte of new TextEncoder().encode(message)) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return encoded;
}

/** Writes the status trailers of `error` (with its details) into `target`, grpc-message as the spec encodes it. */
function setGrpcStatus(target: Headers, error: ConnectError): Headers {
  setTrailerStatus(target, error);
  target.set("grpc-message", grpcMessage(error.rawMessage));
  return target;
}

/**
 * The trailers of a finished gRPC call with an ErrorDetail in every error status, and the status
 * as the metrics count it ("ok", "not_found", …). Trailers of a success are returned as they are.
 */
export function detailedGrpcTrailer(trailer: Headers): { trailer: Headers; code: string } {
  const error = findTrailerError(trailer);
  if (!error) return { trailer, code: trailer.has("grpc-status") ? "ok" : "unknown" };
  let detailed: ConnectError;
  if (error.details.length > 0) {
    // Rebuilt without the metadata findTrailerError puts in (the trailers themselves), only for grpc-message.
    detailed = new ConnectError(error.rawMessage, error.code);
    detailed.details = error.details;
  } else {
    const code = isUndecodableBody(error.code, error.rawMessage) ? Code.InvalidArgument : error.code;
    detailed = connectErrorOf(protocolErrorEntry(code), {}, error.rawMessage);
  }
  const fixed = new Headers(trailer);
  for (const name of statusTrailers) fixed.delete(name);
  return { trailer: setGrpcStatus(fixed, detailed), code: codeToString(detailed.code) };
}

/**
 * A whole gRPC-Web response body with its trailer frame given an ErrorDetail as detailedGrpcTrailer
 * does, and the status as the metrics count it. A body without a readable trailer frame (none, cut
 * short, compressed: we accept no compression, so never ours) is returned as it is.
 */
export function detailedGrpcWebBody(body: Uint8Array): { body: Uint8Array; code: string } {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  for (let offset = 0; offset + 5 <= body.byteLength; ) {
    const flags = body[offset];
    const end = offset + 5 + view.getUint32(offset + 1);
    if (end > body.byteLength) break;
    if (flags === trailerFlag) {
      const original = trailerParse(body.subarray(offset + 5, end));
      const { trailer, code } = detailedGrpcTrailer(original);
      if (trailer === original) return { body, code };
      const frame = encodeEnvelope(trailerFlag, trailerSerialize(trailer));
      return { body: Buffer.concat([body.subarray(0, offset), frame, body.subarray(end)]), code };
    }
    offset = end;
  }
  return { body, code: "unknown" };
}

/**
 * The answer refusing a gRPC or gRPC-Web call before any procedure runs (no such procedure, an
 * invalid Host): status 200 and the error, with its ErrorDetail, in the trailers, in the message
 * format (proto or JSON) the request named.
 */
export function grpcRefusal(protocol: Exclude<RpcProtocol, "connect">, requestContentType: string, error: ConnectError): UniversalServerResponse {
  if (protocol === "grpc") {
    const binary = parseGrpcContentType(requestContentType)?.binary ?? true;
    return { status: 200, header: new Headers({ "content-type": binary ? grpcProto : grpcJson }), trailer: setGrpcStatus(new Headers(), error) };
  }
  const binary = parseGrpcWebContentType(requestContentType)?.binary ?? true;
  const frame = encodeEnvelope(trailerFlag, trailerSerialize(setGrpcStatus(new Headers(), error)));
  return { status: 200, header: new Headers({ "content-type": binary ? grpcWebProto : grpcWebJson }), body: oneChunk(frame) };
}

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}

/** The status headers of `error` as a gRPC answer carries them (for answers written outside Connect-ES, such as nginx's). */
export function grpcStatusHeaders(error: ConnectError): Headers {
  return setGrpcStatus(new Headers(), error);
}
