// What the storage port promises of its messages, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import type { Store } from "../store.js";
import type { StoreSuite } from "./suite.js";

export function describeMessages(t: StoreSuite): void {
  describe("messages", () => {
    let store: Store;
    beforeEach(() => {
      store = t.store;
    });

    type NewMessage = Parameters<Store["messages"]["insertMessage"]>[0];
    const conversationId = (2n ** 40n) | 5n;
    const message = (messageId: bigint, overrides: Partial<NewMessage> = {}): NewMessage => ({
      conversationId,
      messageId,
      senderId: 7,
      clientMessageId: 100n + messageId,
      body: new Uint8Array([1, Number(messageId)]),
      replyTo: null,
      metadata: {},
      createdAt: 1000,
      updatedAt: null,
      edited: false,
      ...overrides,
    });

    it("stores a message whole, metadata included; a taken id is a conflict, a repeated client id a duplicate", async () => {
      const first = message(1n, { metadata: { origin: "import", "x-trace": "ä/1" }, replyTo: new Uint8Array([9]) });
      expect(await store.messages.insertMessage(first)).to.deep.equal({ outcome: "ok" });
      expect(await store.messages.getMessage(conversationId, 1n)).to.deep.equal(first);
      expect(await store.messages.insertMessage(message(1n, { clientMessageId: 999n }))).to.deep.equal({ outcome: "conflict" });
      const duplicate = await store.messages.insertMessage(message(2n, { clientMessageId: first.clientMessageId }));
      expect(duplicate.outcome === "duplicate" && duplicate.existing).to.deep.equal(first);
      // The same client id from another sender is another message.
      expect(await store.messages.insertMessage(message(2n, { senderId: 8, clientMessageId: first.clientMessageId }))).to.deep.equal({ outcome: "ok" });
      expect(await store.messages.latestMessageId(conversationId)).to.equal(2n);
      expect(await store.messages.latestMessageId(conversationId + 1n)).to.equal(0n);
    });

    it("lists stream messages opened with their insert until an update closes them, oldest first, up to a start time", async () => {
      await store.messages.insertMessage(message(1n, { createdAt: 1000 }), { opensStream: true });
      await store.messages.insertMessage(message(2n, { createdAt: 900, senderId: 9 }), { opensStream: true });
      await store.messages.insertMessage(message(3n, { createdAt: 800 }));
      // A refused insert opens nothing.
      expect((await store.messages.insertMessage(message(1n, { createdAt: 10, clientMessageId: 555n }), { opensStream: true })).outcome).to.equal("conflict");
      expect(await store.messages.listOpenStreams(1000, 10)).to.deep.equal([
        { conversationId, messageId: 2n, senderId: 9, startedAt: 900 },
        { conversationId, messageId: 1n, senderId: 7, startedAt: 1000 },
      ]);
      expect((await store.messages.listOpenStreams(950, 10)).map((open) => open.messageId)).to.deep.equal([2n]);
      expect((await store.messages.listOpenStreams(1000, 1)).map((open) => open.messageId)).to.deep.equal([2n]);
      const finished = { body: new Uint8Array([7]), updatedAt: 1100, edited: false };
      await store.messages.updateMessage(conversationId, 2n, finished);
      expect(await store.messages.listOpenStreams(1000, 10)).to.have.length(2);
      await store.messages.updateMessage(conversationId, 2n, finished, { closesStream: true });
      expect((await store.messages.listOpenStreams(1000, 10)).map((open) => open.messageId)).to.deep.equal([1n]);
      expect((await store.messages.getMessage(conversationId, 2n))?.body).to.deep.equal(new Uint8Array([7]));
    });

    it("deletes for one user only: answers the ids deleted now, each once, skipping missing and cleared ones", async () => {
      for (let id = 1n; id <= 5n; id++) await store.messages.insertMessage(message(id));
      expect(await store.messages.deleteFor(7, conversationId, [4n, 2n, 2n, 99n, 1n], 1n)).to.deep.equal([4n, 2n]);
      expect(await store.messages.deleteFor(7, conversationId, [2n, 4n], 0n)).to.deep.equal([]);
      expect(await store.messages.isDeletedFor(7, conversationId, 2n)).to.equal(true);
      expect(await store.messages.isDeletedFor(8, conversationId, 2n)).to.equal(false);
      const ids = (rows: { messageId: bigint }[]) => rows.map((r) => r.messageId);
      expect(ids(await store.messages.listVisible(7, conversationId, "before", 100n, 1n, 10))).to.deep.equal([5n, 3n]);
      expect(ids(await store.messages.listVisible(7, conversationId, "after", 0n, 1n, 10))).to.deep.equal([3n, 5n]);
      expect(ids(await store.messages.listVisible(8, conversationId, "after", 2n, 0n, 2))).to.deep.equal([3n, 4n]);
    });

    it("a message id past any the sequence assigns names no message", async () => {
      await store.messages.insertMessage(message(1n));
      const beyond = [2n ** 31n + 7n, 2n ** 53n + 1n, 2n ** 63n - 1n];
      for (const messageId of beyond) expect(await store.messages.getMessage(conversationId, messageId)).to.equal(undefined);
      expect(await store.messages.deleteFor(7, conversationId, beyond, 0n)).to.deep.equal([]);
      expect((await store.messages.listVisible(7, conversationId, "before", 2n ** 63n - 1n, 0n, 10)).map((m) => m.messageId)).to.deep.equal([1n]);
      expect(await store.messages.listVisible(7, conversationId, "after", 2n ** 63n - 1n, 0n, 10)).to.deep.equal([]);
    });
  });
}
