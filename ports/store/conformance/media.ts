// What the storage port promises of its media files and upload sessions, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { MediaFileRecord, UploadSessionRecord, Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeMedia(t: StoreSuite): void {
  describe("media", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });

    const file = (fileId: string, overrides: Partial<MediaFileRecord> = {}): MediaFileRecord => ({
      fileId,
      ownerId: 7,
      purpose: 3,
      fileName: "photo.png",
      contentType: "image/png",
      size: 1234,
      checksum: "ab".repeat(32),
      width: 640,
      height: 480,
      durationMs: 0,
      thumbnailFileId: "",
      createdAt: 1000,
      ...overrides,
    });
    const session = (sessionId: string, overrides: Partial<UploadSessionRecord> = {}): UploadSessionRecord => ({
      sessionId,
      ownerId: 7,
      fileId: `file-of-${sessionId}`,
      fileName: "movie.mp4",
      contentType: "video/mp4",
      size: 5000,
      uploaded: 0,
      parts: [],
      createdAt: 1000,
      expiresAt: 2000,
      ...overrides,
    });

    it("stores files with their metadata, a file and its thumbnail together", async () => {
      await store.media.insertFiles([file("thumb1", { size: 10, width: 32, height: 24 }), file("main1", { thumbnailFileId: "thumb1", durationMs: 1500 })]);
      expect(await store.media.getFile("main1")).to.deep.equal(file("main1", { thumbnailFileId: "thumb1", durationMs: 1500 }));
      expect((await store.media.getFile("thumb1"))?.width).to.equal(32);
      expect(await store.media.getFile("nope")).to.equal(undefined);
    });

    it("refuses a repeated file id and stores none of that batch", async () => {
      await store.media.insertFiles([file("dup")]);
      let refused = false;
      await store.media.insertFiles([file("fresh"), file("dup")]).catch(() => (refused = true));
      expect(refused).to.equal(true);
      expect(await store.media.getFile("fresh")).to.equal(undefined);
    });

    it("creates, reads and advances a session only from the expected position, recording each accepted part in order", async () => {
      await store.media.createSession(session("s1"));
      expect(await store.media.getSession("s1")).to.deep.equal(session("s1"));
      expect(await store.media.advanceSession("s1", 0, 100, "p0-a")).to.equal(true);
      expect(await store.media.advanceSession("s1", 0, 200, "p0-b")).to.equal(false);
      expect(await store.media.advanceSession("s1", 100, 250, "p100-a")).to.equal(true);
      expect(await store.media.getSession("s1")).to.deep.include({ uploaded: 250, parts: ["p0-a", "p100-a"] });
      expect(await store.media.advanceSession("missing", 0, 1, "p0")).to.equal(false);
      expect(await store.media.getSession("missing")).to.equal(undefined);
    });

    it("lets exactly one of writers racing from the same position advance, and records only its part", async () => {
      await store.media.createSession(session("race"));
      const parts = ["000-a", "000-b", "000-c", "000-d"];
      const outcomes = await Promise.all(parts.map((part, i) => store.media.advanceSession("race", 0, 10 + i, part)));
      expect(outcomes.filter(Boolean)).to.have.length(1);
      const winner = outcomes.indexOf(true);
      expect(await store.media.getSession("race")).to.deep.include({ uploaded: 10 + winner, parts: [parts[winner]] });
    });

    it("finds the owner's newest open session with the same name, type and size", async () => {
      await store.media.createSession(session("old", { createdAt: 1000, expiresAt: 5000 }));
      await store.media.createSession(session("new", { createdAt: 1100, expiresAt: 5100 }));
      await store.media.createSession(session("other-owner", { ownerId: 8, createdAt: 1200, expiresAt: 5200 }));
      await store.media.createSession(session("other-size", { size: 5001, createdAt: 1300, expiresAt: 5300 }));
      expect((await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 1500))?.sessionId).to.equal("new");
      expect((await store.media.findResumableSession(8, "movie.mp4", "video/mp4", 5000, 1500))?.sessionId).to.equal("other-owner");
      expect(await store.media.findResumableSession(7, "movie.mp4", "video/webm", 5000, 1500)).to.equal(undefined);
      expect(await store.media.findResumableSession(7, "MOVIE.mp4", "video/mp4", 5000, 1500)).to.equal(undefined);
      // Expired at exactly expiresAt.
      expect((await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 5050))?.sessionId).to.equal("new");
      expect(await store.media.findResumableSession(7, "movie.mp4", "video/mp4", 5000, 5100)).to.equal(undefined);
    });

    it("completes a session by storing its files and deleting it, once", async () => {
      await store.media.createSession(session("s2", { uploaded: 5000 }));
      expect(await store.media.completeSession("s2", [file("done2", { size: 5000 })])).to.equal(true);
      expect(await store.media.getSession("s2")).to.equal(undefined);
      expect((await store.media.getFile("done2"))?.size).to.equal(5000);
      expect(await store.media.completeSession("s2", [file("again2")])).to.equal(false);
      expect(await store.media.getFile("again2")).to.equal(undefined);
    });

    it("lists expired sessions oldest first and deletes sessions", async () => {
      await store.media.createSession(session("e1", { expiresAt: 3000 }));
      await store.media.createSession(session("e2", { expiresAt: 2000 }));
      await store.media.createSession(session("live", { expiresAt: 9000 }));
      expect((await store.media.listExpiredSessions(3000, 10)).map((s) => s.sessionId)).to.deep.equal(["e2", "e1"]);
      expect((await store.media.listExpiredSessions(3000, 1)).map((s) => s.sessionId)).to.deep.equal(["e2"]);
      expect(await store.media.deleteSession("e2")).to.equal(true);
      expect(await store.media.deleteSession("e2")).to.equal(false);
      expect((await store.media.listExpiredSessions(3000, 10)).map((s) => s.sessionId)).to.deep.equal(["e1"]);
    });

    it("completing with a file id taken already stores nothing and keeps the session", async () => {
      await store.media.insertFiles([file("taken")]);
      await store.media.createSession(session("s3", { uploaded: 5000 }));
      let refused = false;
      await store.media.completeSession("s3", [file("thumb3"), file("taken", { ownerId: 9 })]).catch(() => (refused = true));
      expect(refused).to.equal(true);
      expect(await store.media.getFile("thumb3")).to.equal(undefined);
      expect((await store.media.getFile("taken"))?.ownerId).to.equal(7);
      expect(await store.media.getSession("s3")).to.deep.equal(session("s3", { uploaded: 5000 }));
      expect(await store.media.completeSession("s3", [file("done3")])).to.equal(true);
    });

    it("lists sessions expired by a clock days ahead of today's, only once they expire", async () => {
      const day = 86_400_000;
      const today = Date.now();
      await store.media.createSession(session("tomorrow", { createdAt: today, expiresAt: today + day }));
      await store.media.createSession(session("in-ten-days", { createdAt: today, expiresAt: today + 10 * day }));
      const expired = async (now: number) => (await store.media.listExpiredSessions(now, 10)).map((s) => s.sessionId);
      expect(await expired(today + day - 1)).to.deep.equal([]);
      expect(await expired(today + day)).to.deep.equal(["tomorrow"]);
      expect(await expired(today + 11 * day)).to.deep.equal(["tomorrow", "in-ten-days"]);
    });

    it("keeps the first candidate of a secret", async () => {
      expect(await store.media.ensureSecret("signing", "first", 1)).to.equal("first");
      expect(await store.media.ensureSecret("signing", "second", 2)).to.equal("first");
      expect(await store.media.ensureSecret("other", "third", 3)).to.equal("third");
    });

    it("keeps files, sessions and secrets across close and reopen", async function () {
      if (!subject.reopen) this.skip();
      await store.media.insertFiles([file("kept")]);
      await store.media.createSession(session("kept-session", { uploaded: 42 }));
      await store.media.ensureSecret("signing", "durable", 1);
      store = t.store = await subject.reopen!();
      expect(await store.media.getFile("kept")).to.deep.equal(file("kept"));
      expect((await store.media.getSession("kept-session"))?.uploaded).to.equal(42);
      expect(await store.media.ensureSecret("signing", "replacement", 2)).to.equal("durable");
    });
  });
}
