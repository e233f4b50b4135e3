// The cluster blob store: objects in one S3 bucket (AWS, or an S3-compatible server such as MinIO),
// under an optional key prefix so deployments can share a bucket.
//   <prefix>blobs/<key>                          committed blobs
//   <prefix>staging/<upload key>/<part>          one object per staged part
// A staged part is one PUT; all the state lives in S3, so any node can continue or commit an upload
// after a restart. S3 has no append, and multipart parts other than the last must be ≥ 5 MiB, which
// client chunks need not be. So commit makes a multipart upload of the named parts in which S3
// copies the large ones itself (UploadPartCopy) and the small ones pass through this process to be
// gathered into parts of the minimum size (below one part size: a single PUT); only then are the
// staged parts removed, the ones the commit did not name with them.
import { createWriteStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
  UploadPartCopyCommand,
  type CompletedPart,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import type { S3Settings } from "../../shared/config.js";
import { BlobNotFoundError, checkBlobKey, type BlobStore, type ByteRange } from "./blob-store.js";

export interface S3BlobStoreSettings extends S3Settings {
  /** Prepended to every object key, e.g. "parley/"; empty for the whole bucket. */
  keyPrefix?: string;
  /** Bytes buffered per multipart part (≥ 5 MiB, S3's minimum); a blob up to this size is one PUT. */
  partSize?: number;
  /**
   * The S3 base URL clients reach, when it differs from `endpoint` (a server on an internal name
   * behind a public one). A presigned URL signs its host, so it must be made for the public one.
   */
  publicEndpoint?: string;
}

const minimumPartSize = 5 * 1024 * 1024;
const defaultPartSize = 8 * 1024 * 1024;
/** S3's largest part, copied or uploaded. */
const maximumCopyPartSize = 5 * 1024 * 1024 * 1024;

/** An S3 request that failed for another reason than a missing object: names the operation, the object and S3's error code. */
export class S3BlobStoreError extends Error {
  constructor(
    readonly operation: string,
    readonly objectKey: string,
    readonly code: string,
    cause: unknown,
  ) {
    super(`S3 ${operation} of ${objectKey} failed: ${code}: ${(cause as Error).message}${hint(code)}`, { cause });
    this.name = "S3BlobStoreError";
  }
}

function hint(code: string): string {
  if (code === "SignatureDoesNotMatch" || code === "InvalidAccessKeyId") return " (check S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY)";
  if (code === "NoSuchBucket") return " (create the bucket first; S3_BUCKET names it)";
  return "";
}

function errorCode(err: unknown): string {
  if (err instanceof S3ServiceException) return err.name;
  return (err as { name?: string; code?: string }).code ?? (err as Error).name ?? "Error";
}

function isMissing(err: unknown): boolean {
  const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  const code = errorCode(err);
  return code === "NoSuchKey" || code === "NotFound" || (status === 404 && code !== "NoSuchBucket");
}

/** Bytes start..end (inclusive) of an existing object in the bucket, to be copied into a new one. */
interface CopyRange {
  copyFrom: string;
  start: number;
  end: number;
}

/** A staged part as listed: the object and how many bytes it holds. */
interface StagedPart {
  objectKey: string;
  size: number;
}

export class S3BlobStore implements BlobStore {
  readonly bucket: string;
  private readonly prefix: string;
  private readonly partSize: number;

  /**
   * `presigner` signs download URLs (no request is sent through it); the `client` by default.
   */
  constructor(
    readonly client: S3Client,
    settings: Pick<S3BlobStoreSettings, "bucket" | "keyPrefix" | "partSize">,
    private readonly presigner: S3Client = client,
  ) {
    this.bucket = settings.bucket;
    this.prefix = settings.keyPrefix ?? "";
    this.partSize = settings.partSize ?? defaultPartSize;
    if (this.partSize < minimumPartSize) throw new Error(`S3 multipart parts must be at least ${minimumPartSize} bytes; got ${this.partSize}`);
  }

  /** A store on the bucket the settings name; credentials from the settings, else the AWS SDK's default chain. */
  static fromSettings(settings: S3BlobStoreSettings): S3BlobStore {
    const credentials = settings.accessKeyId && settings.secretAccessKey ? { accessKeyId: settings.accessKeyId, secretAccessKey: settings.secretAccessKey } : undefined;
    const client = new S3Client({ endpoint: settings.endpoint, region: settings.region, forcePathStyle: settings.forcePathStyle, credentials });
    const presigner = settings.publicEndpoint ? new S3Client({ endpoint: settings.publicEndpoint, region: settings.region, forcePathStyle: settings.forcePathStyle, credentials }) : client;
    return new S3BlobStore(client, settings, presigner);
  }

  /**
   * Opens a store and checks that the bucket answers with these credentials, so that a wrong
   * setting stops start-up with S3's reason (NoSuchBucket, SignatureDoesNotMatch, AccessDenied…)
   * instead of surfacing at the first upload; a HEAD on a missing bucket would only say "not found".
   */
  static async open(settings: S3BlobStoreSettings): Promise<S3BlobStore> {
    const store = S3BlobStore.fromSettings(settings);
    try {
      await store.request("ListObjectsV2", store.prefix, () => store.client.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: store.prefix, MaxKeys: 1 })));
    } catch (err) {
      store.client.destroy();
      throw err;
    }
    return store;
  }

  private blobObject(key: string): string {
    return `${this.prefix}blobs/${checkBlobKey(key)}`;
  }

  private stagingFolder(uploadKey: string): string {
    return `${this.prefix}staging/${checkBlobKey(uploadKey)}/`;
  }

  /** Runs one S3 request, turning its failure into an error naming the operation and object. */
  private async request<T>(operation: string, objectKey: string, send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (err) {
      if (err instanceof S3BlobStoreError || err instanceof BlobNotFoundError) throw err;
      throw new S3BlobStoreError(operation, `s3://${this.bucket}/${objectKey}`, errorCode(err), err);
    }
  }

  async put(key: string, source: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<number> {
    const objectKey = this.blobObject(key);
    const exists = () => new Error(`a blob already exists under key ${JSON.stringify(key)}`);
    // Checked first so that a duplicate fails before any byte moves; If-None-Match settles a race.
    if ((await this.size(key)) !== undefined) throw exists();
    try {
      return await this.upload(objectKey, source);
    } catch (err) {
      if (err instanceof S3BlobStoreError && err.code === "PreconditionFailed") throw exists();
      throw err;
    }
  }

  /**
   * Writes `source` into a new object: one PUT when it fits in a part, else a multipart upload with
   * at most one part buffered. Pieces that are ranges of existing objects are copied by S3 itself
   * (UploadPartCopy) where they can make whole parts, and read into the buffered part where they
   * cannot (parts other than the last must reach 5 MiB). Either way the object appears whole on the
   * last request, and If-None-Match refuses to replace one written meanwhile.
   */
  private async upload(objectKey: string, source: Iterable<Uint8Array | CopyRange> | AsyncIterable<Uint8Array | CopyRange>): Promise<number> {
    let buffered: Buffer[] = [];
    let bufferedBytes = 0;
    let total = 0;
    let uploadId: string | undefined;
    const parts: CompletedPart[] = [];
    const multipart = async () => {
      if (uploadId === undefined) {
        const created = await this.request("CreateMultipartUpload", objectKey, () => this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey })));
        if (!created.UploadId) throw new Error(`S3 CreateMultipartUpload of ${objectKey} answered no upload id`);
        uploadId = created.UploadId;
      }
      return { UploadId: uploadId, PartNumber: parts.length + 1, Bucket: this.bucket, Key: objectKey };
    };
    const flush = async () => {
      const body = Buffer.concat(buffered, bufferedBytes);
      buffered = [];
      bufferedBytes = 0;
      const part = await multipart();
      const uploaded = await this.request("UploadPart", objectKey, () => this.client.send(new UploadPartCommand({ ...part, Body: body, ContentLength: body.byteLength })));
      parts.push({ PartNumber: part.PartNumber, ETag: uploaded.ETag });
    };
    const bufferBytes = async (bytes: Buffer) => {
      let rest = bytes;
      while (bufferedBytes + rest.byteLength >= this.partSize) {
        const take = this.partSize - bufferedBytes;
        buffered.push(rest.subarray(0, take));
        bufferedBytes += take;
        rest = rest.subarray(take);
        await flush();
      }
      if (rest.byteLength > 0) {
        buffered.push(rest);
        bufferedBytes += rest.byteLength;
      }
    };
    const copyRange = async ({ copyFrom, start, end }: CopyRange) => {
      let from = start;
      // An open part is filled first, so that it reaches the minimum before any copied part follows it.
      if (bufferedBytes > 0) {
        const take = Math.min(end - from + 1, this.partSize - bufferedBytes);
        await bufferBytes(await this.readRange(copyFrom, from, from + take - 1));
        from += take;
      }
      while (end - from + 1 >= minimumPartSize) {
        const length = Math.min(end - from + 1, maximumCopyPartSize);
        const part = await multipart();
        const range = `bytes=${from}-${from + length - 1}`;
        const copied = await this.request("UploadPartCopy", objectKey, () =>
          this.client.send(new UploadPartCopyCommand({ ...part, CopySource: `${this.bucket}/${encodeURIComponent(copyFrom).replace(/%2F/g, "/")}`, CopySourceRange: range })),
        );
        parts.push({ PartNumber: part.PartNumber, ETag: copied.CopyPartResult?.ETag });
        from += length;
      }
      if (from <= end) await bufferBytes(await this.readRange(copyFrom, from, end));
    };
    try {
      for await (const piece of source) {
        if ("copyFrom" in piece) {
          total += piece.end - piece.start + 1;
          await copyRange(piece);
        } else {
          total += piece.byteLength;
          // Copied: the caller may reuse its chunk once we move on.
          await bufferBytes(Buffer.from(piece));
        }
      }
      if (uploadId === undefined) {
        const body = Buffer.concat(buffered, bufferedBytes);
        await this.request("PutObject", objectKey, () => this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: body, ContentLength: body.byteLength, IfNoneMatch: "*" })));
        return total;
      }
      if (bufferedBytes > 0) await flush();
      const id = uploadId;
      await this.request("CompleteMultipartUpload", objectKey, () =>
        this.client.send(new CompleteMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId: id, MultipartUpload: { Parts: parts }, IfNoneMatch: "*" })),
      );
      uploadId = undefined;
      return total;
    } catch (err) {
      if (uploadId !== undefined) {
        const id = uploadId;
        // Best effort: a leftover incomplete upload is invisible and a bucket lifecycle rule can expire it.
        await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId: id })).catch(() => undefined);
      }
      throw err;
    }
  }

  /** Bytes start..end (inclusive) of an object, checked to be all there. */
  private async readRange(objectKey: string, start: number, end: number): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of await this.readObject(objectKey, objectKey, { start, end })) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    if (bytes.byteLength !== end - start + 1) throw new Error(`S3 object ${objectKey} answered ${bytes.byteLength} bytes for ${start}..${end}; was it rewritten meanwhile?`);
    return bytes;
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const objectKey = this.blobObject(key);
    return this.readObject(key, objectKey, range);
  }

  private async readObject(key: string, objectKey: string, range?: ByteRange): Promise<Readable> {
    try {
      const answer = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey, Range: range ? `bytes=${range.start}-${range.end}` : undefined }));
      if (!(answer.Body instanceof Readable)) throw new Error(`S3 GetObject of ${objectKey} answered no stream`);
      return answer.Body;
    } catch (err) {
      if (isMissing(err)) throw new BlobNotFoundError(key);
      throw new S3BlobStoreError("GetObject", `s3://${this.bucket}/${objectKey}`, errorCode(err), err);
    }
  }

  async size(key: string): Promise<number | undefined> {
    const objectKey = this.blobObject(key);
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }));
      return head.ContentLength ?? 0;
    } catch (err) {
      if (isMissing(err)) return undefined;
      // HEAD answers carry no body, so no S3 error code (a wrong secret shows as a bare 403): a
      // one-byte GET of the same object fetches the server's own account of the refusal.
      const diagnosis = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey, Range: "bytes=0-0" })).then(
        (answer) => {
          (answer.Body as Readable | undefined)?.destroy();
          return err;
        },
        (refusal: unknown) => refusal,
      );
      throw new S3BlobStoreError("HeadObject", `s3://${this.bucket}/${objectKey}`, errorCode(diagnosis), diagnosis);
    }
  }

  async delete(key: string): Promise<void> {
    const objectKey = this.blobObject(key);
    // S3 answers success for a missing key, which is the idempotence the port asks for.
    await this.request("DeleteObject", objectKey, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey })));
  }

  async withLocalFile<T>(key: string, use: (path: string) => Promise<T>): Promise<T> {
    const stream = await this.read(key);
    const folder = await mkdtemp(join(tmpdir(), "parley-s3-blob-"));
    try {
      const path = join(folder, checkBlobKey(key));
      await pipeline(stream, createWriteStream(path, { flags: "wx" }));
      return await use(path);
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  }

  /**
   * Presigned GET of the blob, valid for `expiresInSeconds` (S3 allows at most 7 days): anyone
   * holding the URL can download without credentials, straight from S3. `contentType` and
   * `contentDisposition` and `cacheControl` are signed into the URL and returned as the response's
   * headers (S3 can set no others: no nosniff, no Content-Security-Policy).
   */
  async presignedReadUrl(key: string, expiresInSeconds: number, headers: { contentType?: string; contentDisposition?: string; cacheControl?: string } = {}): Promise<string> {
    if (!Number.isInteger(expiresInSeconds) || expiresInSeconds < 1 || expiresInSeconds > 604_800) throw new Error(`a presigned URL lives 1..604800 s; got ${expiresInSeconds}`);
    const command = new GetObjectCommand({ Bucket: this.bucket, Key: this.blobObject(key), ResponseContentType: headers.contentType, ResponseContentDisposition: headers.contentDisposition, ResponseCacheControl: headers.cacheControl });
    return getSignedUrl(this.presigner, command, { expiresIn: expiresInSeconds });
  }

  /** The upload's parts, by part name. */
  private async stagedParts(uploadKey: string): Promise<Map<string, StagedPart>> {
    const folder = this.stagingFolder(uploadKey);
    const parts = new Map<string, StagedPart>();
    let continuationToken: string | undefined;
    do {
      const token = continuationToken;
      const page = await this.request("ListObjectsV2", folder, () => this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: folder, ContinuationToken: token })));
      for (const object of page.Contents ?? []) {
        if (object.Key) parts.set(object.Key.slice(folder.length), { objectKey: object.Key, size: object.Size ?? 0 });
      }
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (continuationToken);
    return parts;
  }

  private async deleteObjects(objectKeys: string[], what: string): Promise<void> {
    for (let at = 0; at < objectKeys.length; at += 1000) {
      const batch = objectKeys.slice(at, at + 1000);
      const answer = await this.request("DeleteObjects", what, () => this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } })));
      const failed = answer.Errors?.[0];
      if (failed) throw new Error(`S3 DeleteObjects of ${failed.Key} failed: ${failed.Code}: ${failed.Message}`);
    }
  }

  async writeStaged(uploadKey: string, part: string, bytes: Uint8Array): Promise<void> {
    const objectKey = `${this.stagingFolder(uploadKey)}${checkBlobKey(part)}`;
    const body = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    await this.request("PutObject", objectKey, () => this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: body, ContentLength: body.byteLength })));
  }

  async commitStaged(uploadKey: string, parts: readonly string[], key: string, size: number): Promise<void> {
    const staged = await this.stagedParts(uploadKey);
    const existing = await this.size(key);
    if (staged.size === 0) {
      // Committed before: the blob is there with the right size.
      if (existing === size) return;
      throw new BlobNotFoundError(uploadKey);
    }
    const named = parts.map((part) => {
      const found = staged.get(checkBlobKey(part));
      if (!found) throw new Error(`staged upload ${uploadKey} has no part ${part}`);
      return found;
    });
    const stagedSize = named.reduce((total, part) => total + part.size, 0);
    if (stagedSize !== size) throw new Error(`staged upload ${uploadKey} holds ${stagedSize} bytes in the named parts, not ${size}`);
    if (existing === undefined) {
      try {
        await this.upload(
          this.blobObject(key),
          named.filter((part) => part.size > 0).map((part) => ({ copyFrom: part.objectKey, start: 0, end: part.size - 1 })),
        );
      } catch (err) {
        // Another node finished the same commit meanwhile.
        if (!(err instanceof S3BlobStoreError && err.code === "PreconditionFailed" && (await this.size(key)) === size)) throw err;
      }
    } else if (existing !== size) {
      throw new Error(`a blob of ${existing} bytes already exists under key ${JSON.stringify(key)}; the staged upload ${uploadKey} would make ${size}`);
    }
    // A crash before this line leaves the parts beside the blob: the commit's repetition lands here.
    await this.deleteObjects(
      [...staged.values()].map((part) => part.objectKey),
      this.stagingFolder(uploadKey),
    );
  }

  async discardStagedPart(uploadKey: string, part: string): Promise<void> {
    const objectKey = `${this.stagingFolder(uploadKey)}${checkBlobKey(part)}`;
    await this.request("DeleteObject", objectKey, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey })));
  }

  async discardStaged(uploadKey: string): Promise<void> {
    const staged = await this.stagedParts(uploadKey);
    await this.deleteObjects(
      [...staged.values()].map((part) => part.objectKey),
      this.stagingFolder(uploadKey),
    );
  }
}
