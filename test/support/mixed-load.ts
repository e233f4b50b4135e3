// A mixed load for engine-fault tests: private pairs and a group sending in closed loops (each
// message retried with its clientMessageId until acknowledged, as a client does) and readers of
// update streams. Every attempt is recorded with the engine its key is placed on, so a test can
// say which keys failed and for how long; then every stream is read whole.
import { expect } from "chai";
import { ConnectError } from "@connectrpc/connect";
import { conversationKey, userStreamKey } from "../../shared/shards.js";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import type { SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { ErrorDetailSchema } from "../../shared/gen/shared/v1/error_pb.js";
import { retryDelayOf } from "../../sdk/src/retry.js";
import { signInWithCode, type SignedIn } from "./accounts.js";
import { client, type TestServer } from "./harness.js";
import { nextClientMessageId, textBody, textOf, wholeStream } from "./messaging.js";
import { befriend } from "./social.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Attempt {
  kind: "send" | "read";
  /** The engine the key is placed on while both are up. */
  home: string;
  startedAt: number;
  endedAt: number;
  /** Undefined when it succeeded; else the answer's code and reason. */
  failure?: string;
}

function failureOf(err: unknown): string {
  if (!(err instanceof ConnectError)) return String(err);
  const reason = err.findDetails(ErrorDetailSchema)[0]?.metadata.reason;
  return `${err.code}${reason ? ` ${reason}` : ""}: ${err.rawMessage}`;
}

/** Private pairs and a group sending in closed loops, and readers of update streams, until stopped. */
export class MixedLoad {
  readonly attempts: Attempt[] = [];
  readonly acknowledged = new Map<bigint, bigint[]>();
  /** Per conversation, the messages given up unacknowledged when the load stopped (each loop sends one at a time). */
  private readonly givenUp = new Map<bigint, number>();
  readonly users: SignedIn[] = [];
  private readonly conversations: { id: bigint; members: SignedIn[] }[] = [];
  private running: Promise<void>[] = [];
  private stopped = false;

  constructor(
    private readonly cluster: Pick<TestServer, "url" | "codesFile">,
    /** The engine a key is placed on while every engine is up. */
    private readonly homeOf: (key: string) => string,
  ) {}

  async prepare(pairs: number): Promise<void> {
    for (let i = 0; i < pairs * 2; i++) this.users.push(await signInWithCode(this.cluster));
    for (let i = 0; i < pairs; i++) {
      const [a, b] = [this.users[2 * i], this.users[2 * i + 1]];
      this.conversations.push({ id: await befriend(this.cluster, a, b), members: [a, b] });
    }
    const [owner, ...others] = this.users.slice(0, 8);
    const group = (await client(this.cluster, GroupService, "json", owner.accessToken).createGroup({ name: "faults", memberIds: others.map((u) => u.userId) })).group!;
    this.conversations.push({ id: BigInt(group.groupId), members: [owner, ...others] });
    for (const { id } of this.conversations) this.acknowledged.set(id, []);
  }

  start(): void {
    this.running = [
      ...this.conversations.map(async ({ id, members }) => {
        for (let n = 0; !this.stopped; n++) await this.send(members[n % members.length], id, `m${n}`);
      }),
      ...this.users.slice(0, 4).map(async (user) => {
        while (!this.stopped) {
          const read = await this.attempt("read", userStreamKey(user.userId), () => client(this.cluster, SyncService, "json", user.accessToken).getDifference({ sn: 0 }));
          await sleep(read ? 50 : this.retryDelay);
        }
      }),
    ];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.running);
  }

  /** One message, sent again with the same clientMessageId until acknowledged. */
  private async send(sender: SignedIn, conversationId: bigint, text: string): Promise<void> {
    const clientMessageId = nextClientMessageId();
    const messages = client(this.cluster, MessageService, "json", sender.accessToken);
    for (;;) {
      const sent = await this.attempt("send", conversationKey(conversationId), () => messages.sendMessage({ conversationId, clientMessageId, body: textBody(text) }));
      if (sent) {
        this.acknowledged.get(conversationId)!.push(sent.messageId);
        return;
      }
      // After the stop, an unacknowledged message is the client's to give up (it may have been stored).
      if (this.stopped) {
        this.givenUp.set(conversationId, (this.givenUp.get(conversationId) ?? 0) + 1);
        return;
      }
      await sleep(this.retryDelay);
    }
  }

  /** The wait before the next try after the last failure: what the answer asked for, as the SDK waits. */
  private retryDelay = 50;

  private async attempt<T>(kind: Attempt["kind"], key: string, call: () => Promise<T>): Promise<T | undefined> {
    const startedAt = performance.now();
    try {
      const result = await call();
      this.attempts.push({ kind, home: this.homeOf(key), startedAt, endedAt: performance.now() });
      return result;
    } catch (err) {
      this.attempts.push({ kind, home: this.homeOf(key), startedAt, endedAt: performance.now(), failure: failureOf(err) });
      this.retryDelay = retryDelayOf(err) ?? 50;
      return undefined;
    }
  }

  failuresOf(home: string, after: number): Attempt[] {
    return this.attempts.filter((a) => a.failure !== undefined && a.home === home && a.endedAt >= after);
  }

  succeededAfter(at: number): number {
    return this.attempts.filter((a) => a.failure === undefined && a.kind === "send" && a.startedAt > at).length;
  }

  /**
   * Every user's stream whole: sns dense from 1; each acknowledged message once in each member's
   * stream; message ids dense; and no message there that was never acknowledged, but those given
   * up at the stop (a write of an owner whose lease had moved, had it landed, would be one more).
   */
  async verifyStreams(): Promise<void> {
    const streams = new Map<number, SnUpdate[]>();
    for (const user of this.users) streams.set(user.userId, await wholeStream(this.cluster, user));
    for (const [userId, stream] of streams) expect(stream.map((u) => u.sn), `user ${userId}: sns dense`).to.deep.equal(stream.map((_u, i) => i + 1));
    for (const { id, members } of this.conversations) {
      const acknowledged = this.acknowledged.get(id)!;
      expect(new Set(acknowledged).size, `conversation ${id}: no id answered twice`).to.equal(acknowledged.length);
      for (const member of members) {
        const held = streams.get(member.userId)!.flatMap((u) => (u.update.case === "messageEnvelope" && u.update.value.conversationId === id ? [u.update.value.messageId] : []));
        expect(new Set(held).size, `conversation ${id} in the stream of ${member.userId}: each message once`).to.equal(held.length);
        for (const messageId of acknowledged) expect(held, `conversation ${id}, user ${member.userId}: acknowledged ${messageId} kept`).to.include(messageId);
        // Only the load's own messages: a conversation opens with a system message of its own.
        const sentByLoad = streams.get(member.userId)!.flatMap((u) =>
          u.update.case === "messageEnvelope" && u.update.value.conversationId === id && /^m\d+$/.test(textOf(u.update.value) ?? "") ? [u.update.value.messageId] : [],
        );
        expect(sentByLoad, `conversation ${id}, user ${member.userId}: the load's messages found by their text`).to.include.members(acknowledged);
        const unacknowledged = sentByLoad.filter((messageId) => !acknowledged.includes(messageId));
        expect(unacknowledged.length, `conversation ${id}, user ${member.userId}: messages never acknowledged ${unacknowledged.join(", ")}`).to.be.at.most(this.givenUp.get(id) ?? 0);
        const sorted = [...held].sort((x, y) => (x < y ? -1 : 1));
        expect(sorted.every((messageId, i) => messageId - sorted[0] === BigInt(i)), `conversation ${id}: ids dense`).to.equal(true);
      }
    }
  }
}
