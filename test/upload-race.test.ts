// Two writers of the same upload chunk on two engine nodes, as during an ownership move when a
// call slips past the routing: each node's own mailbox lets its writer through, so both stage
// their bytes before the session's compare-and-set. Each attempt stages a part of its own and the
// session records the accepted one, so the finished file holds exactly one attempt's bytes and
// the refused attempt's bytes are gone.
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ListObjectsV2Command } from "@aws-sdk/client-s3";
import { expect } from "chai";
import { engineNodes } from "../engine/shard-owners.js";
import { UploadChunkRequestSchema, MediaService } from "../shared/gen/api/v1/media_pb.js";
import { parleyErrorParts } from "../shared/errors.js";
import type { ParleyConfig } from "../shared/config.js";
import { toWire } from "../shared/wire.js";
import type { AdjustableClock } from "../shared/clock.js";
import type { Parley } from "../server.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, openServerStore, startNodes, testConfig, type TestServer } from "./support/harness.js";
import { eventually } from "./support/messaging.js";
import { testS3Client } from "./support/s3.js";
import { servedWhereCalled } from "../engine/shard-owners.js";

const nodeName = "uprace";

describe("MediaService.UploadChunk racing on two engine nodes", () => {
  let nodes: Record<"a" | "b", Parley>;
  let codesFile: string;
  let clock: AdjustableClock;
  let dataDir: string;
  let config: ParleyConfig;
  let user: SignedIn;
  // Rounds of the race: which writer stages last is chance, and a round where the accepted one
  // also staged last would pass even with shared part names; several make that all but certain
  // to show.
  const rounds = 6;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-upload-race-"));
    ({ nodes, codesFile, clock } = await startNodes(dataDir, nodeName, { a: ["api", "gateway", "engine"], b: ["api", "gateway", "engine", "webhooks"] }));
    await eventually(() => engineNodes(nodes.a.broker).length === 2 && engineNodes(nodes.b.broker).length === 2, "both nodes seeing both engines", 30_000);
    config = await testConfig(dataDir);
    user = await signInWithCode({ url: nodes.a.url, codesFile } as TestServer);
  });

  after(async () => {
    await nodes?.a.stop();
    await nodes?.b.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const media = () => client({ url: nodes.a.url }, MediaService, "json", user.accessToken);

  /** The engine action on one node, past the routing (and the forwarding) that would send both calls to the owner. */
  async function chunkOn(node: "a" | "b", sessionId: string, offset: number, chunk: Uint8Array): Promise<string> {
    const params = {
      caller: { kind: "user", userId: user.userId, deviceId: user.deviceId },
      request: toWire(UploadChunkRequestSchema, { sessionId, offset: BigInt(offset), chunk }),
      host: "127.0.0.1",
    };
    try {
      await nodes[node].broker.call("media.uploadChunk", params, { nodeID: `${nodeName}-${node}`, ...servedWhereCalled("media.uploadChunk") });
      return "OK";
    } catch (err) {
      return parleyErrorParts(err)?.entry.errorName ?? String(err);
    }
  }

  /** The names of the session's staged parts, wherever the nodes keep blobs. */
  async function stagedParts(sessionId: string): Promise<string[]> {
    const { blobs } = config.cluster;
    if (blobs.kind === "disk") {
      try {
        return readdirSync(join(dataDir, "media", "staging", sessionId)).sort();
      } catch (err) {
        if ((err as { code?: string }).code === "ENOENT") return [];
        throw err;
      }
    }
    const folder = `staging/${sessionId}/`;
    const listed = await (await testS3Client()).send(new ListObjectsV2Command({ Bucket: blobs.bucket, Prefix: folder }));
    return (listed.Contents ?? []).map((object) => object.Key!.slice(folder.length)).sort();
  }

  async function download(fileId: string): Promise<Buffer> {
    const { url } = await media().getDownloadURL({ fileId });
    const response = await fetch(url);
    expect(response.status).to.equal(200);
    return Buffer.from(await response.arrayBuffer());
  }

  it("accepts exactly one of two different chunks at the same offset; the file holds that one's bytes and the other's staged bytes are gone", async function () {
    this.timeout(120_000);
    const chunkBytes = 256 * 1024;
    for (let round = 0; round < rounds; round++) {
      const attempts = { a: randomBytes(chunkBytes), b: randomBytes(chunkBytes) };
      const rest = randomBytes(1000);
      const { sessionId } = await media().initUpload({ fileName: `race-${round}.bin`, contentType: "application/octet-stream", size: BigInt(chunkBytes + rest.length) });
      const [onA, onB] = await Promise.all([chunkOn("a", sessionId, 0, attempts.a), chunkOn("b", sessionId, 0, attempts.b)]);
      expect([onA, onB].sort(), `round ${round}`).to.deep.equal(["CHUNK_OFFSET_INVALID", "OK"]);
      const winner = onA === "OK" ? attempts.a : attempts.b;
      expect(await stagedParts(sessionId), `round ${round}: the accepted part only`).to.have.length(1);

      expect((await media().uploadChunk({ sessionId, offset: BigInt(chunkBytes), chunk: rest })).uploaded).to.equal(BigInt(chunkBytes + rest.length));
      const { file } = await media().completeUpload({ sessionId });
      const bytes = await download(file!.fileId);
      expect(Buffer.compare(bytes, Buffer.concat([winner, rest])), `round ${round}: the accepted attempt's bytes, then the rest`).to.equal(0);
      expect(await stagedParts(sessionId), `round ${round}: nothing staged after completion`).to.deep.equal([]);
    }
  });

  it("refuses a stale offset before staging anything, and assembles parts staged on both nodes in order", async () => {
    const data = randomBytes(3000);
    const { sessionId } = await media().initUpload({ fileName: "late.bin", contentType: "application/octet-stream", size: BigInt(data.length) });
    expect(await chunkOn("a", sessionId, 0, data.subarray(0, 2000))).to.equal("OK");
    expect(await chunkOn("b", sessionId, 0, randomBytes(500))).to.equal("CHUNK_OFFSET_INVALID");
    expect(await stagedParts(sessionId)).to.have.length(1);
    expect(await chunkOn("b", sessionId, 2000, data.subarray(2000))).to.equal("OK");
    expect(await stagedParts(sessionId)).to.have.length(2);
    const { file } = await media().completeUpload({ sessionId });
    expect(Buffer.compare(await download(file!.fileId), data)).to.equal(0);
  });

  it("drops a session staged before parts were recorded (UPLOAD_SESSION_NOT_FOUND), so the client starts again", async () => {
    const store = await openServerStore({ config, dataDir });
    try {
      const now = clock.now();
      const sessionId = randomBytes(16).toString("hex");
      await store.media.createSession({
        sessionId,
        ownerId: user.userId,
        fileId: randomBytes(16).toString("hex"),
        fileName: "old.bin",
        contentType: "application/octet-stream",
        size: 20,
        uploaded: 10,
        parts: [],
        createdAt: now,
        expiresAt: now + 60 * 60 * 1000,
      });
      expect(await chunkOn("a", sessionId, 10, randomBytes(10))).to.equal("UPLOAD_SESSION_NOT_FOUND");
      expect(await store.media.getSession(sessionId)).to.equal(undefined);
      expect(await stagedParts(sessionId)).to.deep.equal([]);
    } finally {
      await store.close();
    }
  });
});
