// The stateless API tier: a Moleculer service that serves the Connect protocol (JSON and binary
// protobuf) on the shared HTTP server and forwards each RPC to the engine action owning it.
// Connect unary requests take the lean path (api/lean-unary.ts); gRPC and gRPC-Web go through
// Connect-ES's router, on the main port (gRPC-Web over HTTP/1.1) and on the gRPC port
// (edge/grpc-front.ts, HTTP/2), where Connect-ES serves every protocol.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { BlockList } from "node:net";
import { createConnectRouter, createContextValues, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { ServiceBroker, ServiceSchema } from "moleculer";
import { Errors } from "../shared/errors.js";
import { addressList, resolveClientAddress } from "../shared/ip.js";
import { rpcDuration, rpcRequests } from "../shared/metrics.js";
import { strictJsonDecoder } from "../shared/strict-json.js";
import { connectErrorOf, errorBodyJson, normalizeErrorBody, toConnectError } from "./errors.js";
import { detailedGrpcTrailer, detailedGrpcWebBody, grpcRefusal, protocolOf } from "./grpc-status.js";
import { connectImplementation, requestFactsKey, type Procedure, type RequestFacts } from "./rpc.js";
import { UnaryRpcHandler, type UnaryHttpHead, type UnaryHttpRequest, type UnaryHttpResponse } from "./lean-unary.js";
import { agentProcedures } from "./services/agent.js";
import { authProcedures } from "./services/auth.js";
import { contactProcedures } from "./services/contact.js";
import { groupProcedures } from "./services/group.js";
import { conversationProcedures } from "./services/conversation.js";
import { mediaProcedures } from "./services/media.js";
import { messageProcedures } from "./services/message.js";
import { pushProcedures } from "./services/push.js";
import { syncProcedures } from "./services/sync.js";
import { userProcedures } from "./services/user.js";

/**
 * Largest request body accepted. UploadFile carries up to 5 MB of data: as base64 in JSON that is
 * 6,990,508 bytes plus names, well inside; data a little over 5 MB still arrives whole and gets
 * the media service's FILE_TOO_LARGE, while data past about 6 MB is refused here unread.
 */
export const maxRequestBytes = 8 * 1024 * 1024;

/** Every procedure of our services, each served through its route (api/services/). */
function allProcedures(broker: ServiceBroker): Procedure[] {
  return [
    ...authProcedures(broker),
    ...userProcedures(broker),
    ...pushProcedures(broker),
    ...syncProcedures(broker),
    ...contactProcedures(broker),
    ...agentProcedures(broker),
    ...conversationProcedures(broker),
    ...messageProcedures(broker),
    ...groupProcedures(broker),
    ...mediaProcedures(broker),
  ];
}

/**
 * Registers each procedure with Connect-ES on its own, so that its JSON requests are decoded for
 * its own input type (strict-json.ts).
 */
function registerWithConnect(router: ConnectRouter, procedures: readonly Procedure[]): void {
  for (const procedure of procedures) {
    // Strict decoding: an unknown field or enum name is a client bug to report, not to drop.
    // Connect passes jsonOptions whole to its JSON serialization, which also takes the body's
    // textDecoder from there (createJsonSerialization); the handler options' type omits that one.
    const jsonOptions = { ignoreUnknownFields: false, textDecoder: strictJsonDecoder(procedure.method.input) };
    router.rpc(procedure.method, connectImplementation(procedure), { jsonOptions });
  }
}

export interface ApiOptions {
  /** Proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES); empty trusts none. */
  trustedProxies?: readonly string[];
  /**
   * Whether Connect unary requests take the lean path (api/lean-unary.ts), as they do unless told;
   * false sends every RPC through Connect-ES, which test/lean-rpc-wire.test.ts compares it with.
   */
  leanUnary?: boolean;
}

function clientAddress(req: { headers: IncomingHttpHeaders; socket: { remoteAddress?: string } }, trustedProxies: BlockList | undefined): string {
  const forwarded = req.headers["x-forwarded-for"];
  return resolveClientAddress(req.socket.remoteAddress ?? "", Array.isArray(forwarded) ? forwarded.join(",") : forwarded, trustedProxies);
}

/** A procedure as Connect-ES serves it: for gRPC and gRPC-Web, which the lean path leaves to it. */
export type ConnectEsHandler = (request: Omit<UniversalServerRequest, "contextValues">, facts: Omit<RequestFacts, "authorization">) => Promise<UniversalServerResponse>;

export interface ApiHandle {
  /** Serves one HTTP request if it is a Connect RPC; answers false when the path is not ours. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /**
   * For other HTTP fronts, from the head of a request under /api.v1. (other paths are not the
   * API's) before its body is read: whether the lean unary path answers it (a Connect unary call,
   * an unknown procedure, or one of Connect's refusals) or it goes to `universal(path)` (gRPC:
   * application/grpc*, gRPC-Web: application/grpc-web*).
   */
  isLean(method: string, path: string, contentType: string | undefined): boolean;
  /**
   * The answer a lean request gets without its body being read (unknown procedure, method,
   * content type, compression, timeout syntax, a Content-Length over maxRequestBytes); the front
   * sends it and reads past the body. Undefined: read the body, then serveUnary.
   */
  answerBeforeBody(head: UnaryHttpHead): UnaryHttpResponse | undefined;
  /** The answer once a body without Content-Length grows past maxRequestBytes: sent at once, the rest of the body read past by the front. */
  bodyTooLarge(path: string): UnaryHttpResponse;
  /** Serves a whole lean request (isLean said true); rejects only one that isLean sends to universal(). */
  serveUnary(request: UnaryHttpRequest): Promise<UnaryHttpResponse>;
  /** The Connect-ES handler of a procedure path (undefined for an unknown one); its error answers carry their ErrorDetail, as handle()'s do. */
  universal(path: string): ConnectEsHandler | undefined;
  /**
   * Serves a request of the gRPC port (edge/grpc-front.ts) with Connect-ES, whatever its protocol
   * (gRPC, gRPC-Web, Connect); a path naming no procedure is refused in the request's protocol.
   * `host` stands for the Host header where procedures read it (the URLs they hand out).
   */
  serveHttp2(req: Http2ServerRequest, res: Http2ServerResponse, host: string): void;
}

export function apiService(onReady: (api: ApiHandle) => void, options: ApiOptions = {}): ServiceSchema {
  const trustedProxies = options.trustedProxies?.length ? addressList(options.trustedProxies) : undefined;
  const leanUnary = options.leanUnary ?? true;
  return {
    name: "api",
    started() {
      const log = (message: string, cause: unknown) => this.logger.error(message, cause);
      const procedures = allProcedures(this.broker);
      const router = createConnectRouter({
        readMaxBytes: maxRequestBytes,
        interceptors: [
          (next) => async (request) => {
            try {
              return await next(request);
            } catch (err) {
              throw toConnectError(err, log);
            }
          },
        ],
      });
      registerWithConnect(router, procedures);
      const unary = new UnaryRpcHandler(procedures, { maxRequestBytes, log });
      const connectEs = new Map<string, ConnectEsHandler>();
      for (const handler of router.handlers) connectEs.set(handler.requestPath, normalizedConnectEs(handler));

      const fail = (res: ServerResponse | Http2ServerResponse, procedure: string, err: unknown) => {
        // A client that went away mid-answer is no fault of ours: nobody to answer, nothing to report.
        if (clientGone(res)) return;
        this.logger.error("failed to answer an RPC", err);
        rpcRequests.inc({ procedure, code: "internal" });
        if (res.headersSent) res.destroy();
        else res.writeHead(500, { "content-type": "application/json" }).end(errorBodyJson(Errors.internal));
      };

      const serveLean = (req: IncomingMessage, res: ServerResponse, path: string, startedAt: number) => {
        const headers = req.headers as Record<string, string | undefined>;
        const refusal = unary.answerBeforeBody({ method: req.method ?? "", path, headers }, startedAt);
        if (refusal) {
          send(res, refusal);
          return;
        }
        readBody(req, maxRequestBytes, (body) => {
          if (body === tooLarge) {
            send(res, unary.bodyTooLarge(path, startedAt));
          } else if (body === aborted) {
            // What Connect-ES counts for a request whose client left mid-body: no one hears the answer.
            count(path, "internal", startedAt);
          } else {
            const request: UnaryHttpRequest = { method: req.method ?? "", path, query: "", headers, body, clientIp: clientAddress(req, trustedProxies), host: req.headers.host ?? "" };
            unary.serve(request, startedAt).then(
              (answer) => send(res, answer),
              (err: unknown) => fail(res, path, err),
            );
          }
        });
      };

      const serveConnectEs = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, path: string, handler: ConnectEsHandler, host = req.headers.host ?? "") => {
        const facts = { clientIp: clientAddress(req, trustedProxies), host };
        // Connect builds a URL from the Host header (HTTP/2: :authority), of which it reads only
        // the path: a request without one (HTTP/1.0) gets a stand-in. Hosts that make no URL never
        // get this far.
        if ("authority" in req) req.headers[":authority"] ||= req.headers.host || "localhost";
        else req.headers.host ||= "localhost";
        let universalRequest: UniversalServerRequest;
        try {
          universalRequest = universalRequestFromNodeRequest(req, res, undefined, undefined);
        } catch (err) {
          fail(res, path, err);
          return;
        }
        handler(universalRequest, facts)
          .then((response) => universalResponseToNodeResponse(response, res))
          .catch((err: unknown) => fail(res, path, err));
      };

      const handle = (req: IncomingMessage, res: ServerResponse): boolean => {
        const url = req.url ?? "";
        const query = url.indexOf("?");
        const path = query < 0 ? url : url.slice(0, query);
        if (!path.startsWith("/api.v1.")) return false;
        const startedAt = performance.now();
        const method = req.method ?? "";
        const handler = connectEs.get(path);
        if (handler && !(leanUnary && unary.servesLean(method, path, req.headers["content-type"]))) serveConnectEs(req, res, path, handler);
        else serveLean(req, res, path, startedAt);
        return true;
      };

      const serveHttp2 = (req: Http2ServerRequest, res: Http2ServerResponse, host: string) => {
        const path = req.url.split("?", 1)[0];
        const handler = connectEs.get(path);
        if (handler) {
          serveConnectEs(req, res, path, handler, host);
          return;
        }
        const contentType = req.headers["content-type"] ?? "";
        const protocol = protocolOf(contentType);
        if (protocol === "connect") {
          // The lean path's own answer to a path that names no procedure (it counts it too).
          send(res, unary.answerBeforeBody({ method: req.method, path, headers: req.headers as Record<string, string | undefined> })!);
          return;
        }
        count("unknown", "unimplemented", performance.now());
        const refusal = grpcRefusal(protocol, contentType, connectErrorOf(Errors.unimplemented, {}, `no such procedure: ${path}`));
        universalResponseToNodeResponse(refusal, res).catch((err: unknown) => fail(res, path, err));
      };

      onReady({
        handle,
        serveHttp2,
        isLean: (method, path, contentType) => unary.servesLean(method, path, contentType),
        answerBeforeBody: (head) => unary.answerBeforeBody(head),
        bodyTooLarge: (path) => unary.bodyTooLarge(path),
        serveUnary: (request) => unary.serve(request),
        universal: (path) => connectEs.get(path),
      });
    },
  };
}

/**
 * A Connect-ES handler whose error answers get their ErrorDetail: Connect-ES writes its own
 * refusals (bodies it cannot read, content types, methods, limits) without one. A Connect error
 * body is completed by normalizeErrorBody, gRPC trailers (gRPC-Web: the trailer frame) by
 * api/grpc-status.ts. A gRPC or gRPC-Web answer is read whole first, since its status comes last;
 * every method of ours is unary.
 */
function normalizedConnectEs(handler: UniversalHandler): ConnectEsHandler {
  const procedure = handler.requestPath;
  return async (request, facts) => {
    const startedAt = performance.now();
    const protocol = protocolOf(request.header.get("content-type"));
    const response = await handler({ ...request, contextValues: createContextValues().set(requestFactsKey, facts) });
    if (response.status === 200 && protocol === "connect") {
      count(procedure, "ok", startedAt);
      return response;
    }
    const chunks: Uint8Array[] = [];
    if (response.body) for await (const chunk of response.body) chunks.push(chunk);
    if (response.status === 200 && protocol === "grpc") {
      const { trailer, code } = detailedGrpcTrailer(response.trailer ?? new Headers());
      count(procedure, code, startedAt);
      return { ...response, trailer, body: chunks.length > 0 ? oneChunk(Buffer.concat(chunks)) : undefined };
    }
    if (response.status === 200 && protocol === "grpc-web") {
      const { body, code } = detailedGrpcWebBody(Buffer.concat(chunks));
      count(procedure, code, startedAt);
      return { ...response, body: oneChunk(body) };
    }
    const normalized = normalizeErrorBody(response.status, Buffer.concat(chunks));
    count(procedure, normalized.code, startedAt);
    const header = new Headers(response.header);
    header.set("content-length", String(normalized.body.byteLength));
    return { ...response, status: normalized.status, header, body: oneChunk(normalized.body) };
  };
}

function count(procedure: string, code: string, startedAt: number): void {
  rpcRequests.inc({ procedure, code });
  rpcDuration.observe({ procedure }, (performance.now() - startedAt) / 1000);
}

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}

function send(res: ServerResponse | Http2ServerResponse, answer: UnaryHttpResponse): void {
  // A client that went away has nobody to hear the answer.
  if (clientGone(res)) return;
  res.writeHead(answer.status, answer.headers).end(answer.body);
}

/** Whether the connection (HTTP/2: the stream) of an answer is gone; an HTTP/2 response has no `destroyed` of its own. */
function clientGone(res: ServerResponse | Http2ServerResponse): boolean {
  return "stream" in res ? res.stream.destroyed : res.destroyed;
}

const tooLarge = Symbol("body too large");
const aborted = Symbol("client left mid-body");

/**
 * Reads a request body whole, up to `limit` bytes: past it, `done` hears at once and the rest is
 * not kept. The usual body of one chunk is taken as it is, without a copy.
 */
function readBody(req: IncomingMessage, limit: number, done: (body: Uint8Array | typeof tooLarge | typeof aborted) => void): void {
  let first: Buffer | undefined;
  let more: Buffer[] | undefined;
  let size = 0;
  let settled = false;
  req.on("data", (chunk: Buffer) => {
    if (settled) return;
    size += chunk.byteLength;
    if (size > limit) {
      settled = true;
      first = more = undefined;
      // The answer goes out at once; the node front then reads past the rest (readPastBody).
      done(tooLarge);
    } else if (first === undefined) {
      first = chunk;
    } else {
      (more ??= [first]).push(chunk);
    }
  });
  req.on("end", () => {
    if (settled) return;
    settled = true;
    done(more ? Buffer.concat(more, size) : (first ?? new Uint8Array(0)));
  });
  req.on("error", () => {
    if (settled) return;
    settled = true;
    done(aborted);
  });
}
