// Opens the blob store the configuration names (the port is blob-store.ts): S3 where BLOB_STORE
// says so (a cluster), files under the data directory otherwise.
import type { BlobsConfig } from "../../shared/config.js";
import type { BlobStore } from "./blob-store.js";
import { LocalDiskBlobStore } from "./local-disk-blob-store.js";
import { S3BlobStore } from "./s3-blob-store.js";

export async function openBlobStore(blobs: BlobsConfig, dataDir: string): Promise<BlobStore> {
  return blobs.kind === "s3" ? S3BlobStore.open(blobs) : LocalDiskBlobStore.open(dataDir);
}
