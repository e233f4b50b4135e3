// ConversationService.ListConversations as a reconnecting client uses it: paging by beforeTime
// reaches every conversation exactly once (also those without messages and those sharing a
// lastMessageTime), lastMessageTime moves only when a message arrives, and the latest message
// shown is the latest one the caller can see.
import { join } from "node:path";
import Database from "better-sqlite3";
import { expect } from "chai";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { type ConversationInfo } from "../shared/gen/shared/v1/conversation_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { nextClientMessageId, textBody, textOf } from "./support/messaging.js";
import { befriend, createAgent } from "./support/social.js";

for (const mode of wireModes) {
  describe(`ConversationService.ListConversations (${mode})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startTestServer();
    });
    after(async () => server.dispose());

    const conversations = (u: SignedIn) => client(server, ConversationService, mode, u.accessToken);
    const messages = (u: SignedIn) => client(server, MessageService, mode, u.accessToken);
    const send = (u: SignedIn, conversationId: bigint, text: string) => messages(u).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });

    /** Pages through the whole list the way a client does; answers the pages. */
    async function allPages(u: SignedIn, limit: number): Promise<ConversationInfo[][]> {
      const pages: ConversationInfo[][] = [];
      let beforeTime: bigint | undefined;
      for (let guard = 0; guard < 50; guard++) {
        const page = await conversations(u).listConversations({ limit, beforeTime });
        pages.push(page.conversations);
        expect(page.conversations.length).to.be.at.most(limit || 20);
        if (!page.hasMore) return pages;
        beforeTime = page.conversations[page.conversations.length - 1].lastMessageTime;
      }
      throw new Error("paging did not end");
    }

    it("reaches conversations without messages: they sort by creation time", async () => {
      const owner = await signInWithCode(server, mode);
      const created: bigint[] = [];
      for (let i = 0; i < 25; i++) {
        created.push((await createAgent(server, owner, mode)).conversationId);
        server.clock.advance(1);
      }
      const pages = await allPages(owner, 0);
      expect(pages.map((p) => p.length)).to.deep.equal([20, 5]);
      const listed = pages.flat();
      expect(listed.map((c) => c.conversationId)).to.deep.equal([...created].reverse());
      expect(listed.every((c) => c.lastMessageId === 0n && c.lastMessageTime > 0n)).to.equal(true);
    });

    it("never splits a run of equal lastMessageTime values between two pages", async function () {
      // Equal times cannot be made through the API (the clock only moves forward): they are written
      // into the SQLite file. The tie rule itself is in the store conformance suite, for every adapter.
      if (server.config.store.kind !== "sqlite") this.skip();
      const owner = await signInWithCode(server, mode);
      const agents = [];
      for (let i = 0; i < 5; i++) agents.push(await createAgent(server, owner, mode));
      // Times set directly: one newer, a run of three equal, one older.
      const times = [9000, 5000, 5000, 5000, 1000];
      const db = new Database(join(server.dataDir, "parley.db"));
      try {
        const update = db.prepare("UPDATE conversations SET last_message_time = ? WHERE conversation_id = ?");
        agents.forEach((agent, index) => update.run(times[index], agent.conversationId));
      } finally {
        db.close();
      }
      const pages = await allPages(owner, 3);
      const listed = pages.flat().map((c) => c.conversationId);
      expect([...listed].sort()).to.deep.equal(agents.map((a) => a.conversationId).sort());
      expect(pages.map((p) => p.map((c) => Number(c.lastMessageTime)))).to.deep.equal([[9000], [5000, 5000, 5000], [1000]]);
    });

    it("lastMessageTime and lastMessageId move only when a message arrives, not on edit, recall or delete", async () => {
      const [alice, bob] = [await signInWithCode(server, mode), await signInWithCode(server, mode)];
      const conversationId = await befriend(server, alice, bob, mode);
      const first = await send(alice, conversationId, "first");
      server.clock.advance(1000);
      const second = await send(bob, conversationId, "second");
      const info = async () => (await conversations(alice).getConversation({ conversationId })).conversation!;
      expect(await info()).to.deep.include({ lastMessageId: 2n, lastMessageTime: second.createdAt });
      server.clock.advance(1000);
      await messages(alice).editMessage({ conversationId, messageId: first.messageId, newBody: textBody("first, edited") });
      await messages(bob).recallMessage({ conversationId, messageId: second.messageId });
      await messages(alice).deleteMessages({ conversationId, messageIds: [first.messageId] });
      expect(await info()).to.deep.include({ lastMessageId: 2n, lastMessageTime: second.createdAt });
      // The latest message listed is the latest the caller can see.
      await messages(alice).deleteMessages({ conversationId, messageIds: [second.messageId] });
      const listed = await conversations(alice).listConversations({});
      expect(listed.conversations.map((c) => c.conversationId)).to.deep.equal([conversationId]);
      expect(listed.messages).to.deep.equal([]);
      const third = await send(bob, conversationId, "third");
      expect(await info()).to.deep.include({ lastMessageId: 3n, lastMessageTime: third.createdAt });
      const relisted = await conversations(alice).listConversations({});
      expect(relisted.messages.map(textOf)).to.deep.equal(["third"]);
      expect(relisted.relatedUsers.map((u) => u.userId)).to.deep.equal([bob.userId]);
    });
  });
}
