// The API as a front that hands over whole requests (the uWS front) serves it: one call, the whole
// request in, the whole answer out. Connect unary calls take the lean path (api/lean-unary.ts);
// gRPC and gRPC-Web go to Connect-ES's handler of the procedure, given one chunk of body.
import type { ApiHandle } from "../api/api-service.js";
import { maxRequestBytes } from "../api/api-service.js";
import type { UnaryHttpHead, UnaryHttpRequest, UnaryHttpResponse } from "../api/lean-unary.js";

export type { UnaryHttpRequest, UnaryHttpResponse } from "../api/lean-unary.js";

/** The API as a front that reads whole requests sees it. */
export interface WholeRequestApi {
  /** The answer the request gets from its head alone (see ApiHandle.answerBeforeBody); undefined: read the body, then serve(). */
  beforeBody(head: UnaryHttpHead): UnaryHttpResponse | undefined;
  serve(request: UnaryHttpRequest): Promise<UnaryHttpResponse>;
}

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}

/**
 * The API for a front that reads whole requests: it asks beforeBody() with the head, then reads
 * the body keeping at most maxRequestBytes + 1 bytes, so serve() answers a body over the limit as
 * the lean path answers one that grows past it.
 */
export function wholeRequestApi(api: ApiHandle): WholeRequestApi {
  const isLean = (head: UnaryHttpHead) => api.isLean(head.method, head.path, head.headers["content-type"]);
  return { beforeBody: (head) => (isLean(head) ? api.answerBeforeBody(head) : undefined), serve };

  async function serve(request: UnaryHttpRequest): Promise<UnaryHttpResponse> {
    if (isLean(request)) {
      if (request.body.byteLength > maxRequestBytes) return api.bodyTooLarge(request.path);
      return api.serveUnary(request);
    }
    // isLean sends only known procedures with a gRPC or gRPC-Web content type here.
    const handler = api.universal(request.path)!;
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
    const response = await handler(
      {
        httpVersion: "1.1",
        method: request.method,
        // Connect reads only the path of this URL; a request without a Host gets a stand-in.
        url: `http://${request.host || "localhost"}${request.path}${request.query ? `?${request.query}` : ""}`,
        header,
        body: oneChunk(request.body),
        signal: new AbortController().signal,
      },
      { clientIp: request.clientIp, host: request.host },
    );
    const chunks: Uint8Array[] = [];
    if (response.body) for await (const chunk of response.body) chunks.push(chunk);
    const headers: Record<string, string> = {};
    response.header?.forEach((value, name) => {
      if (name !== "content-length") headers[name] = value;
    });
    return { status: response.status, headers, body: Buffer.concat(chunks) };
  }
}
