// The promises of the blob-store port, as one mocha suite every adapter must pass.
import { readFile } from "node:fs/promises";
import type { Readable } from "node:stream";
import { expect } from "chai";
import { BlobNotFoundError, type BlobStore } from "./blob-store.js";

export interface BlobStoreUnderTest {
  blobs: BlobStore;
  /** Opens the adapter again on the same data; adapters without durable data leave it out. */
  reopen?: () => Promise<BlobStore>;
  cleanup(): Promise<void>;
}

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

export function describeBlobStoreConformance(name: string, open: () => Promise<BlobStoreUnderTest>): void {
  describe(`blob store conformance: ${name}`, () => {
    let subject: BlobStoreUnderTest;
    let blobs: BlobStore;
    beforeEach(async () => {
      subject = await open();
      blobs = subject.blobs;
    });
    afterEach(async () => subject.cleanup());

    const bytes = (length: number, seed = 1) => Uint8Array.from({ length }, (_, i) => (i * 31 + seed) % 251);

    it("stores a blob from several chunks and reads it whole and by inclusive ranges", async () => {
      const data = bytes(1000);
      expect(await blobs.put("abc123", [data.subarray(0, 10), data.subarray(10, 600), data.subarray(600)])).to.equal(1000);
      expect(await blobs.size("abc123")).to.equal(1000);
      expect(Buffer.compare(await collect(await blobs.read("abc123")), data)).to.equal(0);
      expect([...(await collect(await blobs.read("abc123", { start: 0, end: 0 })))]).to.deep.equal([data[0]]);
      expect(Buffer.compare(await collect(await blobs.read("abc123", { start: 990, end: 999 })), data.subarray(990))).to.equal(0);
    });

    it("takes an async source, and refuses to replace an existing blob", async () => {
      async function* source() {
        yield bytes(5);
        yield bytes(7, 2);
      }
      expect(await blobs.put("k_async", source())).to.equal(12);
      await rejection(blobs.put("k_async", [bytes(3)]));
      expect(await blobs.size("k_async")).to.equal(12);
    });

    it("leaves nothing behind when the source fails midway", async () => {
      async function* failing() {
        yield bytes(5);
        throw new Error("source broke");
      }
      expect(String(await rejection(blobs.put("k_failed", failing())))).to.match(/source broke/);
      expect(await blobs.size("k_failed")).to.equal(undefined);
      expect(await blobs.put("k_failed", [bytes(2)])).to.equal(2);
    });

    it("answers BlobNotFoundError and undefined for a missing key; delete is idempotent", async () => {
      expect(await rejection(blobs.read("missing"))).to.be.instanceOf(BlobNotFoundError);
      expect(await blobs.size("missing")).to.equal(undefined);
      expect(await rejection(blobs.withLocalFile("missing", async () => 1))).to.be.instanceOf(BlobNotFoundError);
      await blobs.put("gone", [bytes(4)]);
      await blobs.delete("gone");
      await blobs.delete("gone");
      expect(await blobs.size("gone")).to.equal(undefined);
    });

    it("refuses keys that could escape the store", async () => {
      for (const key of ["", "../x", "a/b", "a.b", "x".repeat(129)]) {
        expect(String(await rejection(blobs.put(key, [bytes(1)]))), key).to.match(/invalid blob key/);
      }
    });

    it("hands out a local file with the blob's bytes", async () => {
      const data = bytes(300, 9);
      await blobs.put("local1", [data]);
      const read = await blobs.withLocalFile("local1", (path) => readFile(path));
      expect(Buffer.compare(read, data)).to.equal(0);
    });

    it("commits the named staged parts in the given order, leaving out parts it does not name, and removes them all", async () => {
      const data = bytes(100, 3);
      // Written out of order, and with a part of an attempt that lost (never named).
      await blobs.writeStaged("session1", "p2", data.subarray(70));
      await blobs.writeStaged("session1", "p0", data.subarray(0, 40));
      await blobs.writeStaged("session1", "p1-lost", bytes(30, 99));
      await blobs.writeStaged("session1", "p1", data.subarray(40, 70));
      await blobs.commitStaged("session1", ["p0", "p1", "p2"], "file1", 100);
      expect(Buffer.compare(await collect(await blobs.read("file1")), data)).to.equal(0);
      // Committing again after a crash between commit and bookkeeping succeeds without the staged bytes.
      await blobs.commitStaged("session1", ["p0", "p1", "p2"], "file1", 100);
      // Every part went, the unnamed one too.
      expect(await rejection(blobs.commitStaged("session1", ["p1-lost"], "file2", 30))).to.be.instanceOf(BlobNotFoundError);
    });

    it("commits a single part, and an empty part as an empty blob", async () => {
      const data = bytes(64, 4);
      await blobs.writeStaged("single", "only", data);
      await blobs.commitStaged("single", ["only"], "file5", 64);
      expect(Buffer.compare(await collect(await blobs.read("file5")), data)).to.equal(0);
      await blobs.writeStaged("empty", "p0", new Uint8Array(0));
      await blobs.commitStaged("empty", ["p0"], "file6", 0);
      expect(await blobs.size("file6")).to.equal(0);
      expect((await collect(await blobs.read("file6"))).length).to.equal(0);
    });

    it("refuses a commit naming a missing part or whose parts do not add up to the size, and keeps the parts", async () => {
      await blobs.writeStaged("short", "p0", bytes(10));
      expect(String(await rejection(blobs.commitStaged("short", ["p0", "p1"], "file3", 10)))).to.match(/no part p1/);
      expect(String(await rejection(blobs.commitStaged("short", ["p0"], "file3", 11)))).to.match(/holds 10 bytes/);
      expect(String(await rejection(blobs.commitStaged("short", ["p0"], "file3", 9)))).to.match(/holds 10 bytes/);
      expect(await blobs.size("file3")).to.equal(undefined);
      await blobs.commitStaged("short", ["p0"], "file3", 10);
      expect(await blobs.size("file3")).to.equal(10);
    });

    it("refuses a part name outside the key alphabet", async () => {
      expect(String(await rejection(blobs.writeStaged("named", "../escape", bytes(3))))).to.match(/invalid blob key/);
    });

    it("discards one part, and a whole staged upload", async () => {
      await blobs.writeStaged("tossed", "p0", bytes(10));
      await blobs.writeStaged("tossed", "p1", bytes(5));
      await blobs.discardStagedPart("tossed", "p1");
      await blobs.discardStagedPart("tossed", "p1");
      expect(String(await rejection(blobs.commitStaged("tossed", ["p0", "p1"], "file4", 15)))).to.match(/no part p1/);
      await blobs.discardStaged("tossed");
      await blobs.discardStaged("tossed");
      expect(await rejection(blobs.commitStaged("tossed", ["p0"], "file4", 10))).to.be.instanceOf(BlobNotFoundError);
      // A part written after its upload was committed, then discarded: nothing of the upload stays.
      await blobs.writeStaged("late", "p0", bytes(10));
      await blobs.discardStagedPart("late", "p0");
      expect(await rejection(blobs.commitStaged("late", ["p0"], "file7", 10))).to.be.instanceOf(BlobNotFoundError);
    });

    it("keeps blobs and staged uploads across a reopen", async function () {
      if (!subject.reopen) this.skip();
      await blobs.put("durable", [bytes(64)]);
      await blobs.writeStaged("pending", "p0", bytes(16));
      blobs = await subject.reopen!();
      expect(await blobs.size("durable")).to.equal(64);
      await blobs.writeStaged("pending", "p1", bytes(16, 5));
      await blobs.commitStaged("pending", ["p0", "p1"], "durable2", 32);
      expect(await blobs.size("durable2")).to.equal(32);
    });
  });
}
