// One Connect unary call as the uWS front hands it to the API: the whole request in, the whole
// answer out, no streams and no node:http objects. The lean unary handler (issue 10, item 5) takes
// this shape; until it serves the uWS front, connectUniversalUnary bridges to Connect-ES.
import { createContextValues } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { normalizeErrorBody } from "../api/errors.js";
import { requestFactsKey } from "../api/rpc.js";
import { rpcDuration, rpcRequests } from "../shared/metrics.js";

export interface UnaryHttpRequest {
  method: string;
  path: string;
  query: string;
  /** Lower-case names. */
  headers: Record<string, string | undefined>;
  body: Uint8Array;
  clientIp: string;
  host: string;
}

export interface UnaryHttpResponse {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

export type UnaryHttpHandler = (request: UnaryHttpRequest) => Promise<UnaryHttpResponse>;

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}

/**
 * Serves unary calls through Connect-ES's universal handlers (`universal(path)` finds the one of
 * a procedure), with the same metrics and error bodies as the node:http path in api-service.ts.
 */
export function connectUniversalUnary(universal: (path: string) => UniversalHandler | undefined): UnaryHttpHandler {
  return async (request) => {
    const handler = universal(request.path);
    const started = process.hrtime.bigint();
    const procedure = handler ? request.path : "unknown";
    const finish = (code: string) => {
      rpcRequests.inc({ procedure, code });
      rpcDuration.observe({ procedure }, Number(process.hrtime.bigint() - started) / 1e9);
    };
    if (!handler) {
      const body = JSON.stringify({ code: "unimplemented", message: `no such procedure: ${request.path}` });
      finish("unimplemented");
      return { status: 404, headers: { "content-type": "application/json" }, body: normalizeErrorBody(404, new TextEncoder().encode(body)).body };
    }
    const header = new Headers();
    for (const [name, value] of Object.entries(request.headers)) {
      if (value === undefined) continue;
      // uWS hands header bytes over as UTF-8 text: bytes that are not UTF-8 become characters a
      // Headers object refuses. Such a header is left out, as if it had not been sent.
      try {
        header.set(name, value);
      } catch {
        continue;
      }
    }
    const response = await handler({
      httpVersion: "1.1",
      method: request.method,
      // Connect reads only the path of this URL; a request without a Host gets a stand-in.
      url: `http://${request.host || "localhost"}${request.path}${request.query ? `?${request.query}` : ""}`,
      header,
      body: oneChunk(request.body),
      signal: new AbortController().signal,
      contextValues: createContextValues().set(requestFactsKey, { clientIp: request.clientIp, host: request.host }),
    });
    const chunks: Uint8Array[] = [];
    if (response.body) for await (const chunk of response.body) chunks.push(chunk);
    let status = response.status;
    let body: Uint8Array = Buffer.concat(chunks);
    if (status === 200) finish("ok");
    else {
      const normalized = normalizeErrorBody(status, body);
      finish(normalized.code);
      ({ status, body } = normalized);
    }
    const headers: Record<string, string> = {};
    response.header?.forEach((value, name) => {
      if (name !== "content-length") headers[name] = value;
    });
    return { status, headers, body };
  };
}
