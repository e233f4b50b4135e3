// `kill -9` of a real server process under a send load: every message it acknowledged, and every
// message a client retries after the restart, is in the history exactly once with dense ids and
// in each participant's update stream exactly once with dense sn values; retries answer the ids
// the first answers gave.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect } from "chai";
import { ConnectError } from "@connectrpc/connect";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, freePort, generousAbuseLimits, testStore, testStoreEnv } from "./support/harness.js";
import { textBody } from "./support/messaging.js";
import { befriend } from "./support/social.js";

const root = resolve(import.meta.dirname, "..");

interface ServerProcess {
  url: string;
  codesFile: string;
  child: ChildProcess;
}

async function startServerProcess(dataDir: string, port: number): Promise<ServerProcess> {
  const codesFile = join(dataDir, "codes.jsonl");
  const child = spawn(process.execPath, ["--import", "tsx", "main.ts"], {
    cwd: root,
    // On the suite's store: with PARLEY_TEST_STORE=cassandra, `npm start` with the Cassandra settings is killed.
    env: { ...process.env, ...generousAbuseLimits, ...(await testStoreEnv(dataDir)), HOST: "127.0.0.1", PORT: String(port), DATA_DIR: dataDir, CODE_DELIVERY: `file:${codesFile}`, LOG_LEVEL: "error" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let waited = 0; ; waited += 50) {
    if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode} while starting`);
    const ok = await fetch(`${url}/healthz`).then(
      (response) => response.ok,
      () => false,
    );
    if (ok) return { url, codesFile, child };
    if (waited > 30_000) throw new Error("the server did not become ready");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function kill9(server: ServerProcess): Promise<void> {
  const exited = new Promise((resolve) => server.child.once("exit", resolve));
  server.child.kill("SIGKILL");
  await exited;
}

interface Send {
  sender: SignedIn;
  conversationId: bigint;
  clientMessageId: bigint;
  text: string;
  /** The id of the first success, if one came before the kill. */
  acknowledged?: bigint;
}

describe("kill -9 under a send load", function () {
  this.timeout(120_000);
  let dataDir: string;
  let server: ServerProcess | undefined;
  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-kill-"));
  });
  afterEach(async () => {
    if (server && server.child.exitCode === null) await kill9(server);
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** One conversation of the load: who takes part and who sends. */
  interface Conversation {
    conversationId: bigint;
    participants: SignedIn[];
    senders: SignedIn[];
  }

  async function allHistory(url: string, user: SignedIn, conversationId: bigint) {
    const history = [];
    const messages = client({ url }, MessageService, "json", user.accessToken);
    for (let before: bigint | undefined; ; ) {
      const page = await messages.getMessageHistory({ conversationId, beforeMessageId: before, limit: 100 });
      history.push(...page.messages);
      if (!page.hasMore) return history.reverse();
      before = page.messages[page.messages.length - 1].messageId;
    }
  }

  async function allUpdates(url: string, user: SignedIn) {
    const sync = client({ url }, SyncService, "json", user.accessToken);
    const entries = [];
    for (let sn = 0; ; ) {
      const page = await sync.getDifference({ sn });
      expect(page.updateTooLong).to.equal(false);
      entries.push(...page.updates);
      sn = page.sn;
      if (!page.hasMore) return entries;
    }
  }

  // Six kill moments, three on each store: npm test runs this file on SQLite and on Cassandra,
  // and each round is a server start and a load of its own (7-12 s).
  for (const round of testStore === "sqlite" ? [1, 3, 5] : [2, 4, 6]) {
    it(`keeps every acknowledged message, once per stream, with dense ids and sn values (round ${round})`, async () => {
      const port = await freePort();
      server = await startServerProcess(dataDir, port);
      const users: SignedIn[] = [];
      for (let i = 0; i < 60; i++) users.push(await signInWithCode(server));
      // A group (its fan-out is long, so a kill lands inside one) and two private conversations.
      const { group } = await client(server, GroupService, "json", users[0].accessToken).createGroup({ name: "load", memberIds: users.slice(1).map((user) => user.userId) });
      const conversations: Conversation[] = [
        { conversationId: BigInt(group!.groupId), participants: users, senders: users.slice(0, 4) },
        { conversationId: await befriend(server, users[4], users[5]), participants: [users[4], users[5]], senders: [users[4], users[5]] },
        { conversationId: await befriend(server, users[6], users[7]), participants: [users[6], users[7]], senders: [users[6], users[7]] },
      ];

      // Each sender sends one message after another until the kill.
      const sends: Send[] = [];
      let killed = false;
      let nextClientMessageId = BigInt(round) * 1_000_000n;
      const sender = async (from: SignedIn, conversationId: bigint) => {
        const messages = client(server!, MessageService, "binary", from.accessToken);
        while (!killed) {
          const send: Send = { sender: from, conversationId, clientMessageId: nextClientMessageId++, text: `m${sends.length}` };
          sends.push(send);
          try {
            send.acknowledged = (await messages.sendMessage({ conversationId, clientMessageId: send.clientMessageId, body: textBody(send.text) })).messageId;
          } catch (err) {
            if (!(err instanceof ConnectError) || !killed) throw err;
          }
        }
      };
      const load = conversations.flatMap(({ conversationId, senders }) => senders.map((from) => sender(from, conversationId)));
      // Kill at a moment that varies by round, once the load is well under way.
      const target = 30 + round * 17;
      while (sends.filter((send) => send.acknowledged !== undefined).length < target) await new Promise((resolve) => setTimeout(resolve, 1));
      killed = true;
      await kill9(server);
      await Promise.all(load);

      server = await startServerProcess(dataDir, port);
      // Every send is retried: an acknowledged one must answer its first id; the others were
      // either accepted just before the kill or are accepted now.
      const answered = new Map<Send, bigint>();
      for (const send of sends) {
        const { messageId } = await client(server, MessageService, "json", send.sender.accessToken).sendMessage({
          conversationId: send.conversationId,
          clientMessageId: send.clientMessageId,
          body: textBody(send.text),
        });
        if (send.acknowledged !== undefined) expect(messageId, `retry of ${send.text}`).to.equal(send.acknowledged);
        answered.set(send, messageId);
      }

      const streams = new Map<SignedIn, Awaited<ReturnType<typeof allUpdates>>>();
      for (const user of users) {
        const entries = await allUpdates(server.url, user);
        expect(entries.map((entry) => entry.sn), `sn values of user ${user.userId}`).to.deep.equal(entries.map((_, index) => index + 1));
        streams.set(user, entries);
      }
      for (const { conversationId, participants } of conversations) {
        // History: ids dense from 1 (system messages included), each send once, where its answer said.
        const history = await allHistory(server.url, participants[0], conversationId);
        const ids = history.map((message) => message.messageId);
        expect(ids).to.deep.equal(history.map((_, index) => BigInt(index + 1)));
        const ofConversation = sends.filter((send) => send.conversationId === conversationId);
        expect(history.filter((message) => message.senderId !== 0)).to.have.length(ofConversation.length);
        const clientIdOf = new Map(history.map((message) => [message.messageId, message.clientMessageId]));
        for (const send of ofConversation) expect(clientIdOf.get(answered.get(send)!)).to.equal(send.clientMessageId);

        // Streams: every participant has every message of the conversation once, in id order.
        for (const user of participants) {
          const streamed = streams.get(user)!.flatMap((entry) =>
            entry.update.case === "messageEnvelope" && entry.update.value.conversationId === conversationId ? [entry.update.value.messageId] : [],
          );
          expect(streamed, `messages of ${conversationId} in the stream of user ${user.userId}`).to.deep.equal(ids);
        }
      }
    });
  }
});
