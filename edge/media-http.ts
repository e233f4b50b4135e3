// Download links over plain HTTP: GET and HEAD on /media/<fileId>, with no Authorization header
// (the link is the credential). This file moves bytes and speaks HTTP (ranges, caching and
// safety headers, status codes); the engine's media service checks the link against its key and
// clock and streams the bytes. Across nodes the stream crosses the transporter in packets; a
// cluster with S3 behind the blob store could redirect to a presigned S3 URL instead.
import { Code } from "@connectrpc/connect";
import type { ServiceBroker } from "moleculer";
import { Errors, ParleyError } from "../shared/errors.js";
import { errorBodyJson, errorPartsOf } from "../api/errors.js";
import type { EdgeReply, EdgeRequest } from "./edge-http.js";
import {
  fileIdPattern,
  mediaDownloadMetaKey,
  mediaPathPrefix,
  type MediaDownloadHead,
  type MediaDownloadParams,
  type RequestedRange,
} from "../shared/media-download.js";
import { callAction } from "../shared/actions.js";


/**
 * Reads a Range header into one byte range. Anything else (other units, several ranges, bad
 * syntax) answers undefined: RFC 9110 lets a server ignore Range and send the whole file.
 */
export function parseRangeHeader(header: string | undefined): RequestedRange | undefined {
  if (!header) return undefined;
  const match = /^bytes=(\d{0,15})-(\d{0,15})$/.exec(header.trim());
  if (!match) return undefined;
  const [, first, last] = match;
  if (first === "" && last === "") return undefined;
  if (first === "") return { suffix: Number(last) };
  const start = Number(first);
  if (last === "") return { start };
  const end = Number(last);
  return end < start ? undefined : { start, end };
}

const httpStatusOf: Partial<Record<Code, number>> = {
  [Code.NotFound]: 404,
  [Code.PermissionDenied]: 403,
  [Code.OutOfRange]: 416,
  [Code.Unavailable]: 503,
};

/** RFC 8187 encoding of a header parameter value (filename*), byte by byte over UTF-8. */
function extendedValue(value: string): string {
  let out = "";
  for (const byte of Buffer.from(value, "utf8")) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9!#$&+.^_`|~-]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

function contentDisposition(head: MediaDownloadHead): string {
  // Media shows in place; anything else (HTML, SVG, scripts) downloads instead of rendering on our origin.
  const inline = /^(image|audio|video)\//i.test(head.contentType) && !/svg/i.test(head.contentType);
  const fallback = head.fileName.replace(/[^\x20-\x7e]|["\\]/g, "_");
  return `${inline ? "inline" : "attachment"}; filename="${fallback}"; filename*=UTF-8''${extendedValue(head.fileName)}`;
}

function headersOf(head: MediaDownloadHead): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": head.contentType,
    "content-length": String(head.end - head.start + 1),
    "accept-ranges": "bytes",
    etag: head.etag,
    "cache-control": head.public ? `public, max-age=${head.maxAgeSeconds}, immutable` : `private, max-age=${head.maxAgeSeconds}`,
    "content-disposition": contentDisposition(head),
    "x-content-type-options": "nosniff",
    // Uploaded bytes are never trusted as active content, whatever type they claim.
    "content-security-policy": "default-src 'none'; sandbox",
  };
  if (head.status === 206) headers["content-range"] = `bytes ${head.start}-${head.end}/${head.size}`;
  return headers;
}

export interface MediaHttpLogger {
  error(message: string, err: unknown): void;
}

/** Builds the handler for requests whose path starts with /media/ (on either edge front). */
export function mediaDownloadHandler(broker: ServiceBroker, logger: MediaHttpLogger): (req: EdgeRequest, reply: EdgeReply) => void {
  const fail = (reply: EdgeReply, err: unknown) => {
    const { entry, metadata, message } = errorPartsOf(err, (text, cause) => logger.error(text, cause));
    if (reply.aborted) return;
    if (reply.started) {
      reply.destroy();
      return;
    }
    const headers: Record<string, string> = { "content-type": "application/json", "cache-control": "no-store" };
    if (entry === Errors.rangeNotSatisfiable && metadata.size) headers["content-range"] = `bytes */${metadata.size}`;
    reply.send(httpStatusOf[entry.code] ?? 500, headers, errorBodyJson(entry, metadata, message));
  };

  return (req, reply) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      reply.send(405, { allow: "GET, HEAD", "content-type": "text/plain" }, "method not allowed\n");
      return;
    }
    const fileId = req.path.slice(mediaPathPrefix.length);
    if (!fileIdPattern.test(fileId)) {
      fail(reply, new ParleyError(Errors.mediaFileNotFound));
      return;
    }
    const query = new URLSearchParams(req.query);
    const ifRange = req.header("if-range");
    const params: MediaDownloadParams = {
      fileId,
      expires: query.get("expires") ?? undefined,
      signature: query.get("signature") ?? undefined,
      range: parseRangeHeader(req.header("range")),
      ifRange,
      headOnly: req.method === "HEAD",
    };
    const meta: Record<string, unknown> = {};
    callAction(broker, "media.download", params, { meta })
      .then(async (body) => {
        const head = meta[mediaDownloadMetaKey] as MediaDownloadHead;
        // The opened file must not outlive a client that went away meanwhile.
        if (reply.aborted) {
          body?.destroy();
          return;
        }
        if (!body) {
          reply.send(head.status, headersOf(head));
          return;
        }
        await reply.stream(head.status, headersOf(head), body);
      })
      .catch((err: unknown) => fail(reply, err));
  };
}
