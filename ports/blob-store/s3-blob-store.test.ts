// The S3 blob store against a real MinIO (test/support/s3.ts; a first run builds it, minutes).
import { setTimeout as sleep } from "node:timers/promises";
import type { Readable } from "node:stream";
import { ListMultipartUploadsCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { expect } from "chai";
import { createTestBucket, testS3, testS3Client } from "../../test/support/s3.js";
import { describeBlobStoreConformance } from "./blob-store-conformance.js";
import { S3BlobStore, S3BlobStoreError } from "./s3-blob-store.js";

const partSize = 5 * 1024 * 1024;

async function collect(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the promise to reject");
}

const bytes = (length: number, seed = 1) => {
  const data = Buffer.alloc(length);
  for (let i = 0; i < length; i++) data[i] = (i * 31 + seed) % 251;
  return data;
};

/** A store on a fresh bucket, plus what the test needs to look behind it and clean up. */
async function openStore(keyPrefix = "") {
  const s3 = await testS3();
  const { bucket, remove } = await createTestBucket();
  const clients: S3Client[] = [];
  const open = () => {
    const store = S3BlobStore.fromSettings({ ...s3, bucket, keyPrefix, forcePathStyle: true, partSize });
    clients.push(store.client);
    return store;
  };
  return {
    bucket,
    blobs: open(),
    reopen: async () => open(),
    async cleanup() {
      for (const client of clients) client.destroy();
      await remove();
    },
  };
}

describe("S3 blob store (real MinIO)", function () {
  // The first run of a machine builds MinIO from source.
  before(async function () {
    this.timeout(40 * 60_000);
    await testS3();
  });

  describeBlobStoreConformance("S3", () => openStore("parley/"));

  describe("S3 specifics", () => {
    let subject: Awaited<ReturnType<typeof openStore>>;
    let blobs: S3BlobStore;
    beforeEach(async () => {
      subject = await openStore("p1/");
      blobs = subject.blobs;
    });
    afterEach(async () => subject.cleanup());

    async function objectKeys(): Promise<string[]> {
      const listed = await blobs.client.send(new ListObjectsV2Command({ Bucket: subject.bucket }));
      return (listed.Contents ?? []).map((object) => object.Key!).sort();
    }

    it("keeps blobs and staged parts under the key prefix, one object per staged part", async () => {
      await blobs.put("abc", [bytes(3)]);
      await blobs.writeStaged("up1", "a0", bytes(4));
      await blobs.writeStaged("up1", "a4", bytes(4));
      await blobs.writeStaged("up1", "b4", bytes(4));
      expect(await objectKeys()).to.deep.equal(["p1/blobs/abc", "p1/staging/up1/a0", "p1/staging/up1/a4", "p1/staging/up1/b4"]);
      await blobs.commitStaged("up1", ["a0", "b4"], "done1", 8);
      expect(await objectKeys()).to.deep.equal(["p1/blobs/abc", "p1/blobs/done1"]);
    });

    it("streams a blob larger than a part as a multipart upload and reads ranges across parts", async function () {
      this.timeout(60_000);
      const data = bytes(2 * partSize + 12_345);
      const chunks = [];
      // Odd chunk sizes, so parts are cut inside chunks.
      for (let at = 0; at < data.length; at += 777_777) chunks.push(data.subarray(at, at + 777_777));
      expect(await blobs.put("big", chunks)).to.equal(data.length);
      expect(await blobs.size("big")).to.equal(data.length);
      expect(Buffer.compare(await collect(await blobs.read("big")), data)).to.equal(0);
      const across = { start: partSize - 10, end: partSize + 10 };
      expect(Buffer.compare(await collect(await blobs.read("big", across)), data.subarray(across.start, across.end + 1))).to.equal(0);
    });

    it("aborts the multipart upload when the source fails after a part", async function () {
      this.timeout(60_000);
      async function* failing() {
        yield bytes(partSize + 100);
        throw new Error("source broke late");
      }
      expect(String(await rejection(blobs.put("late", failing())))).to.match(/source broke late/);
      expect(await blobs.size("late")).to.equal(undefined);
      const uploads = await blobs.client.send(new ListMultipartUploadsCommand({ Bucket: subject.bucket }));
      expect(uploads.Uploads ?? []).to.deep.equal([]);
    });

    it("commits a staged upload of many small writes larger than a part", async function () {
      this.timeout(60_000);
      const data = bytes(partSize + 300_000, 7);
      const chunk = 1024 * 1024;
      const parts: string[] = [];
      for (let at = 0; at < data.length; at += chunk) {
        parts.push(`p${at}`);
        await blobs.writeStaged("many", `p${at}`, data.subarray(at, at + chunk));
      }
      await blobs.commitStaged("many", parts, "manyblob", data.length);
      expect(Buffer.compare(await collect(await blobs.read("manyblob")), data)).to.equal(0);
    });

    it("commits large staged parts partly by server-side copy, mixed with small ones", async function () {
      this.timeout(60_000);
      const mib = 1024 * 1024;
      const data = bytes(16 * mib, 11);
      // Sizes chosen so commit fills an open part from a large write, copies a ≥ 5 MiB remainder and ends on a small part.
      const size = 15.5 * mib - 100;
      const writes: [number, number][] = [[0, 1 * mib], [1 * mib, 7 * mib], [7 * mib, 8 * mib], [8 * mib, 15 * mib], [15 * mib, size]];
      for (const [from, to] of writes) await blobs.writeStaged("mixed", `p${from}`, data.subarray(from, to));
      // A part of an attempt that lost: never named, removed with the others.
      await blobs.writeStaged("mixed", "lost", data.subarray(0, 100));
      const sent: string[] = [];
      blobs.client.middlewareStack.add(
        (next, context) => (args) => {
          sent.push(context.commandName ?? "?");
          return next(args);
        },
        { step: "initialize", name: "recordCommands" },
      );
      await blobs.commitStaged("mixed", writes.map(([from]) => `p${from}`), "mixedblob", size);
      expect(sent.filter((name) => name === "UploadPartCopyCommand")).to.have.length(1);
      expect(sent.filter((name) => name === "UploadPartCommand")).to.have.length(3);
      expect(await blobs.size("mixedblob")).to.equal(size);
      expect(Buffer.compare(await collect(await blobs.read("mixedblob")), data.subarray(0, size))).to.equal(0);
      expect(await objectKeys()).to.deep.equal(["p1/blobs/mixedblob"]);
    });

    it("refuses a put racing another put of the same key once its bytes are in (If-None-Match)", async () => {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      async function* slow() {
        yield bytes(10, 1);
        await released;
        yield bytes(10, 2);
      }
      const first = blobs.put("race", slow());
      // The slow put has checked that the key is free before this one writes it.
      await sleep(100);
      await blobs.put("race", [bytes(7, 3)]);
      release();
      expect(String(await rejection(first))).to.match(/already exists under key "race"/);
      expect(Buffer.compare(await collect(await blobs.read("race")), bytes(7, 3))).to.equal(0);
    });

    it("lets another instance (a restarted node) continue and commit a staged upload", async () => {
      const data = bytes(100, 4);
      await blobs.writeStaged("moved", "p0", data.subarray(0, 60));
      blobs.client.destroy();
      const other = await subject.reopen();
      await other.writeStaged("moved", "p60", data.subarray(60));
      await other.commitStaged("moved", ["p0", "p60"], "moved1", 100);
      expect(Buffer.compare(await collect(await other.read("moved1")), data)).to.equal(0);
      const third = await subject.reopen();
      await third.commitStaged("moved", ["p0", "p60"], "moved1", 100);
      blobs = third;
    });

    it("finishes a commit interrupted after the blob was written, and refuses one whose blob differs", async () => {
      await blobs.writeStaged("half", "p0", bytes(20));
      // As if a commit had crashed after writing the blob, before removing the parts.
      await blobs.put("halfblob", [bytes(20)]);
      await blobs.commitStaged("half", ["p0"], "halfblob", 20);
      expect(await objectKeys()).to.deep.equal(["p1/blobs/halfblob"]);

      await blobs.writeStaged("clash", "p0", bytes(20));
      await blobs.put("other", [bytes(5)]);
      expect(String(await rejection(blobs.commitStaged("clash", ["p0"], "other", 20)))).to.match(/already exists/);
      expect(await blobs.size("other")).to.equal(5);
    });

    it("reports a wrong secret as the server's SignatureDoesNotMatch, naming the settings to check", async () => {
      const s3 = await testS3();
      const wrong = await testS3Client({ accessKeyId: s3.accessKeyId, secretAccessKey: "not-the-secret" });
      try {
        // The server itself refuses: the raw SDK call fails the same way.
        const raw = (await rejection(wrong.send(new ListObjectsV2Command({ Bucket: subject.bucket })))) as Error;
        expect(raw.name).to.equal("SignatureDoesNotMatch");
        const refused = new S3BlobStore(wrong, { bucket: subject.bucket, keyPrefix: "p1/" });
        for (const attempt of [() => refused.size("x"), () => refused.read("x"), () => refused.put("x", [bytes(1)]), () => refused.writeStaged("x", "p0", bytes(1))]) {
          const error = await rejection(attempt());
          expect(error).to.be.instanceOf(S3BlobStoreError);
          expect((error as S3BlobStoreError).code).to.equal("SignatureDoesNotMatch");
          expect(String(error)).to.match(/SignatureDoesNotMatch.*S3_SECRET_ACCESS_KEY/);
        }
      } finally {
        wrong.destroy();
      }
      expect(await objectKeys()).to.deep.equal([]);
    });

    it("refuses to open on a missing bucket or a wrong secret, naming S3's reason", async () => {
      const s3 = await testS3();
      const settings = { ...s3, bucket: subject.bucket, forcePathStyle: true };
      const noBucket = await rejection(S3BlobStore.open({ ...settings, bucket: "parley-no-such-bucket" }));
      expect(noBucket).to.be.instanceOf(S3BlobStoreError);
      expect(String(noBucket)).to.match(/NoSuchBucket.*create the bucket/);
      const wrongSecret = await rejection(S3BlobStore.open({ ...settings, secretAccessKey: "not-the-secret" }));
      expect((wrongSecret as S3BlobStoreError).code).to.equal("SignatureDoesNotMatch");
      const opened = await S3BlobStore.open(settings);
      expect(await opened.size("x")).to.equal(undefined);
      opened.client.destroy();
      // A bucket removed while running: reads name it.
      const gone = new S3BlobStore(blobs.client, { bucket: "parley-no-such-bucket" });
      expect(String(await rejection(gone.read("x")))).to.match(/NoSuchBucket/);
    });

    it("hands out presigned URLs that plain HTTP can fetch, and that refuse tampering and expiry", async function () {
      this.timeout(20_000);
      const data = bytes(2000, 5);
      await blobs.put("shared", [data]);
      const url = await blobs.presignedReadUrl("shared", 60, { contentType: "image/png", contentDisposition: 'attachment; filename="a.png"' });
      expect(url).to.match(/X-Amz-Signature=[0-9a-f]{64}/);

      const fetched = await fetch(url);
      expect(fetched.status).to.equal(200);
      expect(fetched.headers.get("content-type")).to.equal("image/png");
      expect(fetched.headers.get("content-disposition")).to.equal('attachment; filename="a.png"');
      expect(Buffer.compare(Buffer.from(await fetched.arrayBuffer()), data)).to.equal(0);

      const ranged = await fetch(url, { headers: { range: "bytes=10-19" } });
      expect(ranged.status).to.equal(206);
      expect(Buffer.compare(Buffer.from(await ranged.arrayBuffer()), data.subarray(10, 20))).to.equal(0);

      const signature = /X-Amz-Signature=([0-9a-f]+)/.exec(url)![1];
      const flipped = `${signature[0] === "0" ? "1" : "0"}${signature.slice(1)}`;
      const tamperedUrls = [url.replace(signature, flipped), url.replace("/blobs/shared", "/blobs/sharee"), url.replace("X-Amz-Expires=60", "X-Amz-Expires=600")];
      for (const tampered of tamperedUrls) {
        const refused = await fetch(tampered);
        expect(refused.status, tampered).to.equal(403);
        expect(await refused.text()).to.include("SignatureDoesNotMatch");
      }

      const shortLived = await blobs.presignedReadUrl("shared", 1);
      await sleep(2_100);
      const expired = await fetch(shortLived);
      expect(expired.status).to.equal(403);
      expect(await expired.text()).to.match(/expired/i);

      // Signed for the name clients use: the signature covers the host, so it must be minted for it.
      const s3 = await testS3();
      const publicName = s3.endpoint.replace("127.0.0.1", "localhost");
      const behindProxy = S3BlobStore.fromSettings({ ...s3, bucket: subject.bucket, keyPrefix: "p1/", forcePathStyle: true, publicEndpoint: publicName });
      try {
        const publicUrl = await behindProxy.presignedReadUrl("shared", 60, { cacheControl: "private, max-age=60" });
        expect(publicUrl.startsWith(`${publicName}/${subject.bucket}/p1/blobs/shared?`)).to.equal(true);
        const viaPublic = await fetch(publicUrl);
        expect(viaPublic.status).to.equal(200);
        expect(viaPublic.headers.get("cache-control")).to.equal("private, max-age=60");
        await viaPublic.arrayBuffer();
        expect((await fetch(publicUrl.replace("localhost", "127.0.0.1"))).status).to.equal(403);
        expect(await behindProxy.size("shared")).to.equal(2000);
      } finally {
        behindProxy.client.destroy();
      }

      expect(String(await rejection(blobs.presignedReadUrl("shared", 0)))).to.match(/1\.\.604800/);
      expect(String(await rejection(blobs.presignedReadUrl("../x", 60)))).to.match(/invalid blob key/);
    });
  });
});
