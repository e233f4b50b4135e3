import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { describeBlobStoreConformance } from "./blob-store-conformance.js";
import { LocalDiskBlobStore } from "./local-disk-blob-store.js";

describeBlobStoreConformance("local disk", async () => {
  const dir = mkdtempSync(join(tmpdir(), "parley-blobs-"));
  return {
    blobs: await LocalDiskBlobStore.open(dir),
    reopen: () => LocalDiskBlobStore.open(dir),
    async cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe("local disk blob store layout", () => {
  it("keeps files under DATA_DIR/media and clears half-written ones at start-up", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-blobs-"));
    try {
      const blobs = await LocalDiskBlobStore.open(dir);
      await blobs.put("ab12", [new Uint8Array([1, 2, 3])]);
      expect(readdirSync(join(dir, "media", "blobs", "ab"))).to.deep.equal(["ab12"]);
      writeFileSync(join(dir, "media", "tmp", "interrupted"), "partial");
      await LocalDiskBlobStore.open(dir);
      expect(readdirSync(join(dir, "media", "tmp"))).to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
