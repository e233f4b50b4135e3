// The lean Connect unary path. Connect-ES costs about a third of a trivial RPC in machinery the
// unary protocol does not need (an AbortSignal and DOMExceptions per request, Headers objects,
// async iterables, a parsed URL). This file speaks the Connect unary protocol (JSON and binary
// protobuf, POST) over any HTTP front: the front reads the head, asks whether the request is
// ours, sends the refusals this file gives before the body, reads the body within the limit, and
// hands the whole request over. gRPC and gRPC-Web stay with Connect-ES (api-service.ts).
//
// Every answer is the one Connect-ES gives as api-service.ts configures it (no compression, no
// Connect-Protocol-Version requirement, strict JSON, readMaxBytes), after api/errors.ts adds the
// ErrorDetail: status, headers and body bytes. test/lean-rpc-wire.test.ts sends the same corpus
// through both and fails if they ever differ. The order of the checks below is Connect-ES's.
import { fromBinary, fromJsonString, toBinary, toJsonString, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { contentTypeRegExp as grpcContentType } from "@connectrpc/connect/protocol-grpc";
import { contentTypeRegExp as grpcWebContentType } from "@connectrpc/connect/protocol-grpc-web";
import { rpcDuration, rpcRequests } from "../shared/metrics.js";
import { strictJsonDecoder } from "../shared/strict-json.js";
import { fromWire, wireIsCanonicalJson, type WireMessage } from "../shared/wire.js";
import { connectErrorAnswer, normalizeErrorBody, toConnectError } from "./errors.js";
import type { Procedure, RequestFacts } from "./rpc.js";

/** One whole HTTP request, as a front hands it over once its body is read. */
export interface UnaryHttpRequest {
  /** As received, e.g. "POST". */
  method: string;
  /** Without the query, e.g. "/api.v1.UserService/GetProfile". */
  path: string;
  /** The raw query without "?", "" when none (Connect reads it only for GET, which no procedure of ours allows). */
  query: string;
  /** Lower-case names, as node's req.headers has them (repeated headers joined with ", "). */
  headers: Record<string, string | undefined>;
  /** The whole body, already read. */
  body: Uint8Array;
  /** The client address, trusted proxies already applied. */
  clientIp: string;
  host: string;
}

/** The answer to send: exactly these headers (lower-case names) and this body. */
export interface UnaryHttpResponse {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

/** What decides, before the body is read, how a request is answered. */
export type UnaryHttpHead = Pick<UnaryHttpRequest, "method" | "path" | "headers">;

/** Connect's unary content types (its contentTypeUnaryRegExp), with the binary one captured. */
const unaryContentType = /^application\/(?:json(?:; ?charset=utf-?8)?|(proto))$/i;
/** Connect's connect-timeout-ms syntax; a valid deadline changes nothing here (our procedures do not watch one). */
const timeoutSyntax = /^\d{1,10}$/;
const emptyBody = new Uint8Array(0);
const jsonReadOptions = { ignoreUnknownFields: false };

interface Route {
  readonly procedure: Procedure;
  readonly input: DescMessage;
  readonly output: DescMessage;
  readonly jsonDecoder: { decode(bytes: Uint8Array): string };
  /** Whether a JSON answer is the engine's wire form as it is (shared/wire.ts), with no conversion. */
  readonly answerWireAsJson: boolean;
  readonly okLabels: { procedure: string; code: string };
  readonly procedureLabels: { procedure: string };
}

export interface UnaryRpcOptions {
  /** Largest request body accepted, as Connect-ES's readMaxBytes. */
  maxRequestBytes: number;
  /** Where internal errors are reported (the message, then the error). */
  log: (message: string, err: unknown) => void;
}

/** What the head of a request decides: how to read its body, or the answer it gets unread. */
type Verdict = { route: Route; binary: boolean; lengthHint: number | undefined } | UnaryHttpResponse;

export class UnaryRpcHandler {
  private readonly routes = new Map<string, Route>();
  private readonly unknownLabels = { procedure: "unknown" };

  constructor(
    procedures: Iterable<Procedure>,
    private readonly options: UnaryRpcOptions,
  ) {
    for (const procedure of procedures) {
      const { method } = procedure;
      // Connect-ES serves these with GET as well, from the query: not done here.
      if (method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS) {
        throw new Error(`${method.parent.typeName}.${method.name} has no side effects; the lean unary path does not serve Connect GET requests`);
      }
      const path = `/${method.parent.typeName}/${method.name}`;
      this.routes.set(path, {
        procedure,
        input: method.input,
        output: method.output,
        jsonDecoder: strictJsonDecoder(method.input),
        answerWireAsJson: wireIsCanonicalJson(method.output),
        okLabels: { procedure: path, code: "ok" },
        procedureLabels: { procedure: path },
      });
    }
  }

  /**
   * Whether this path answers the request (a Connect unary call, or a refusal Connect-ES would
   * make: unknown procedure, method other than POST, unsupported content type), or it must go
   * to Connect-ES's universal handler (gRPC: application/grpc*, gRPC-Web: application/grpc-web*).
   */
  servesLean(method: string, path: string, contentType: string | undefined): boolean {
    if (method !== "POST" || contentType === undefined || !this.routes.has(path)) return true;
    if (unaryContentType.test(contentType)) return true;
    return !grpcContentType.test(contentType) && !grpcWebContentType.test(contentType);
  }

  /**
   * The answer a request gets before its body is read, if any: unknown procedure (404), method
   * (405), content type (415), compression (501), connect-timeout-ms syntax, or a Content-Length
   * over the limit (429). A front sends it without reading the body, then reads past it.
   */
  answerBeforeBody(head: UnaryHttpHead, startedAt = performance.now()): UnaryHttpResponse | undefined {
    const verdict = this.inspect(head, startedAt);
    return "status" in verdict ? verdict : undefined;
  }

  /**
   * The answer to a body that grew past maxRequestBytes while being read (no Content-Length
   * announced it): the front sends it at once and keeps none of the rest, which it reads past
   * (discarding it) so that a client still sending reads the answer (edge/node-front.ts).
   */
  bodyTooLarge(path: string, startedAt = performance.now()): UnaryHttpResponse {
    const route = this.routes.get(path);
    return this.protocolError(route, new ConnectError(`message size is larger than configured readMaxBytes ${this.options.maxRequestBytes}`, Code.ResourceExhausted), startedAt);
  }

  /** Serves one whole request; rejects only a request that servesLean sends to Connect-ES. */
  async serve(request: UnaryHttpRequest, startedAt = performance.now()): Promise<UnaryHttpResponse> {
    const verdict = this.inspect(request, startedAt);
    if ("status" in verdict) return verdict;
    const { route, binary, lengthHint } = verdict;
    const { body } = request;
    if (lengthHint !== undefined && body.byteLength !== lengthHint) {
      return this.protocolError(route, new ConnectError(`protocol error: promised ${lengthHint} bytes, received ${body.byteLength}`, Code.InvalidArgument), startedAt);
    }
    if (body.byteLength > this.options.maxRequestBytes) return this.bodyTooLarge(request.path, startedAt);

    let message: MessageShape<DescMessage>;
    try {
      message = binary ? parseBinary(route.input, body) : parseJson(route, body);
    } catch (err) {
      return this.protocolError(route, err, startedAt);
    }

    const facts: RequestFacts = { authorization: request.headers.authorization, clientIp: request.clientIp, host: request.host };
    let wire: WireMessage | undefined;
    let answer: MessageShape<DescMessage> | undefined;
    try {
      wire = await route.procedure.forward(message, facts);
      if (binary || !route.answerWireAsJson) answer = fromWire(route.output, wire);
    } catch (err) {
      return this.errorAnswer(route, toConnectError(err, this.options.log), startedAt);
    }

    let bytes: Uint8Array;
    try {
      if (answer === undefined) bytes = Buffer.from(JSON.stringify(wire ?? {}));
      else bytes = binary ? serializeBinary(route.output, answer) : serializeJson(route.output, answer);
    } catch (err) {
      return this.protocolError(route, err, startedAt);
    }
    rpcRequests.inc(route.okLabels);
    rpcDuration.observe(route.procedureLabels, (performance.now() - startedAt) / 1000);
    return { status: 200, headers: { "content-length": String(bytes.byteLength), "content-type": binary ? "application/proto" : "application/json" }, body: bytes };
  }

  /** The head checks, in Connect-ES's order; a refusal comes back as the answer to send. */
  private inspect(head: UnaryHttpHead, startedAt: number): Verdict {
    const route = this.routes.get(head.path);
    if (!route) return this.unknownProcedure(head.path, startedAt);
    if (head.method !== "POST") return this.bare(route, 405, startedAt);
    const { headers } = head;
    const contentType = unaryContentType.exec(headers["content-type"] ?? "");
    if (!contentType) {
      if (!this.servesLean(head.method, head.path, headers["content-type"])) throw new Error(`a ${headers["content-type"]} request goes to Connect-ES, not to the lean unary path`);
      return this.bare(route, 415, startedAt);
    }
    const encoding = headers["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") {
      // Connect-ES accepts no compression as we configure it, and says so in Accept-Encoding.
      const error = new ConnectError(`unknown compression "${encoding}": supported encodings are `, Code.Unimplemented, { "accept-encoding": "" });
      return this.protocolError(route, error, startedAt);
    }
    const timeout = headers["connect-timeout-ms"];
    if (timeout !== undefined && !timeoutSyntax.test(timeout)) {
      return this.protocolError(route, new ConnectError(`protocol error: invalid connect timeout value: ${timeout}`, Code.InvalidArgument), startedAt);
    }
    const lengthHint = parseLengthHint(headers["content-length"]);
    if (lengthHint !== undefined && lengthHint > this.options.maxRequestBytes) {
      const error = new ConnectError(`message size ${lengthHint} is larger than configured readMaxBytes ${this.options.maxRequestBytes}`, Code.ResourceExhausted);
      return this.protocolError(route, error, startedAt);
    }
    return { route, binary: contentType[1] !== undefined, lengthHint };
  }

  /** api-service.ts's own answer for a path that names no procedure of ours. */
  private unknownProcedure(path: string, startedAt: number): UnaryHttpResponse {
    const body = JSON.stringify({ code: "unimplemented", message: `no such procedure: ${path}` });
    const normalized = normalizeErrorBody(404, Buffer.from(body));
    this.count(this.unknownLabels, "unimplemented", startedAt);
    return { status: 404, headers: { "content-type": "application/json" }, body: normalized.body };
  }

  /** Connect-ES's refusals of a method or content type: a status with an empty body. */
  private bare(route: Route, status: number, startedAt: number): UnaryHttpResponse {
    this.count(route.procedureLabels, "unknown", startedAt);
    return { status, headers: { "content-length": "0" }, body: emptyBody };
  }

  /** An error Connect-ES raises itself (protocol, decoding, limits), outside our interceptor. */
  private protocolError(route: Route | undefined, error: unknown, startedAt: number): UnaryHttpResponse {
    return this.errorAnswer(route, error instanceof ConnectError ? error : new ConnectError("internal error", Code.Internal, undefined, undefined, error), startedAt);
  }

  private errorAnswer(route: Route | undefined, error: ConnectError, startedAt: number): UnaryHttpResponse {
    const { status, body, code } = connectErrorAnswer(error);
    this.count(route?.procedureLabels ?? this.unknownLabels, code, startedAt);
    return { status, headers: errorHeaders(error, body.byteLength), body };
  }

  private count(labels: { procedure: string }, code: string, startedAt: number): void {
    rpcRequests.inc({ procedure: labels.procedure, code });
    rpcDuration.observe(labels, (performance.now() - startedAt) / 1000);
  }
}

/** Connect's Content-Length hint: a whole non-negative safe integer, otherwise none. */
function parseLengthHint(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const length = parseInt(value, 10);
  return Number.isSafeInteger(length) && length >= 0 ? length : undefined;
}

function parseBinary(schema: DescMessage, body: Uint8Array): MessageShape<DescMessage> {
  try {
    return fromBinary(schema, body);
  } catch (err) {
    throw new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.Internal);
  }
}

/** As Connect-ES decodes JSON for us: strict UTF-8 and int64 (shared/strict-json.ts), then protobuf-es. */
function parseJson(route: Route, body: Uint8Array): MessageShape<DescMessage> {
  try {
    return fromJsonString(route.input, route.jsonDecoder.decode(body), jsonReadOptions);
  } catch (err) {
    throw ConnectError.from(err, Code.InvalidArgument);
  }
}

function serializeBinary(schema: DescMessage, message: MessageShape<DescMessage>): Uint8Array {
  try {
    return toBinary(schema, message);
  } catch (err) {
    throw new ConnectError(`serialize binary: ${err instanceof Error ? err.message : String(err)}`, Code.Internal);
  }
}

function serializeJson(schema: DescMessage, message: MessageShape<DescMessage>): Uint8Array {
  try {
    return Buffer.from(toJsonString(schema, message));
  } catch (err) {
    throw ConnectError.from(err, Code.Internal);
  }
}

/**
 * The headers of an error answer as Connect-ES writes them: JSON, the error's metadata, the
 * length; names in Headers' (sorted) order.
 */
function errorHeaders(error: ConnectError, length: number): Record<string, string> {
  if (error.metadata.keys().next().done) return { "content-length": String(length), "content-type": "application/json" };
  const header = new Headers({ "content-type": "application/json" });
  error.metadata.forEach((value, name) => header.set(name, value));
  header.set("content-length", String(length));
  const headers: Record<string, string> = {};
  header.forEach((value, name) => (headers[name] = value));
  return headers;
}
