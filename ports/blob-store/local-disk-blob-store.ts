// The embedded blob store: files under DATA_DIR/media.
//   blobs/<first two characters of the key>/<key>   committed blobs (fanned out so no directory grows huge)
//   staging/<upload key>/<part>                    staged uploads, one file per part
//   tmp/                                           half-written blobs; emptied at start-up
// A blob becomes visible by a hard link from tmp/ (or from a staged upload's only part) into
// blobs/, which is atomic and never replaces an existing blob.
import { randomBytes } from "node:crypto";
import { link, mkdir, open, readFile, rm, rmdir, stat, type FileHandle } from "node:fs/promises";
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

  private stagedFolder(uploadKey: string): string {
    return join(this.root, "staging", checkBlobKey(uploadKey));
  }

  private stagedPartPath(uploadKey: string, part: string): string {
    return join(this.stagedFolder(uploadKey), checkBlobKey(part));
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

  async writeStaged(uploadKey: string, part: string, bytes: Uint8Array): Promise<void> {
    const handle = await this.createPart(uploadKey, part);
    try {
      await writeFully(handle, bytes, 0);
      await handle.datasync();
    } finally {
      await handle.close();
    }
  }

  private async createPart(uploadKey: string, part: string): Promise<FileHandle> {
    const path = this.stagedPartPath(uploadKey, part);
    for (let attempt = 1; ; attempt++) {
      await mkdir(this.stagedFolder(uploadKey), { recursive: true });
      try {
        // "wx": a part is written once; a name used twice is the caller's bug, not a chunk to replace.
        return await open(path, "wx");
      } catch (err) {
        // discardStagedPart removed the folder, empty, between the two calls: make it again.
        if (!isCode(err, "ENOENT") || attempt >= 3) throw err;
      }
    }
  }

  async commitStaged(uploadKey: string, parts: readonly string[], key: string, size: number): Promise<void> {
    const folder = this.stagedFolder(uploadKey);
    try {
      await stat(folder);
    } catch (err) {
      if (!isCode(err, "ENOENT")) throw err;
      // Committed before: the blob is there with the right size.
      if ((await this.size(key)) === size) return;
      throw new BlobNotFoundError(uploadKey);
    }
    const paths = parts.map((part) => this.stagedPartPath(uploadKey, part));
    let stagedSize = 0;
    for (const [index, path] of paths.entries()) {
      try {
        stagedSize += (await stat(path)).size;
      } catch (err) {
        if (isCode(err, "ENOENT")) throw new Error(`staged upload ${uploadKey} has no part ${parts[index]}`, { cause: err });
        throw err;
      }
    }
    if (stagedSize !== size) throw new Error(`staged upload ${uploadKey} holds ${stagedSize} bytes in the named parts, not ${size}`);
    // A crash after the blob appeared leaves the staged upload beside it: the repetition lands here.
    if ((await this.size(key)) !== size) {
      try {
        if (paths.length === 1) {
          await mkdir(join(this.blobPath(key), ".."), { recursive: true });
          await link(paths[0], this.blobPath(key));
        } else {
          await this.put(key, concatenated(paths));
        }
      } catch (err) {
        if (!isCode(err, "EEXIST") || (await this.size(key)) !== size) throw err;
      }
    }
    await rm(folder, { recursive: true, force: true });
  }

  async discardStagedPart(uploadKey: string, part: string): Promise<void> {
    await rm(this.stagedPartPath(uploadKey, part), { force: true });
    // A part written after its upload was committed or discarded was the folder's only file; a
    // folder left empty would be found by nothing.
    await rmdir(this.stagedFolder(uploadKey)).catch((err: unknown) => {
      if (!isCode(err, "ENOTEMPTY") && !isCode(err, "ENOENT") && !isCode(err, "EEXIST")) throw err;
    });
  }

  async discardStaged(uploadKey: string): Promise<void> {
    // Recursive: also a staged upload of the earlier layout, one file written in place.
    await rm(this.stagedFolder(uploadKey), { recursive: true, force: true });
  }
}

/** The parts' bytes in order, a part at a time (a part is one client chunk, bounded by the request size). */
async function* concatenated(paths: readonly string[]): AsyncIterable<Uint8Array> {
  for (const path of paths) yield await readFile(path);
}

async function writeFully(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let written = 0;
  while (written < bytes.byteLength) {
    const { bytesWritten } = await handle.write(bytes, written, bytes.byteLength - written, position + written);
    written += bytesWritten;
  }
}
