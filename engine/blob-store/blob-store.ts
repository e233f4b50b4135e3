// The blob-store port: where file bytes live. Embedded mode keeps them on local disk under
// DATA_DIR/media; a cluster keeps them in S3. Metadata (names, types, sizes, owners, sessions)
// lives in the store port; a blob is only bytes under a key.
//
// Keys are chosen by the engine (random ids), 1..128 characters of [A-Za-z0-9_-]. A blob is
// immutable once written. A staged upload is a blob under construction: bytes arrive at known
// offsets over many calls and possibly across restarts, and become a blob when committed. On S3
// a staged upload maps to one object per written part, concatenated into a multipart upload on
// commit; on disk it is one file written in place.
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
   * Writes `bytes` at `offset` of the staged upload (created empty when absent) and drops whatever
   * lay beyond them, so the staged upload ends at offset + bytes.length. Durable when it resolves.
   */
  writeStaged(uploadKey: string, offset: number, bytes: Uint8Array): Promise<void>;
  /**
   * Turns the first `size` bytes of the staged upload into the blob `key` and removes the staged
   * upload. Repeating a commit that already happened (the staged upload is gone and the blob has
   * `size` bytes) succeeds, so a caller that crashed after committing can finish its work.
   */
  commitStaged(uploadKey: string, key: string, size: number): Promise<void>;
  /** Removes a staged upload if it exists. */
  discardStaged(uploadKey: string): Promise<void>;
}
