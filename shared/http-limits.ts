// The size limit of a request head, which both socket drivers of the edge (edge/node-front.ts,
// edge/uws-front.ts) and the WebSocket upgrade on uWS enforce alike. The body limit is the API's
// (api/api-service.ts maxRequestBytes).

/**
 * A request head is refused (431, REQUEST_HEADERS_TOO_LARGE) once its target, header names and
 * header values come to this many bytes: exactly what node:http counts against its maxHeaderSize,
 * which is set to this. 16 KiB is node:http's own default.
 */
export const maxHeaderBytes = 16 * 1024;

/** The bytes of a head that count against maxHeaderBytes: the target, then each header's name and value. */
export function requestHeadBytes(path: string, query: string, each: (visit: (name: string, value: string) => void) => void): number {
  let bytes = Buffer.byteLength(path) + (query ? 1 + Buffer.byteLength(query) : 0);
  each((name, value) => (bytes += Buffer.byteLength(name) + Buffer.byteLength(value)));
  return bytes;
}
