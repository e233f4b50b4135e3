// Downloads by URL: what the HTTP handler of the edge asks the engine's media service, and what
// it gets back. Links look like
//   <base>/media/<fileId>?expires=<Unix ms>&signature=<hex>   (GetDownloadURL; valid until expires)
//   <base>/media/<fileId>                                      (publicUrl of an avatar; permanent)
// The engine owns the signing key and the clock, so it alone decides whether a link is valid.

export const mediaPathPrefix = "/media/";

/** What a file id (also its blob key) can look like: anything else names no file and no path. */
export const fileIdPattern = /^[A-Za-z0-9_-]{1,128}$/;

/** A byte range as the client asked for it, before it is checked against the file's size. */
export type RequestedRange = { start: number; end?: number } | { suffix: number };

export interface MediaDownloadParams {
  fileId: string;
  /** The link's `expires` and `signature` exactly as received; absent on a public link. */
  expires?: string;
  signature?: string;
  range?: RequestedRange;
  /** An If-Range validator: the range applies only while the file's entity tag equals it. */
  ifRange?: string;
  /** True for HEAD: answer the head, open no byte stream. */
  headOnly: boolean;
}

/** What the engine answers alongside the byte stream, in the call's meta under mediaDownloadMetaKey. */
export interface MediaDownloadHead {
  status: 200 | 206;
  contentType: string;
  fileName: string;
  /** Size of the whole file. */
  size: number;
  /** Inclusive positions of the bytes sent. */
  start: number;
  end: number;
  /** Quoted strong entity tag (from the SHA-256 of the bytes, which never change). */
  etag: string;
  /** A public file's link is permanent; a private file's link lives until its expiry. */
  public: boolean;
  /** How long a client may cache the answer: until the link expires, or long for a public file. */
  maxAgeSeconds: number;
}

export const mediaDownloadMetaKey = "mediaDownload";
