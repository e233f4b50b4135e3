// MediaService: single-request and resumable chunked uploads, signed download links, and the
// bytes behind those links. Bytes live behind the blob-store port, metadata and upload sessions
// in the store, so an upload in progress survives a restart of the process.
//
// An upload session is worked on by one caller at a time per session id: chunk writes and the
// completion of one session run through a mailbox (and are sharded by session id across nodes),
// and the store moves `uploaded` only from the position the writer saw, so a second writer that
// slipped past the routing (two nodes during an ownership move) is refused rather than
// interleaving bytes. Each attempt stages its chunk under a part name of its own before that
// compare-and-set, which records the part with the new position: the refused attempt's bytes
// cannot have replaced the accepted ones, it removes them itself, and completion assembles the
// recorded parts only (what a crashed attempt left goes with the session's staged upload).
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import {
  CompleteUploadRequestSchema,
  CompleteUploadResponseSchema,
  GetDownloadURLRequestSchema,
  GetDownloadURLResponseSchema,
  InitUploadRequestSchema,
  InitUploadResponseSchema,
  UploadChunkRequestSchema,
  UploadChunkResponseSchema,
  UploadFileRequestSchema,
  UploadFileResponseSchema,
} from "../../shared/gen/api/v1/media_pb.js";
import { MediaPurpose, type MediaFileInfoSchema } from "../../shared/gen/shared/v1/media_pb.js";
import type { Caller } from "../../shared/caller.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import { runInBackground, type BackgroundLogger } from "../../shared/background.js";
import { publicBaseUrl } from "../../shared/public-url.js";
import {
  mediaDownloadMetaKey,
  mediaPathPrefix,
  type MediaDownloadHead,
  type MediaDownloadParams,
  type RequestedRange,
} from "../../shared/media-download.js";
import type { BlobStore, ByteRange } from "../../ports/blob-store/blob-store.js";
import type { EngineDeps } from "../deps.js";
import { Mailboxes } from "../../shared/mailbox.js";
import { analyzeMedia, type MediaFacts } from "./media-analysis.js";
import { routeToOwner } from "../shard-owners.js";
import { requireCaller, rpcAction } from "../rpc-action.js";
import type { MediaFileRecord, UploadSessionRecord } from "../../ports/store/store.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

export const MediaLimits = {
  /** UploadFile: 5 MB of data. */
  singleUploadMaxBytes: 5 * 1024 * 1024,
  /** InitUpload: declared size 1..104857600. */
  chunkedUploadMaxBytes: 104_857_600,
  sessionTtlMs: 24 * 60 * 60 * 1000,
  downloadUrlTtlMs: 60 * 60 * 1000,
  /** How often expired sessions and their staged bytes are removed. */
  sweepIntervalMs: 10 * 60 * 1000,
} as const;

const signingSecretName = "media-url-signing";
const publicPurposes: ReadonlySet<number> = new Set([MediaPurpose.AVATAR, MediaPurpose.GROUP_AVATAR]);

// type "/" subtype [";" parameters], with RFC 9110 token characters; parameters in visible ASCII,
// since the value goes back out as a Content-Type header, which carries nothing else.
const mimeType = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+\/[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*;[\x20-\x7e]*)?$/;

/** 128 random bits, hex: file and session ids cannot be guessed or enumerated. */
function newId(): string {
  return randomBytes(16).toString("hex");
}

function sha256Hex(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

function checkContentType(contentType: string): void {
  if (!mimeType.test(contentType)) throw new ParleyError(Errors.invalidContentType, { field: "content_type" });
}

interface Described {
  facts: MediaFacts;
  thumbnail?: Omit<MediaFileRecord, "ownerId" | "createdAt">;
}

class MediaService {
  private signingKey: Buffer | undefined;
  private readonly sessions = new Mailboxes();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    private readonly deps: EngineDeps,
    private readonly blobs: BlobStore,
  ) {}

  async start(logger: BackgroundLogger): Promise<void> {
    // Every engine node must sign and verify with the same key, so it lives in the shared store.
    const key = await this.deps.store.media.ensureSecret(signingSecretName, randomBytes(32).toString("base64url"), this.deps.clock.now());
    this.signingKey = Buffer.from(key, "base64url");
    // One node of a cluster sweeps at a time (the sessions are listed across the whole store).
    const sweepIfLeading = async () => {
      if (await this.deps.ownership.leads("upload-sweep")) await this.sweep();
    };
    // Expired sessions are gone before the node serves; a sweep that fails (at start too) waits
    // for the next period and does not stop the start: nothing depends on it meanwhile.
    const sweepInBackground = () => runInBackground("upload_sweep", sweepIfLeading, logger, "removing expired upload sessions");
    await sweepInBackground();
    this.sweeper = setInterval(() => void sweepInBackground(), MediaLimits.sweepIntervalMs);
    this.sweeper.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    await this.sessions.drain();
  }

  // ---- links

  private baseUrl(host: string): string {
    const base = publicBaseUrl(this.deps.config, host);
    if (!base) throw new ParleyError(Errors.publicUrlUnknown);
    return base;
  }

  private sign(fileId: string, expires: string): Buffer {
    if (!this.signingKey) throw new ParleyError(Errors.unavailable);
    return createHmac("sha256", this.signingKey).update(`${fileId}\n${expires}`).digest();
  }

  private fileInfo(file: MediaFileRecord, base: string | undefined): MessageInitShape<typeof MediaFileInfoSchema> {
    return {
      fileId: file.fileId,
      fileName: file.fileName,
      contentType: file.contentType,
      size: BigInt(file.size),
      checksum: file.checksum,
      width: file.width,
      height: file.height,
      durationMs: BigInt(file.durationMs),
      thumbnailFileId: file.thumbnailFileId,
      publicUrl: base !== undefined && publicPurposes.has(file.purpose) ? `${base}${mediaPathPrefix}${file.fileId}` : "",
    };
  }

  // ---- storing files

  /** Reads what the stored blob is (dimensions, duration) and stores a thumbnail for message images. */
  private async describe(fileId: string, fileName: string, contentType: string, purpose: number): Promise<Described> {
    const facts = await this.blobs.withLocalFile(fileId, (path) => analyzeMedia(path, contentType, purpose === MediaPurpose.MESSAGE));
    if (!facts.thumbnail) return { facts };
    const { data, width, height } = facts.thumbnail;
    const thumbnailId = newId();
    await this.blobs.put(thumbnailId, [data]);
    const stem = fileName.replace(/\.[^.]*$/, "").slice(0, 200) || "image";
    return {
      facts,
      thumbnail: {
        fileId: thumbnailId,
        purpose: MediaPurpose.MESSAGE,
        fileName: `${stem}-thumbnail.jpg`,
        contentType: facts.thumbnail.contentType,
        size: data.byteLength,
        checksum: sha256Hex(data),
        width,
        height,
        durationMs: 0,
        thumbnailFileId: "",
      },
    };
  }

  /** The records to store for a new file: its thumbnail's first, then its own. */
  private records(file: Omit<MediaFileRecord, "width" | "height" | "durationMs" | "thumbnailFileId" | "createdAt">, described: Described): MediaFileRecord[] {
    const createdAt = this.deps.clock.now();
    const { facts, thumbnail } = described;
    const main: MediaFileRecord = {
      ...file,
      width: facts.width,
      height: facts.height,
      durationMs: facts.durationMs,
      thumbnailFileId: thumbnail?.fileId ?? "",
      createdAt,
    };
    return thumbnail ? [{ ...thumbnail, ownerId: file.ownerId, createdAt }, main] : [main];
  }

  async uploadFile(caller: Caller, request: { fileName: string; contentType: string; purpose: MediaPurpose; data: Uint8Array }, host: string) {
    if (request.purpose === MediaPurpose.UNSPECIFIED) throw new ParleyError(Errors.purposeRequired, { field: "purpose" });
    if (request.data.byteLength === 0) throw new ParleyError(Errors.invalidArgument, { field: "data" }, "data: the file is empty");
    if (request.data.byteLength > MediaLimits.singleUploadMaxBytes) {
      throw new ParleyError(Errors.fileTooLarge, { maxBytes: String(MediaLimits.singleUploadMaxBytes), size: String(request.data.byteLength) });
    }
    checkContentType(request.contentType);
    // Resolved before anything is stored: a public file needs its permanent URL in the answer.
    const base = publicPurposes.has(request.purpose) ? this.baseUrl(host) : undefined;
    const fileId = newId();
    await this.blobs.put(fileId, [request.data]);
    let records: MediaFileRecord[] = [];
    try {
      records = this.records(
        {
          fileId,
          ownerId: caller.userId,
          purpose: request.purpose,
          fileName: request.fileName,
          contentType: request.contentType,
          size: request.data.byteLength,
          checksum: sha256Hex(request.data),
        },
        await this.describe(fileId, request.fileName, request.contentType, request.purpose),
      );
      await this.deps.store.media.insertFiles(records);
    } catch (err) {
      // Bytes without metadata are unreachable; remove them rather than leak disk.
      await Promise.all([fileId, ...records.map((r) => r.fileId)].map((id) => this.blobs.delete(id).catch(() => undefined)));
      throw err;
    }
    return { file: this.fileInfo(records[records.length - 1], base) };
  }

  // ---- chunked uploads

  async initUpload(caller: Caller, request: { fileName: string; contentType: string; size: bigint }) {
    if (request.size <= 0n) throw new ParleyError(Errors.invalidArgument, { field: "size" }, "size: must be greater than 0");
    if (request.size > BigInt(MediaLimits.chunkedUploadMaxBytes)) {
      throw new ParleyError(Errors.uploadTooLarge, { maxBytes: String(MediaLimits.chunkedUploadMaxBytes), size: String(request.size) });
    }
    checkContentType(request.contentType);
    const size = Number(request.size);
    const now = this.deps.clock.now();
    const open = await this.deps.store.media.findResumableSession(caller.userId, request.fileName, request.contentType, size, now);
    if (open) return { sessionId: open.sessionId, uploaded: BigInt(open.uploaded), createdAt: BigInt(open.createdAt) };
    const session: UploadSessionRecord = {
      sessionId: newId(),
      ownerId: caller.userId,
      fileId: newId(),
      fileName: request.fileName,
      contentType: request.contentType,
      size,
      uploaded: 0,
      parts: [],
      createdAt: now,
      expiresAt: now + MediaLimits.sessionTtlMs,
    };
    await this.deps.store.media.createSession(session);
    return { sessionId: session.sessionId, uploaded: 0n, createdAt: BigInt(now) };
  }

  /** The caller's open session; NOT_FOUND when missing, expired (it is removed then) or someone else's. */
  private async openSession(caller: Caller, sessionId: string): Promise<UploadSessionRecord> {
    const session = await this.deps.store.media.getSession(sessionId);
    if (!session || session.ownerId !== caller.userId) throw new ParleyError(Errors.uploadSessionNotFound);
    // A session begun before staged parts were recorded holds bytes in the earlier layout, which
    // nothing assembles any more: the client starts the upload again.
    const earlierLayout = session.uploaded > 0 && session.parts.length === 0;
    if (session.expiresAt <= this.deps.clock.now() || earlierLayout) {
      await this.discard(session);
      throw new ParleyError(Errors.uploadSessionNotFound);
    }
    return session;
  }

  private async discard(session: UploadSessionRecord): Promise<void> {
    await this.deps.store.media.deleteSession(session.sessionId);
    await this.blobs.discardStaged(session.sessionId);
    // A completion interrupted after its commit left the file's bytes without a record.
    if (!(await this.deps.store.media.getFile(session.fileId))) await this.blobs.delete(session.fileId).catch(() => undefined);
  }

  uploadChunk(caller: Caller, request: { sessionId: string; chunk: Uint8Array; offset: bigint }) {
    return this.sessions.run(request.sessionId, async () => {
      const session = await this.openSession(caller, request.sessionId);
      const offsetMismatch = (expected: number) =>
        new ParleyError(Errors.uploadOffsetMismatch, { expectedOffset: String(expected), offset: String(request.offset) });
      if (request.offset !== BigInt(session.uploaded)) throw offsetMismatch(session.uploaded);
      const next = session.uploaded + request.chunk.byteLength;
      if (next > session.size) {
        throw new ParleyError(Errors.chunkExceedsSize, { declaredSize: String(session.size), uploaded: String(session.uploaded), chunkBytes: String(request.chunk.byteLength) });
      }
      // An empty chunk at the right offset is a harmless probe of the position.
      if (request.chunk.byteLength === 0) return { uploaded: BigInt(session.uploaded) };
      // Offset first (zero-padded, so a listing is in upload order), then this attempt's own id.
      const part = `${String(session.uploaded).padStart(15, "0")}-${randomBytes(8).toString("hex")}`;
      // "refused" until the store says otherwise: a part whose write failed is nobody's either. When
      // the store's answer is lost ("unknown") the part stays, as it may be recorded.
      let outcome: "refused" | "unknown" | "recorded" = "refused";
      try {
        await this.blobs.writeStaged(session.sessionId, part, request.chunk);
        outcome = "unknown";
        outcome = (await this.deps.store.media.advanceSession(session.sessionId, session.uploaded, next, part)) ? "recorded" : "refused";
      } finally {
        if (outcome === "refused") await this.blobs.discardStagedPart(session.sessionId, part).catch(() => undefined);
      }
      if (outcome !== "recorded") {
        const now = await this.deps.store.media.getSession(session.sessionId);
        if (!now) throw new ParleyError(Errors.uploadSessionNotFound);
        throw offsetMismatch(now.uploaded);
      }
      return { uploaded: BigInt(next) };
    });
  }

  completeUpload(caller: Caller, request: { sessionId: string }) {
    return this.sessions.run(request.sessionId, async () => {
      const session = await this.openSession(caller, request.sessionId);
      if (session.uploaded !== session.size) {
        throw new ParleyError(Errors.uploadIncomplete, { uploaded: String(session.uploaded), declaredSize: String(session.size) });
      }
      // The session's file id was fixed at InitUpload, so a completion interrupted after the
      // commit finds its blob again instead of making a second one.
      await this.blobs.commitStaged(session.sessionId, session.parts, session.fileId, session.size);
      const hash = createHash("sha256");
      for await (const chunk of await this.blobs.read(session.fileId)) hash.update(chunk as Uint8Array);
      const described = await this.describe(session.fileId, session.fileName, session.contentType, MediaPurpose.MESSAGE);
      const records = this.records(
        {
          fileId: session.fileId,
          ownerId: caller.userId,
          purpose: MediaPurpose.MESSAGE,
          fileName: session.fileName,
          contentType: session.contentType,
          size: session.size,
          checksum: hash.digest("hex"),
        },
        described,
      );
      let completed = false;
      try {
        completed = await this.deps.store.media.completeSession(session.sessionId, records);
      } finally {
        // A retry makes its own thumbnail; this one would be unreachable. The file's own blob stays
        // for the retry (or for the expiry sweep, see discard).
        if (!completed && described.thumbnail) await this.blobs.delete(described.thumbnail.fileId).catch(() => undefined);
      }
      if (!completed) throw new ParleyError(Errors.uploadSessionNotFound);
      return { file: this.fileInfo(records[records.length - 1], undefined) };
    });
  }

  /** Removes sessions whose lifetime is over, with their staged bytes. */
  async sweep(): Promise<void> {
    const batch = 100;
    for (;;) {
      const expired = await this.deps.store.media.listExpiredSessions(this.deps.clock.now(), batch);
      for (const stale of expired) {
        await this.sessions.run(stale.sessionId, async () => {
          const session = await this.deps.store.media.getSession(stale.sessionId);
          if (session && session.expiresAt <= this.deps.clock.now()) await this.discard(session);
        });
      }
      if (expired.length < batch) return;
    }
  }

  // ---- downloads

  async getDownloadUrl(request: { fileId: string }, host: string) {
    const file = await this.deps.store.media.getFile(request.fileId);
    if (!file) throw new ParleyError(Errors.mediaFileNotFound);
    const expiresAt = this.deps.clock.now() + MediaLimits.downloadUrlTtlMs;
    const signature = this.sign(file.fileId, String(expiresAt)).toString("hex");
    const url = `${this.baseUrl(host)}${mediaPathPrefix}${file.fileId}?expires=${expiresAt}&signature=${signature}`;
    return { url, expiresAt: BigInt(expiresAt) };
  }

  /**
   * Checks a link and opens the bytes it names. A signed link must carry a valid signature
   * (checked before the file is looked up, so a forged link learns nothing) and be unexpired; an
   * unsigned link opens only public files.
   */
  async download(params: MediaDownloadParams): Promise<{ head: MediaDownloadHead; range: ByteRange; file: MediaFileRecord }> {
    let expiresAt = 0;
    if (params.expires !== undefined || params.signature !== undefined) {
      const expires = params.expires ?? "";
      const signature = params.signature ?? "";
      if (!/^\d{1,15}$/.test(expires) || !/^[0-9a-f]{64}$/.test(signature)) throw new ParleyError(Errors.downloadLinkInvalid);
      if (!timingSafeEqual(this.sign(params.fileId, expires), Buffer.from(signature, "hex"))) throw new ParleyError(Errors.downloadLinkInvalid);
      expiresAt = Number(expires);
      if (expiresAt <= this.deps.clock.now()) throw new ParleyError(Errors.downloadLinkExpired, { expiresAt: expires });
    }
    const file = await this.deps.store.media.getFile(params.fileId);
    if (!file) throw new ParleyError(Errors.mediaFileNotFound);
    if (expiresAt === 0 && !publicPurposes.has(file.purpose)) throw new ParleyError(Errors.downloadLinkInvalid);

    const etag = `"${file.checksum}"`;
    const wanted = params.range && (params.ifRange === undefined || params.ifRange === etag) ? params.range : undefined;
    const range = wanted ? resolveRange(wanted, file.size) : { start: 0, end: file.size - 1 };
    return {
      file,
      range,
      head: {
        status: wanted ? 206 : 200,
        contentType: mimeType.test(file.contentType) ? file.contentType : "application/octet-stream",
        fileName: file.fileName,
        size: file.size,
        start: range.start,
        end: range.end,
        etag,
        public: publicPurposes.has(file.purpose),
        // The bytes behind a file id never change, so a public file may be cached for a year.
        maxAgeSeconds: publicPurposes.has(file.purpose) ? 365 * 24 * 3600 : Math.max(0, Math.floor((expiresAt - this.deps.clock.now()) / 1000)),
      },
    };
  }

  async openBytes(fileId: string, range: ByteRange) {
    return this.blobs.read(fileId, range);
  }
}

/** The inclusive byte positions a requested range selects in a file of `size` bytes (RFC 9110 14.1.2). */
function resolveRange(range: RequestedRange, size: number): ByteRange {
  if ("suffix" in range) {
    if (range.suffix <= 0) throw new ParleyError(Errors.rangeNotSatisfiable, { size: String(size) });
    return { start: Math.max(0, size - range.suffix), end: size - 1 };
  }
  if (range.start >= size) throw new ParleyError(Errors.rangeNotSatisfiable, { size: String(size) });
  return { start: range.start, end: Math.min(range.end ?? size - 1, size - 1) };
}

// An upload session's calls run in its mailbox on one node; the key moves only when that node leaves.
const shardBySession = routeToOwner("request.sessionId", "upload");

export function mediaService(deps: EngineDeps, blobs: BlobStore): ServiceSchema {
  const media = new MediaService(deps, blobs);
  return {
    name: "media",
    actions: {
      uploadFile: rpcAction(UploadFileRequestSchema, UploadFileResponseSchema, ({ request, caller, host }) =>
        media.uploadFile(requireCaller(caller), request, host),
      ),
      initUpload: rpcAction(InitUploadRequestSchema, InitUploadResponseSchema, ({ request, caller }) => media.initUpload(requireCaller(caller), request)),
      uploadChunk: {
        ...shardBySession,
        handler: rpcAction(UploadChunkRequestSchema, UploadChunkResponseSchema, ({ request, caller }) => media.uploadChunk(requireCaller(caller), request)),
      },
      completeUpload: {
        ...shardBySession,
        handler: rpcAction(CompleteUploadRequestSchema, CompleteUploadResponseSchema, ({ request, caller }) => media.completeUpload(requireCaller(caller), request)),
      },
      getDownloadURL: rpcAction(GetDownloadURLRequestSchema, GetDownloadURLResponseSchema, ({ request, caller, host }) => {
        requireCaller(caller);
        return media.getDownloadUrl(request, host);
      }),
      // Not an RPC: the edge's HTTP handler calls it for GET and HEAD on download links. The
      // answer is a byte stream (none for HEAD) with the response head in the call's meta, so it
      // works the same in one process and across a transporter, which streams it in packets.
      download: {
        handler: async (ctx: Context<MediaDownloadParams, Record<string, unknown>>) => {
          const { head, range, file } = await media.download(ctx.params);
          ctx.meta[mediaDownloadMetaKey] = head;
          return ctx.params.headOnly ? null : media.openBytes(file.fileId, range);
        },
      },
    } satisfies ActionsOf<EngineActions, "media">,
    async started() {
      await media.start(this.logger);
    },
    async stopped() {
      await media.stop();
    },
  };
}
