// Every error leaves the API as a Connect error carrying exactly one shared.v1.ErrorDetail.
import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromString, codeToHttpStatus, codeToString, errorToJson } from "@connectrpc/connect/protocol-connect";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors, catalogueEntryForCode, parleyErrorParts, withRetryDelay, type CatalogueEntry } from "../shared/errors.js";

export function connectErrorOf(entry: CatalogueEntry, metadata: Record<string, string> = {}, message?: string): ConnectError {
  const detail = create(ErrorDetailSchema, { errorCode: entry.errorCode, errorName: entry.errorName, metadata: withRetryDelay(entry, metadata) });
  return new ConnectError(message ?? entry.message, entry.code, undefined, [{ desc: ErrorDetailSchema, value: detail }]);
}

/**
 * The catalogue entry of whatever an engine call threw: its own for business errors, UNAVAILABLE
 * when the engine cannot be reached, INTERNAL (logged) for anything else.
 */
export function errorPartsOf(err: unknown, log: (message: string, err: unknown) => void): { entry: CatalogueEntry; metadata: Record<string, string>; message: string } {
  const parts = parleyErrorParts(err);
  if (parts) return parts;
  const name = (err as { name?: string } | null)?.name;
  // No engine took the call: nothing of it was applied.
  if (name === "ServiceNotAvailableError" || name === "ServiceNotFoundError") return { entry: Errors.unavailable, metadata: { reason: "NO_ENGINE" }, message: Errors.unavailable.message };
  // The engine did not answer in time: the call may or may not have taken effect.
  if (name === "RequestTimeoutError") return { entry: Errors.unavailable, metadata: { reason: "ENGINE_TIMEOUT" }, message: Errors.unavailable.message };
  // The engine node serving the call left the cluster (killed, or partitioned away) before it
  // answered: the call may or may not have taken effect, as after a timeout.
  if (name === "RequestRejectedError") return { entry: Errors.unavailable, metadata: { reason: "ENGINE_NODE_LOST" }, message: "the node serving this call left before answering; try again" };
  log("unexpected error while serving a request", err);
  return { entry: Errors.internal, metadata: {}, message: Errors.internal.message };
}

/** Turns whatever a handler threw into the Connect error the client sees. */
export function toConnectError(err: unknown, log: (message: string, err: unknown) => void): ConnectError {
  if (err instanceof ConnectError) {
    if (err.findDetails(ErrorDetailSchema).length > 0) return err;
    return connectErrorOf(catalogueEntryForCode(err.code), {}, err.rawMessage);
  }
  const { entry, metadata, message } = errorPartsOf(err, log);
  return connectErrorOf(entry, metadata, message);
}

/** The `details` of a Connect error body in JSON: the one ErrorDetail, with its JSON form as `debug`. */
export function errorDetailsJson(entry: CatalogueEntry, metadata: Record<string, string> = {}): unknown[] {
  const detail = create(ErrorDetailSchema, { errorCode: entry.errorCode, errorName: entry.errorName, metadata: withRetryDelay(entry, metadata) });
  return [{ type: ErrorDetailSchema.typeName, value: base64Encode(toBinary(ErrorDetailSchema, detail), "std_raw"), debug: toJson(ErrorDetailSchema, detail) }];
}

/** A whole Connect error body in JSON, for answers written outside Connect (downloads, refused requests). */
export function errorBodyJson(entry: CatalogueEntry, metadata: Record<string, string> = {}, message = entry.message): string {
  return JSON.stringify({ code: codeToString(entry.code), message, details: errorDetailsJson(entry, metadata) });
}

/** A Connect error body in JSON, as Connect writes it (errorToJson) and as clients read it. */
export interface ConnectErrorJson {
  code?: string;
  message?: string;
  details?: unknown[];
}

/**
 * Connect answers some failures itself before any of our code runs (undecodable bodies, bodies
 * over the size limit, unsupported content types, unknown methods). Those error bodies get their
 * ErrorDetail here, so clients identify every error the same way. Connect reports an undecodable
 * protobuf body as `internal`; it is the client's fault, so it becomes `invalid_argument` (400).
 * Returns the body to send and whether it differs from the one given.
 */
export function normalizeErrorJson(status: number, error: ConnectErrorJson): { status: number; json: ConnectErrorJson; code: string; changed: boolean } {
  let parsed = error;
  let changed = false;
  if (parsed.code === "internal" && isUndecodableBody(Code.Internal, parsed.message)) {
    parsed = { code: "invalid_argument", message: parsed.message };
    status = 400;
    changed = true;
  }
  if (!parsed.code || (parsed.details && parsed.details.length > 0)) return { status, json: parsed, code: parsed.code ?? "unknown", changed };
  const entry = protocolErrorEntry(codeFromString(parsed.code) ?? Code.Internal);
  parsed.details = errorDetailsJson(entry);
  parsed.message ??= entry.message;
  return { status, json: parsed, code: parsed.code, changed: true };
}

/**
 * The catalogue entry of an error Connect-ES raised itself, before our code ran: the request could
 * not be read (invalid_argument), was too large (resource_exhausted), or a generic entry of the code.
 */
export function protocolErrorEntry(code: Code): CatalogueEntry {
  if (code === Code.InvalidArgument) return Errors.malformedRequest;
  if (code === Code.ResourceExhausted) return Errors.requestTooLarge;
  return catalogueEntryForCode(code);
}

/** Whether Connect-ES's error says a protobuf body could not be decoded, which it reports as internal. */
export function isUndecodableBody(code: Code, message: string | undefined): boolean {
  return code === Code.Internal && message?.startsWith("parse binary:") === true;
}

/** normalizeErrorJson for an error body in bytes, as Connect-ES hands it over; a body that is not JSON stays as it is. */
export function normalizeErrorBody(status: number, body: Uint8Array): { status: number; body: Uint8Array; code: string } {
  let parsed: ConnectErrorJson;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body)) as ConnectErrorJson;
  } catch {
    return { status, body, code: "unknown" };
  }
  const normalized = normalizeErrorJson(status, parsed);
  return { status: normalized.status, body: normalized.changed ? new TextEncoder().encode(JSON.stringify(normalized.json)) : body, code: normalized.code };
}

/**
 * The status, body and code of the answer Connect-ES gives a ConnectError in a unary RPC, with the
 * normalization above: the lean unary path answers with it (api/lean-unary.ts).
 */
export function connectErrorAnswer(error: ConnectError): { status: number; body: Uint8Array; code: string } {
  const normalized = normalizeErrorJson(codeToHttpStatus(error.code), errorToJson(error, undefined) as ConnectErrorJson);
  return { status: normalized.status, body: Buffer.from(JSON.stringify(normalized.json)), code: normalized.code };
}

/** Reads the ErrorDetail of a Connect error (for tests and clients of our own). */
export function errorDetailOf(err: ConnectError) {
  return err.findDetails(ErrorDetailSchema)[0] ?? fromBinary(ErrorDetailSchema, new Uint8Array());
}
