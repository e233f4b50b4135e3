// The embedded blob store: files under DATA_DIR/media.
//   blobs/<first two characters of the key>/<key>   committed blobs (fanned out so no directory grows huge)
//   staging/<upload key>                           staged uploads, written in place at their offsets
//   tmp/                                           half-written blobs; emptied at start-up
// A blob becomes visible by a hard link from tmp/ or staging/ into blobs/, which is atomic and
// never replaces an existing blob.
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { link, mkdir, open, rm, stat, truncate, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { BlobNotFoundError, checkBlobKey, type BlobStore, type ByteRange } from "./blob-store.js";

function isCode(err: unknown, code: string): boolean {
  return typeof err === "object" && err !== null && (err as { code?: string }).code === code;
}

export class LocalDiskBlobStore implements BlobStore {
  private constructor(private readonly root: string) {}

  /** Opens the store under `dataDir/media`, creating its folders and removing leftovers of interrupted writes. */
  static async open(dataDir: string): Promise<LocalDiskBlobStore> {
    const root = join(dataDir, "media");
    await rm(join(root, "tmp"), { recursive: true, force: true });
    for (const folder of ["blobs", "staging", "tmp"]) await mkdir(join(root, folder), { recursive: true });
    return new LocalDiskBlobStore(root);
  }

  private blobPath(key: string): string {
    checkBlobKey(key);
    return join(this.root, "blobs", key.slice(0, 2), key);
  }

  private stagedPath(uploadKey: string): string {
    return join(this.root, "staging", checkBlobKey(uploadKey));
  }

  async put(key: string, source: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<number> {
    const destination = this.blobPath(key);
    const temporary = join(this.root, "tmp", randomBytes(12).toString("hex"));
    const handle = await open(temporary, "wx");
    let size = 0;
    try {
      try {
        for await (const chunk of source) {
          await writeFully(handle, chunk, size);
          size += chunk.byteLength;
        }
        await handle.datasync();
      } finally {
        await handle.close();
      }
      await mkdir(join(destination, ".."), { recursive: true });
      await link(temporary, destination);
      return size;
    } finally {
      await rm(temporary, { force: true });
    }
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const path = this.blobPath(key);
    let handle;
    try {
      handle = await open(path, "r");
    } catch (err) {
      if (isCode(err, "ENOENT")) throw new BlobNotFoundError(key);
      throw err;
    }
    return handle.createReadStream(range ? { start: range.start, end: range.end } : {});
  }

  async size(key: string): Promise<number | undefined> {
    try {
      return (await stat(this.blobPath(key))).size;
    } catch (err) {
      if (isCode(err, "ENOENT")) return undefined;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.blobPath(key), { force: true });
  }

  async withLocalFile<T>(key: string, use: (path: string) => Promise<T>): Promise<T> {
    if ((await this.size(key)) === undefined) throw new BlobNotFoundError(key);
    return use(this.blobPath(key));
  }

  async writeStaged(uploadKey: string, offset: number, bytes: Uint8Array): Promise<void> {
    const handle = await open(this.stagedPath(uploadKey), constants.O_RDWR | constants.O_CREAT);
    try {
      // Writing past the end would leave a hole of zeros inside the upload: the bytes before the
      // offset must already be here.
      const { size } = await handle.stat();
      if (size < offset) throw new Error(`staged upload ${uploadKey} holds ${size} bytes, fewer than the offset ${offset}`);
      await writeFully(handle, bytes, offset);
      await handle.truncate(offset + bytes.byteLength);
      await handle.datasync();
    } finally {
      await handle.close();
    }
  }

  async commitStaged(uploadKey: string, key: string, size: number): Promise<void> {
    const staged = this.stagedPath(uploadKey);
    const destination = this.blobPath(key);
    let stagedSize: number;
    try {
      stagedSize = (await stat(staged)).size;
    } catch (err) {
      if (!isCode(err, "ENOENT")) throw err;
      // Committed before: the blob is there with the right size.
      if ((await this.size(key)) === size) return;
      throw new BlobNotFoundError(uploadKey);
    }
    if (stagedSize < size) throw new Error(`staged upload ${uploadKey} holds ${stagedSize} bytes, fewer than ${size}`);
    if (stagedSize > size) await truncate(staged, size);
    await mkdir(join(destination, ".."), { recursive: true });
    try {
      await link(staged, destination);
    } catch (err) {
      if (!isCode(err, "EEXIST") || (await this.size(key)) !== size) throw err;
    }
    await unlink(staged);
  }

  async discardStaged(uploadKey: string): Promise<void> {
    await rm(this.stagedPath(uploadKey), { force: true });
  }
}

async function writeFully(handle: import("node:fs/promises").FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let written = 0;
  while (written < bytes.byteLength) {
    const { bytesWritten } = await handle.write(bytes, written, bytes.byteLength - written, position + written);
    written += bytesWritten;
  }
}
