// The blob-store port: where file bytes live. Embedded mode keeps them on local disk under
// DATA_DIR/media; a cluster keeps them in S3. Metadata (names, types, sizes, owners, sessions)
// lives in the store port; a blob is only bytes under a key.
//
// Keys are chosen by the engine (random ids), 1..128 characters of [A-Za-z0-9_-]. A blob is
// immutable once written. A staged upload is a blob under construction: a set of named parts, each
// written whole by one call (possibly across restarts and nodes), of which the commit concatenates
// the ones it names, in the order it names them. Part names are the engine's and name one attempt
// each (the engine records which attempts count), so two writers never write the same part and a
// part the commit does not name is left over from an attempt that lost. On S3 a part is an object,
// concatenated into a multipart upload on commit; on disk a file.
import type { Readable } from "node:stream";
import { fileIdPattern } from "../../shared/media-download.js";

/** Inclusive byte positions, as HTTP ranges count them. */
export interface ByteRange {
  start: number;
  end: number;
}

export class BlobNotFoundError extends Error {
  constructor(key: string) {
    super(`no blob under key ${JSON.stringify(key)}`);
    this.name = "BlobNotFoundError";
  }
}


/** Refuses a key outside the alphabet every adapter can store safely (no paths, no separators). */
export function checkBlobKey(key: string): string {
  if (!fileIdPattern.test(key)) throw new Error(`invalid blob key ${JSON.stringify(key)}`);
  return key;
}

export interface BlobStore {
  /** Stores the bytes of `source` under a new key; the blob appears whole or not at all. Answers its size. */
  put(key: string, source: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<number>;
  /** Streams the blob, or the given range of it (already clamped to its size); BlobNotFoundError when absent. */
  read(key: string, range?: ByteRange): Promise<Readable>;
  /** The blob's size in bytes, or undefined when there is none under the key. */
  size(key: string): Promise<number | undefined>;
  /** Deletes the blob if it exists. */
  delete(key: string): Promise<void>;
  /**
   * Runs `use` with the path of a local file holding the blob's bytes (the file itself on disk, a
   * temporary copy for remote stores), valid until `use` settles. For libraries that need random access.
   */
  withLocalFile<T>(key: string, use: (path: string) => Promise<T>): Promise<T>;

  /**
   * Stores `bytes` as the part `part` (a key) of the staged upload, created when absent. Each part
   * name is written once. Durable when it resolves.
   */
  writeStaged(uploadKey: string, part: string, bytes: Uint8Array): Promise<void>;
  /**
   * Turns the named parts, in this order, into the blob `key`, and removes the staged upload with
   * every part, named or not; refuses when a named part is missing or the parts do not add up to
   * `size` bytes. Repeating a commit that already happened (the staged upload is gone and the blob
   * has `size` bytes) succeeds, so a caller that crashed after committing can finish its work.
   */
  commitStaged(uploadKey: string, parts: readonly string[], key: string, size: number): Promise<void>;
  /** Removes one part of a staged upload if it exists (an attempt that lost); the last one gone, so is the upload. */
  discardStagedPart(uploadKey: string, part: string): Promise<void>;
  /** Removes a staged upload with all its parts if it exists. */
  discardStaged(uploadKey: string): Promise<void>;
}
