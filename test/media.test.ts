import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Code } from "@connectrpc/connect";
import { ListObjectsV2Command } from "@aws-sdk/client-s3";
import { expect } from "chai";
import sharp from "sharp";
import type { Parley } from "../server.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { MediaPurpose } from "../shared/gen/shared/v1/media_pb.js";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import { device, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, freshEmail, lastCode, startTestServer, startTwoNodes, testTopology, wireModes, type TestServer, type WireMode } from "./support/harness.js";
import { createAgent } from "./support/social.js";
import { testS3Client } from "./support/s3.js";

/** Whether a session's staged bytes are still kept, wherever the server keeps blobs. */
async function stagedBytesExist(server: TestServer, sessionId: string): Promise<boolean> {
  const { blobs } = server.config.cluster;
  if (blobs.kind === "disk") return existsSync(join(server.dataDir, "media", "staging", sessionId));
  const listed = await (await testS3Client()).send(new ListObjectsV2Command({ Bucket: blobs.bucket, Prefix: `staging/${sessionId}/` }));
  return (listed.KeyCount ?? 0) > 0;
}

const MB5 = 5 * 1024 * 1024;
const hour = 60 * 60 * 1000;

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

async function png(width: number, height: number): Promise<Buffer> {
  return sharp({ create: { width, height, channels: 4, background: { r: 10, g: 120, b: 200, alpha: 0.5 } } }).png().toBuffer();
}

/** A PCM WAV file of the given length: the simplest audio whose duration a parser must compute. */
function wav(durationMs: number, sampleRate = 8000): Buffer {
  const samples = (sampleRate * durationMs) / 1000;
  const buffer = Buffer.alloc(44 + samples * 2);
  buffer.write("RIFF", 0);
  buffer.writeUInt32LE(36 + samples * 2, 4);
  buffer.write("WAVE", 8);
  buffer.write("fmt ", 12);
  buffer.writeUInt32LE(16, 16);
  buffer.writeUInt16LE(1, 20);
  buffer.writeUInt16LE(1, 22);
  buffer.writeUInt32LE(sampleRate, 24);
  buffer.writeUInt32LE(sampleRate * 2, 28);
  buffer.writeUInt16LE(2, 32);
  buffer.writeUInt16LE(16, 34);
  buffer.write("data", 36);
  buffer.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) buffer.writeInt16LE(Math.round(Math.sin(i / 5) * 8000), 44 + i * 2);
  return buffer;
}

async function get(url: string, headers: Record<string, string> = {}, method = "GET") {
  const response = await fetch(url, { method, headers });
  return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) };
}

/** The ErrorDetail of a download error body, which has the Connect error shape. */
function detailOf(body: Buffer) {
  const parsed = JSON.parse(body.toString("utf8")) as { code: string; details: { type: string; value: string }[] };
  expect(parsed.details).to.have.length(1);
  expect(parsed.details[0].type).to.equal("shared.v1.ErrorDetail");
  return { code: parsed.code, detail: fromBinary(ErrorDetailSchema, base64Decode(parsed.details[0].value)) };
}

async function expectDownloadError(url: string, status: number, errorName: string, headers: Record<string, string> = {}) {
  const response = await get(url, headers);
  expect(response.status, `status of ${url}`).to.equal(status);
  expect(detailOf(response.body).detail.errorName).to.equal(errorName);
  return response;
}

function media(server: { url: string }, user: { accessToken: string } | { token: string }, mode: WireMode = "json") {
  return client(server, MediaService, mode, "accessToken" in user ? user.accessToken : user.token);
}

async function downloadUrl(server: { url: string }, user: SignedIn, fileId: string): Promise<string> {
  return (await media(server, user).getDownloadURL({ fileId })).url;
}

/** InitUpload, then every chunk in order; answers the session id (not completed). */
async function uploadInChunks(api: ReturnType<typeof media>, data: Uint8Array, chunkSize: number, fileName = "clip.bin", contentType = "application/octet-stream") {
  const { sessionId, uploaded } = await api.initUpload({ fileName, contentType, size: BigInt(data.byteLength) });
  for (let offset = Number(uploaded); offset < data.byteLength; offset += chunkSize) {
    const answer = await api.uploadChunk({ sessionId, offset: BigInt(offset), chunk: data.subarray(offset, offset + chunkSize) });
    expect(answer.uploaded).to.equal(BigInt(Math.min(offset + chunkSize, data.byteLength)));
  }
  return sessionId;
}

/** A fresh access token for the same user after the clock moved past the access-token lifetime. */
async function refreshed(server: TestServer, user: SignedIn): Promise<SignedIn> {
  const renewed = await client(server, AuthService, "json").refreshToken({ refreshToken: user.refreshToken });
  return { ...user, accessToken: renewed.accessToken, refreshToken: renewed.refreshToken };
}

describe("MediaService", () => {
  let server: TestServer;
  let alice: SignedIn;
  let bob: SignedIn;
  before(async () => {
    server = await startTestServer();
    alice = await signInWithCode(server);
    bob = await signInWithCode(server);
  });
  after(async () => server.dispose());

  /** Moves the clock (less than the refresh-token lifetime) and renews both users' access tokens. */
  async function advance(ms: number) {
    server.clock.advance(ms);
    alice = await refreshed(server, alice);
    bob = await refreshed(server, bob);
  }

  describe("MediaService.UploadFile", () => {
    for (const mode of wireModes) {
      it(`stores a MESSAGE image with checksum, dimensions and a thumbnail, private (${mode})`, async () => {
        const image = await png(640, 480);
        const { file } = await media(server, alice, mode).uploadFile({ fileName: "holiday.png", contentType: "image/png", purpose: MediaPurpose.MESSAGE, data: image });
        expect(file).to.deep.include({
          fileName: "holiday.png",
          contentType: "image/png",
          size: BigInt(image.byteLength),
          checksum: sha256(image),
          width: 640,
          height: 480,
          durationMs: 0n,
          publicUrl: "",
        });
        expect(file!.fileId).to.match(/^[0-9a-f]{32}$/);
        expect(file!.thumbnailFileId).to.match(/^[0-9a-f]{32}$/);

        const original = await get(await downloadUrl(server, alice, file!.fileId));
        expect(original.status).to.equal(200);
        expect(Buffer.compare(original.body, image)).to.equal(0);

        const thumbnail = await get(await downloadUrl(server, alice, file!.thumbnailFileId));
        expect(thumbnail.status).to.equal(200);
        expect(thumbnail.headers.get("content-type")).to.equal("image/jpeg");
        const thumbnailMeta = await sharp(thumbnail.body).metadata();
        expect([thumbnailMeta.format, thumbnailMeta.width, thumbnailMeta.height]).to.deep.equal(["jpeg", 320, 240]);
      });
    }

    it("reads dimensions of png, jpeg, gif and webp by their bytes, upright by EXIF orientation", async () => {
      const api = media(server, alice);
      const base = sharp({ create: { width: 30, height: 20, channels: 3, background: "#336699" } });
      const rotatedJpeg = await base.clone().jpeg().withMetadata({ orientation: 6 }).toBuffer();
      const frames = await Promise.all(["#ff0000", "#00ff00", "#0000ff"].map((c) => sharp({ create: { width: 30, height: 20, channels: 3, background: c } }).png().toBuffer()));
      const cases: [string, Buffer, number, number][] = [
        ["image/png", await base.clone().png().toBuffer(), 30, 20],
        ["image/jpeg", await base.clone().jpeg().toBuffer(), 30, 20],
        ["image/gif", await base.clone().gif().toBuffer(), 30, 20],
        ["image/webp", await base.clone().webp().toBuffer(), 30, 20],
        // Orientation 6 (rotate 90°): a viewer shows it 20 wide and 30 high.
        ["image/jpeg", rotatedJpeg, 20, 30],
        // An animation: one frame's size.
        ["image/gif", await sharp(frames, { join: { animated: true } }).gif().toBuffer(), 30, 20],
        // Declared wrongly: the bytes decide.
        ["application/octet-stream", await base.clone().webp().toBuffer(), 30, 20],
      ];
      for (const [contentType, data, width, height] of cases) {
        const { file } = await api.uploadFile({ fileName: "x", contentType, purpose: MediaPurpose.MESSAGE, data });
        expect([file!.width, file!.height], contentType).to.deep.equal([width, height]);
        expect(file!.thumbnailFileId, contentType).to.not.equal("");
      }
      const rotated = (await api.uploadFile({ fileName: "r.jpg", contentType: "image/jpeg", purpose: MediaPurpose.MESSAGE, data: rotatedJpeg })).file!;
      const thumbnail = await sharp((await get(await downloadUrl(server, alice, rotated.thumbnailFileId))).body).metadata();
      expect([thumbnail.width, thumbnail.height]).to.deep.equal([20, 30]);
    });

    it("gives files that are not decodable images zero dimensions and no thumbnail", async () => {
      const api = media(server, alice);
      const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="50" height="40"/>');
      for (const [contentType, data] of [
        ["image/png", Buffer.from("not an image at all")],
        ["image/png", svg],
        ["text/plain", Buffer.from("hello")],
        // A PNG signature with nothing behind it.
        ["image/png", Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0])],
      ] as const) {
        const { file } = await api.uploadFile({ fileName: "f", contentType, purpose: MediaPurpose.MESSAGE, data });
        expect(file, contentType).to.deep.include({ width: 0, height: 0, durationMs: 0n, thumbnailFileId: "", checksum: sha256(data) });
      }
    });

    it("reads the duration of audio", async () => {
      const { file } = await media(server, alice).uploadFile({ fileName: "voice.wav", contentType: "audio/wav", purpose: MediaPurpose.MESSAGE, data: wav(1500) });
      expect(file).to.deep.include({ durationMs: 1500n, width: 0, height: 0, thumbnailFileId: "" });
    });

    for (const purpose of [MediaPurpose.AVATAR, MediaPurpose.GROUP_AVATAR]) {
      it(`makes ${MediaPurpose[purpose]} files public at a permanent URL, without a thumbnail`, async () => {
        const image = await png(64, 64);
        const { file } = await media(server, alice).uploadFile({ fileName: "me.png", contentType: "image/png", purpose, data: image });
        expect(file).to.deep.include({ width: 64, height: 64, thumbnailFileId: "" });
        expect(file!.publicUrl).to.equal(`${server.url}/media/${file!.fileId}`);
        const now = await get(file!.publicUrl);
        expect(now.status).to.equal(200);
        expect(Buffer.compare(now.body, image)).to.equal(0);
        expect(now.headers.get("cache-control")).to.match(/^public/);
        await advance(20 * 24 * hour);
        const later = await get(file!.publicUrl);
        expect(later.status).to.equal(200);
        expect(Buffer.compare(later.body, image)).to.equal(0);
      });
    }

    it("accepts an agent token", async () => {
      const agent = await createAgent(server, alice);
      const { file } = await media(server, agent).uploadFile({ fileName: "a.txt", contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: Buffer.from("from an agent") });
      expect(file!.size).to.equal(13n);
      expect(file!.publicUrl).to.equal("");
    });

    it("answers UNAUTHENTICATED without a token", async () => {
      await expectError(client(server, MediaService, "json").uploadFile({ fileName: "a", contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: Buffer.from("x") }), Code.Unauthenticated);
    });

    it("answers INVALID_ARGUMENT for purpose UNSPECIFIED, empty data, a missing or malformed content type, and bad names", async () => {
      const api = media(server, alice);
      const valid = { fileName: "a.txt", contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: Buffer.from("x") };
      await expectError(api.uploadFile({ ...valid, purpose: MediaPurpose.UNSPECIFIED }), Errors.purposeRequired);
      expect((await expectError(api.uploadFile({ ...valid, data: new Uint8Array() }), Errors.invalidArgument)).metadata.field).to.equal("data");
      expect((await expectError(api.uploadFile({ ...valid, contentType: "" }), Errors.invalidArgument)).metadata.field).to.equal("content_type");
      for (const contentType of ["png", "image/", "image/png\r\nx-evil: 1", "text/ plain", "image/png; name=日本"]) {
        await expectError(api.uploadFile({ ...valid, contentType }), Errors.invalidContentType);
      }
      await api.uploadFile({ ...valid, contentType: "text/plain; charset=utf-8" });
      expect((await expectError(api.uploadFile({ ...valid, fileName: "" }), Errors.invalidArgument)).metadata.field).to.equal("file_name");
      await expectError(api.uploadFile({ ...valid, fileName: "n".repeat(256) }), Errors.invalidArgument);
      await expectError(api.uploadFile({ ...valid, contentType: `text/${"p".repeat(251)}` }), Errors.invalidArgument);
      // An undefined purpose number, possible only in binary.
      await expectError(media(server, alice, "binary").uploadFile({ ...valid, purpose: 9 as MediaPurpose }), Errors.invalidArgument);
    });

    for (const mode of wireModes) {
      it(`takes exactly 5 MB and answers RESOURCE_EXHAUSTED one byte over (${mode})`, async () => {
        const api = media(server, alice, mode);
        const data = randomBytes(MB5);
        const { file } = await api.uploadFile({ fileName: "big.bin", contentType: "application/octet-stream", purpose: MediaPurpose.MESSAGE, data });
        expect(file).to.deep.include({ size: BigInt(MB5), checksum: sha256(data) });
        const detail = await expectError(
          api.uploadFile({ fileName: "big.bin", contentType: "application/octet-stream", purpose: MediaPurpose.MESSAGE, data: randomBytes(MB5 + 1) }),
          Errors.fileTooLarge,
        );
        expect(detail.metadata).to.deep.include({ maxBytes: String(MB5), size: String(MB5 + 1) });
      });
    }

    it("answers RESOURCE_EXHAUSTED with an ErrorDetail for a raw JSON body far over the limit", async () => {
      const body = JSON.stringify({ fileName: "huge.bin", contentType: "application/octet-stream", purpose: "MEDIA_PURPOSE_MESSAGE", data: randomBytes(7 * 1024 * 1024).toString("base64") });
      const response = await fetch(`${server.url}/api.v1.MediaService/UploadFile`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${alice.accessToken}` },
        body,
      });
      const { code, detail } = detailOf(Buffer.from(await response.arrayBuffer()));
      expect(code).to.equal("resource_exhausted");
      expect(detail.errorName).to.equal(Errors.requestTooLarge.errorName);
    });
  });

  describe("MediaService chunked upload (InitUpload, UploadChunk, CompleteUpload)", () => {
    for (const mode of wireModes) {
      it(`uploads in chunks, completes with checksum and metadata, and deletes the session (${mode})`, async () => {
        const api = media(server, alice, mode);
        const data = randomBytes(300_000);
        const before = server.clock.now();
        const declaration = { fileName: `archive-${mode}.zip`, contentType: "application/zip", size: BigInt(data.byteLength) };
        const init = await api.initUpload(declaration);
        expect(init.sessionId).to.match(/^[0-9a-f]{32}$/);
        expect(init.uploaded).to.equal(0n);
        expect(Number(init.createdAt)).to.be.within(before, server.clock.now());
        for (let offset = 0; offset < data.byteLength; offset += 64 * 1024) {
          await api.uploadChunk({ sessionId: init.sessionId, offset: BigInt(offset), chunk: data.subarray(offset, offset + 64 * 1024) });
        }
        const { file } = await api.completeUpload({ sessionId: init.sessionId });
        expect(file).to.deep.include({ fileName: `archive-${mode}.zip`, contentType: "application/zip", size: 300_000n, checksum: sha256(data), width: 0, height: 0, publicUrl: "", thumbnailFileId: "" });
        const downloaded = await get(await downloadUrl(server, alice, file!.fileId));
        expect(Buffer.compare(downloaded.body, data)).to.equal(0);

        await expectError(api.completeUpload({ sessionId: init.sessionId }), Errors.uploadSessionNotFound);
        await expectError(api.uploadChunk({ sessionId: init.sessionId, offset: 300_000n, chunk: Buffer.from("x") }), Errors.uploadSessionNotFound);
        // The same declaration now starts afresh.
        const again = await api.initUpload(declaration);
        expect(again.sessionId).to.not.equal(init.sessionId);
        expect(again.uploaded).to.equal(0n);
      });
    }

    it("makes image metadata and a thumbnail, and audio durations, for chunked files", async () => {
      const api = media(server, alice);
      const image = await png(800, 200);
      const { file } = await api.completeUpload({ sessionId: await uploadInChunks(api, image, 1000, "wide.png", "image/png") });
      expect(file).to.deep.include({ width: 800, height: 200, checksum: sha256(image) });
      const thumbnail = await sharp((await get(await downloadUrl(server, alice, file!.thumbnailFileId))).body).metadata();
      expect([thumbnail.width, thumbnail.height]).to.deep.equal([320, 80]);

      const sound = wav(2250);
      const audio = await api.completeUpload({ sessionId: await uploadInChunks(api, sound, 7000, "note.wav", "audio/wav") });
      expect(audio.file!.durationMs).to.equal(2250n);
    });

    it("resumes the caller's open session with the same name, type and size", async () => {
      const api = media(server, alice);
      const declaration = { fileName: `resume-${Date.now()}.bin`, contentType: "application/octet-stream", size: 100n };
      const first = await api.initUpload(declaration);
      await api.uploadChunk({ sessionId: first.sessionId, offset: 0n, chunk: randomBytes(40) });
      const resumed = await api.initUpload(declaration);
      expect(resumed).to.deep.include({ sessionId: first.sessionId, uploaded: 40n, createdAt: first.createdAt });

      for (const different of [{ size: 101n }, { contentType: "application/x-other" }, { fileName: `${declaration.fileName}.2` }]) {
        const other = await api.initUpload({ ...declaration, ...different });
        expect(other.sessionId, JSON.stringify(different, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))).to.not.equal(first.sessionId);
        expect(other.uploaded).to.equal(0n);
      }
      const bobs = await media(server, bob).initUpload(declaration);
      expect(bobs.sessionId).to.not.equal(first.sessionId);
      expect(bobs.uploaded).to.equal(0n);
    });

    it("answers NOT_FOUND for another user's session and for an unknown one", async () => {
      const sessionId = (await media(server, alice).initUpload({ fileName: "mine.bin", contentType: "application/octet-stream", size: 10n })).sessionId;
      await expectError(media(server, bob).uploadChunk({ sessionId, offset: 0n, chunk: Buffer.from("bob") }), Errors.uploadSessionNotFound);
      await expectError(media(server, bob).completeUpload({ sessionId }), Errors.uploadSessionNotFound);
      await expectError(media(server, alice).uploadChunk({ sessionId: "0".repeat(32), offset: 0n, chunk: Buffer.from("x") }), Errors.uploadSessionNotFound);
      await expectError(media(server, alice).completeUpload({ sessionId: "nope" }), Errors.uploadSessionNotFound);
      // Bob's attempt changed nothing.
      expect((await media(server, alice).uploadChunk({ sessionId, offset: 0n, chunk: Buffer.from("0123456789") })).uploaded).to.equal(10n);
    });

    it("accepts a chunk only at the expected offset, with that offset in the ErrorDetail", async () => {
      const api = media(server, alice);
      const { sessionId } = await api.initUpload({ fileName: "ordered.bin", contentType: "application/octet-stream", size: 30n });
      await api.uploadChunk({ sessionId, offset: 0n, chunk: Buffer.alloc(10, 1) });
      const ahead = await expectError(api.uploadChunk({ sessionId, offset: 20n, chunk: Buffer.alloc(10, 2) }), Errors.uploadOffsetMismatch);
      expect(ahead.metadata).to.deep.include({ expectedOffset: "10", offset: "20" });
      const behind = await expectError(api.uploadChunk({ sessionId, offset: 0n, chunk: Buffer.alloc(10, 3) }), Errors.uploadOffsetMismatch);
      expect(behind.metadata.expectedOffset).to.equal("10");
      await expectError(api.uploadChunk({ sessionId, offset: -1n, chunk: Buffer.alloc(1) }), Errors.invalidArgument);
      await expectError(api.uploadChunk({ sessionId: "", offset: 0n, chunk: Buffer.alloc(1) }), Errors.invalidArgument);
      // An empty chunk at the right offset only reports the position.
      expect((await api.uploadChunk({ sessionId, offset: 10n, chunk: new Uint8Array() })).uploaded).to.equal(10n);
      expect((await api.uploadChunk({ sessionId, offset: 10n, chunk: Buffer.alloc(20, 4) })).uploaded).to.equal(30n);
      const { file } = await api.completeUpload({ sessionId });
      expect(file!.checksum).to.equal(sha256(Buffer.concat([Buffer.alloc(10, 1), Buffer.alloc(20, 4)])));
    });

    it("answers RESOURCE_EXHAUSTED for a chunk beyond the declared size and keeps the session as it was", async () => {
      const api = media(server, alice);
      const { sessionId } = await api.initUpload({ fileName: "bounded.bin", contentType: "application/octet-stream", size: 16n });
      await api.uploadChunk({ sessionId, offset: 0n, chunk: Buffer.alloc(10) });
      const detail = await expectError(api.uploadChunk({ sessionId, offset: 10n, chunk: Buffer.alloc(7) }), Errors.chunkExceedsSize);
      expect(detail.metadata).to.deep.include({ declaredSize: "16", uploaded: "10" });
      expect((await api.uploadChunk({ sessionId, offset: 10n, chunk: Buffer.alloc(6) })).uploaded).to.equal(16n);
    });

    it("computes the checksum from the stored bytes, so only the size can disagree: FAILED_PRECONDITION until complete", async () => {
      const api = media(server, alice);
      const data = randomBytes(5000);
      const { sessionId } = await api.initUpload({ fileName: "exact.bin", contentType: "application/octet-stream", size: 5000n });
      await api.uploadChunk({ sessionId, offset: 0n, chunk: data.subarray(0, 3000) });
      const short = await expectError(api.completeUpload({ sessionId }), Errors.uploadIncomplete);
      expect(short.metadata).to.deep.include({ uploaded: "3000", declaredSize: "5000" });
      // A different retransmission of acknowledged bytes is refused, so they cannot diverge from the checksum.
      await expectError(api.uploadChunk({ sessionId, offset: 0n, chunk: randomBytes(3000) }), Errors.uploadOffsetMismatch);
      await api.uploadChunk({ sessionId, offset: 3000n, chunk: data.subarray(3000) });
      const { file } = await api.completeUpload({ sessionId });
      expect(file).to.deep.include({ size: 5000n, checksum: sha256(data) });
    });

    it("bounds the declared size: INVALID_ARGUMENT for 0 or missing fields, RESOURCE_EXHAUSTED over 100 MB", async () => {
      const api = media(server, alice);
      const valid = { fileName: "movie.mp4", contentType: "video/mp4", size: 1000n };
      expect((await expectError(api.initUpload({ ...valid, size: 0n }), Errors.invalidArgument)).metadata.field).to.equal("size");
      await expectError(api.initUpload({ ...valid, size: -5n }), Errors.invalidArgument);
      expect((await expectError(api.initUpload({ ...valid, fileName: "" }), Errors.invalidArgument)).metadata.field).to.equal("file_name");
      expect((await expectError(api.initUpload({ ...valid, contentType: "" }), Errors.invalidArgument)).metadata.field).to.equal("content_type");
      await expectError(api.initUpload({ ...valid, contentType: "movie" }), Errors.invalidContentType);
      const over = await expectError(api.initUpload({ ...valid, size: 104_857_601n }), Errors.uploadTooLarge);
      expect(over.metadata.maxBytes).to.equal("104857600");
      const largest = await api.initUpload({ ...valid, size: 104_857_600n });
      expect(largest.uploaded).to.equal(0n);
      const smallest = await api.initUpload({ ...valid, size: 1n });
      expect((await api.uploadChunk({ sessionId: smallest.sessionId, offset: 0n, chunk: Buffer.from("z") })).uploaded).to.equal(1n);
      expect((await api.completeUpload({ sessionId: smallest.sessionId })).file!.size).to.equal(1n);
    });

    it("expires a session after 24 hours: NOT_FOUND, staged bytes gone, and a new session for the same declaration", async () => {
      let api = media(server, alice);
      const declaration = { fileName: "slow.bin", contentType: "application/octet-stream", size: 20n };
      const { sessionId } = await api.initUpload(declaration);
      await api.uploadChunk({ sessionId, offset: 0n, chunk: Buffer.alloc(10) });
      await advance(24 * hour - 60_000);
      api = media(server, alice);
      expect((await api.initUpload(declaration)).sessionId).to.equal(sessionId);
      await advance(60_000);
      api = media(server, alice);
      await expectError(api.uploadChunk({ sessionId, offset: 10n, chunk: Buffer.alloc(10) }), Errors.uploadSessionNotFound);
      await expectError(api.completeUpload({ sessionId }), Errors.uploadSessionNotFound);
      expect(existsSync(join(server.dataDir, "media", "staging", sessionId))).to.equal(false);
      const fresh = await api.initUpload(declaration);
      expect(fresh.sessionId).to.not.equal(sessionId);
      expect(fresh.uploaded).to.equal(0n);
    });
  });

  describe("MediaService.GetDownloadURL and download links", () => {
    const data = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 256));
    let fileId: string;
    before(async () => {
      ({ fileId } = (await media(server, alice).uploadFile({ fileName: "report 2026 “final”.bin", contentType: "application/octet-stream", purpose: MediaPurpose.MESSAGE, data })).file!);
    });

    for (const mode of wireModes) {
      it(`answers an absolute signed URL valid for one hour (${mode})`, async () => {
        const before = server.clock.now();
        const answer = await media(server, bob, mode).getDownloadURL({ fileId });
        expect(Number(answer.expiresAt)).to.be.within(before + hour, server.clock.now() + hour);
        const url = new URL(answer.url);
        expect(`${url.origin}${url.pathname}`).to.equal(`${server.url}/media/${fileId}`);
        expect(url.searchParams.get("expires")).to.equal(String(answer.expiresAt));
        expect(url.searchParams.get("signature")).to.match(/^[0-9a-f]{64}$/);
      });
    }

    it("answers NOT_FOUND for an unknown file id and INVALID_ARGUMENT for an empty one", async () => {
      await expectError(media(server, alice).getDownloadURL({ fileId: "f".repeat(32) }), Errors.mediaFileNotFound);
      await expectError(media(server, alice).getDownloadURL({ fileId: "" }), Errors.invalidArgument);
    });

    it("serves GET and HEAD without Authorization, with type, length and safety headers", async () => {
      const url = await downloadUrl(server, alice, fileId);
      const full = await get(url);
      expect(full.status).to.equal(200);
      expect(Buffer.compare(full.body, data)).to.equal(0);
      expect(full.headers.get("content-type")).to.equal("application/octet-stream");
      expect(full.headers.get("content-length")).to.equal("1000");
      expect(full.headers.get("accept-ranges")).to.equal("bytes");
      expect(full.headers.get("etag")).to.equal(`"${sha256(data)}"`);
      expect(full.headers.get("x-content-type-options")).to.equal("nosniff");
      expect(full.headers.get("content-disposition")).to.equal(`attachment; filename="report 2026 _final_.bin"; filename*=UTF-8''report%202026%20%E2%80%9Cfinal%E2%80%9D.bin`);
      expect(full.headers.get("cache-control")).to.match(/^private, max-age=(3599|3600)$/);
      const head = await get(url, {}, "HEAD");
      expect(head.status).to.equal(200);
      expect(head.headers.get("content-length")).to.equal("1000");
      expect(head.body.byteLength).to.equal(0);
    });

    it("serves single byte ranges with 206 and Content-Range", async () => {
      const url = await downloadUrl(server, alice, fileId);
      const cases: [string, number, number][] = [
        ["bytes=0-9", 0, 9],
        ["bytes=990-", 990, 999],
        ["bytes=-5", 995, 999],
        ["bytes=995-5000", 995, 999],
        ["bytes=-5000", 0, 999],
        ["bytes=500-500", 500, 500],
      ];
      for (const [range, start, end] of cases) {
        const response = await get(url, { range });
        expect(response.status, range).to.equal(206);
        expect(response.headers.get("content-range"), range).to.equal(`bytes ${start}-${end}/1000`);
        expect(response.headers.get("content-length"), range).to.equal(String(end - start + 1));
        expect(Buffer.compare(response.body, data.subarray(start, end + 1)), range).to.equal(0);
      }
      const head = await get(url, { range: "bytes=100-199" }, "HEAD");
      expect([head.status, head.headers.get("content-length"), head.body.byteLength]).to.deep.equal([206, "100", 0]);
    });

    it("answers 416 with Content-Range for a range outside the file, and ignores ranges it does not serve", async () => {
      const url = await downloadUrl(server, alice, fileId);
      for (const range of ["bytes=1000-", "bytes=5000-6000", "bytes=-0"]) {
        const response = await expectDownloadError(url, 416, Errors.rangeNotSatisfiable.errorName, { range });
        expect(response.headers.get("content-range")).to.equal("bytes */1000");
      }
      for (const range of ["bytes=9-2", "bytes=0-1,5-6", "items=0-5", "bytes=abc"]) {
        const response = await get(url, { range });
        expect(response.status, range).to.equal(200);
        expect(response.body.byteLength, range).to.equal(1000);
      }
    });

    it("honours If-Range: the range only while the entity tag matches", async () => {
      const url = await downloadUrl(server, alice, fileId);
      const etag = `"${sha256(data)}"`;
      expect((await get(url, { range: "bytes=0-1", "if-range": etag })).status).to.equal(206);
      const stale = await get(url, { range: "bytes=0-1", "if-range": '"something-else"' });
      expect([stale.status, stale.body.byteLength]).to.deep.equal([200, 1000]);
    });

    it("answers 403 once the link has expired, by the server's clock", async () => {
      const url = await downloadUrl(server, alice, fileId);
      await advance(hour - 1000);
      expect((await get(url)).status).to.equal(200);
      await advance(1000);
      const { body } = await expectDownloadError(url, 403, Errors.downloadLinkExpired.errorName);
      expect(detailOf(body).code).to.equal("permission_denied");
      expect((await get(url, {}, "HEAD")).status).to.equal(403);
    });

    it("answers 403 for a tampered signature, expiry or file id, and for a private file without a signature", async () => {
      const url = new URL(await downloadUrl(server, alice, fileId));
      const signature = url.searchParams.get("signature")!;
      const flipped = new URL(url);
      flipped.searchParams.set("signature", (signature[0] === "0" ? "1" : "0") + signature.slice(1));
      await expectDownloadError(flipped.href, 403, Errors.downloadLinkInvalid.errorName);
      const later = new URL(url);
      later.searchParams.set("expires", String(Number(url.searchParams.get("expires")) + hour));
      await expectDownloadError(later.href, 403, Errors.downloadLinkInvalid.errorName);
      for (const bad of ["", "zz", signature.toUpperCase()]) {
        const malformed = new URL(url);
        malformed.searchParams.set("signature", bad);
        await expectDownloadError(malformed.href, 403, Errors.downloadLinkInvalid.errorName);
      }
      const withoutExpiry = new URL(url);
      withoutExpiry.searchParams.delete("expires");
      await expectDownloadError(withoutExpiry.href, 403, Errors.downloadLinkInvalid.errorName);

      const other = (await media(server, alice).uploadFile({ fileName: "o", contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: Buffer.from("other") })).file!;
      const swapped = new URL(url);
      swapped.pathname = `/media/${other.fileId}`;
      await expectDownloadError(swapped.href, 403, Errors.downloadLinkInvalid.errorName);
      await expectDownloadError(`${server.url}/media/${fileId}`, 403, Errors.downloadLinkInvalid.errorName);
    });

    it("answers 404 for an unknown file, 403 for a forged link to one, and 405 for other methods", async () => {
      await expectDownloadError(`${server.url}/media/${"a".repeat(32)}`, 404, Errors.mediaFileNotFound.errorName);
      // A path that climbs above the root: the node finds no such file; nginx in front of a cluster refuses the path itself.
      const [status, errorName] = testTopology === "cluster" ? [400, Errors.invalidArgument.errorName] : [404, Errors.mediaFileNotFound.errorName];
      await expectDownloadError(`${server.url}/media/..%2F..%2Fparley.db`, status, errorName);
      await expectDownloadError(`${server.url}/media/`, 404, Errors.mediaFileNotFound.errorName);
      await expectDownloadError(`${server.url}/media/${"a".repeat(32)}?expires=99999999999999&signature=${"0".repeat(64)}`, 403, Errors.downloadLinkInvalid.errorName);
      const post = await fetch(await downloadUrl(server, alice, fileId), { method: "POST" });
      expect(post.status).to.equal(405);
      expect(post.headers.get("allow")).to.equal("GET, HEAD");
    });

    it("lets images show inline and makes active content download instead", async () => {
      const api = media(server, alice);
      const image = (await api.uploadFile({ fileName: "p.png", contentType: "image/png", purpose: MediaPurpose.MESSAGE, data: await png(4, 4) })).file!;
      const page = (await api.uploadFile({ fileName: "x.html", contentType: "text/html", purpose: MediaPurpose.MESSAGE, data: Buffer.from("<script>alert(1)</script>") })).file!;
      const imageResponse = await get(await downloadUrl(server, alice, image.fileId));
      expect(imageResponse.headers.get("content-disposition")).to.match(/^inline;/);
      const pageResponse = await get(await downloadUrl(server, alice, page.fileId));
      expect(pageResponse.headers.get("content-type")).to.equal("text/html");
      expect(pageResponse.headers.get("content-disposition")).to.match(/^attachment;/);
      expect(pageResponse.headers.get("content-security-policy")).to.contain("sandbox");
    });
  });
});

describe("MediaService with PUBLIC_URL", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("builds download and public URLs on the configured base instead of the Host", async () => {
    server = await startTestServer({ env: { PUBLIC_URL: "https://files.parley.test/base/" } });
    const user = await signInWithCode(server);
    const api = media(server, user);
    const avatar = (await api.uploadFile({ fileName: "a.png", contentType: "image/png", purpose: MediaPurpose.AVATAR, data: await png(8, 8) })).file!;
    expect(avatar.publicUrl).to.equal(`https://files.parley.test/base/media/${avatar.fileId}`);
    const { url } = await api.getDownloadURL({ fileId: avatar.fileId });
    expect(url.startsWith(`https://files.parley.test/base/media/${avatar.fileId}?expires=`)).to.equal(true);
    // The same path and query work against the server itself (the configured base fronts it).
    const local = new URL(url);
    expect((await get(`${server.url}${local.pathname.replace("/base", "")}${local.search}`)).status).to.equal(200);
  });
});

describe("MediaService across a restart", () => {
  let server: TestServer;
  after(async () => server.dispose());

  it("resumes a chunked upload after a restart and completes it; the signing key survives too", async () => {
    server = await startTestServer();
    let user = await signInWithCode(server);
    const data = randomBytes(200_000);
    const declaration = { fileName: "resumable.bin", contentType: "application/octet-stream", size: BigInt(data.byteLength) };
    const init = await media(server, user).initUpload(declaration);
    await media(server, user).uploadChunk({ sessionId: init.sessionId, offset: 0n, chunk: data.subarray(0, 70_000) });
    await media(server, user).uploadChunk({ sessionId: init.sessionId, offset: 70_000n, chunk: data.subarray(70_000, 140_000) });
    const earlier = (await media(server, user).uploadFile({ fileName: "kept.txt", contentType: "text/plain", purpose: MediaPurpose.MESSAGE, data: Buffer.from("kept") })).file!;
    const earlierUrl = await downloadUrl(server, user, earlier.fileId);

    server = await server.restart();

    const resumed = await media(server, user).initUpload(declaration);
    expect(resumed).to.deep.include({ sessionId: init.sessionId, uploaded: 140_000n, createdAt: init.createdAt });
    await expectError(media(server, user).uploadChunk({ sessionId: init.sessionId, offset: 0n, chunk: data.subarray(0, 10) }), Errors.uploadOffsetMismatch);
    await media(server, user).uploadChunk({ sessionId: init.sessionId, offset: 140_000n, chunk: data.subarray(140_000) });
    const { file } = await media(server, user).completeUpload({ sessionId: init.sessionId });
    expect(file).to.deep.include({ size: 200_000n, checksum: sha256(data) });
    expect(Buffer.compare((await get(await downloadUrl(server, user, file!.fileId))).body, data)).to.equal(0);
    // A link signed before the restart still verifies (the restarted server listens on a new port).
    expect((await get(`${server.url}${new URL(earlierUrl).pathname}${new URL(earlierUrl).search}`)).body.toString()).to.equal("kept");

    // An expired session is swept at start-up with its staged bytes, untouched by any call.
    const abandoned = await media(server, user).initUpload({ ...declaration, fileName: "abandoned.bin" });
    await media(server, user).uploadChunk({ sessionId: abandoned.sessionId, offset: 0n, chunk: data.subarray(0, 100) });
    expect(await stagedBytesExist(server, abandoned.sessionId)).to.equal(true);
    server.clock.advance(25 * hour);
    server = await server.restart();
    expect(await stagedBytesExist(server, abandoned.sessionId)).to.equal(false);
    user = await refreshed(server, user);
    expect((await media(server, user).initUpload({ ...declaration, fileName: "abandoned.bin" })).sessionId).to.not.equal(abandoned.sessionId);
  });
});

describe("MediaService with the API tier and the engine on two brokers", () => {
  let edge: Parley;
  let engine: Parley;
  let dataDir: string;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-media-distributed-"));
    ({ edge, engine } = await startTwoNodes(dataDir, "media"));
  });

  after(async () => {
    await edge?.stop();
    await engine?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("uploads in chunks and streams downloads, whole and ranged, from the engine node", async () => {
    const email = freshEmail("media");
    const auth = client(edge, AuthService, "binary");
    const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
    const signed = await auth.verifyCode({ verifyToken, code: lastCode({ codesFile: join(dataDir, "codes.jsonl") } as TestServer, email), deviceInfo: device() });
    const api = client(edge, MediaService, "binary", signed.accessToken);
    const data = randomBytes(600_000);
    const { file } = await api.completeUpload({ sessionId: await uploadInChunks(api, data, 150_000) });
    expect(file!.checksum).to.equal(sha256(data));
    const { url } = await api.getDownloadURL({ fileId: file!.fileId });
    const whole = await get(url);
    expect(whole.status).to.equal(200);
    expect(Buffer.compare(whole.body, data)).to.equal(0);
    const part = await get(url, { range: "bytes=123456-234567" });
    expect(part.status).to.equal(206);
    expect(Buffer.compare(part.body, data.subarray(123456, 234568))).to.equal(0);
    await expectDownloadError(url.replace(/signature=./, "signature=x"), 403, Errors.downloadLinkInvalid.errorName);
  });
});
