// The accounts and conversations the benchmark loads, built through the public API with the
// test suite's helpers: signed-in users, befriended pairs, one full group, and agents with an open
// stream each towards their creator.
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { privateConversationId } from "../../shared/ids.js";
import { signInWithCode, type SignedIn } from "../../test/support/accounts.js";
import { client } from "../../test/support/harness.js";
import { befriend } from "../../test/support/social.js";
import { streamStartBody } from "../../test/support/messaging.js";

export interface Stream {
  /** Index (in `users`) of the person the agent streams to. */
  owner: number;
  agentToken: string;
  conversationId: bigint;
  messageId: bigint;
  /** The last delta's seq. */
  seq: number;
}

export interface Fixture {
  users: SignedIn[];
  /** Befriended pairs, by index in `users`. */
  pairs: { a: number; b: number; conversationId: bigint }[];
  group: { conversationId: bigint; members: number[] };
  streams: Stream[];
}

export interface FixtureShape {
  pairs: number;
  groupSize: number;
  streams: number;
}

export async function inBatches<T>(count: number, batch: number, make: (index: number) => Promise<T>): Promise<T[]> {
  const made: T[] = [];
  for (let start = 0; start < count; start += batch) made.push(...(await Promise.all(Array.from({ length: Math.min(batch, count - start) }, (_, k) => make(start + k)))));
  return made;
}

export async function buildFixture(server: { url: string; codesFile: string }, shape: FixtureShape): Promise<Fixture> {
  const userCount = Math.max(2 * shape.pairs, shape.groupSize, 1);
  const users = await inBatches(userCount, 8, () => signInWithCode(server, "binary"));
  const pairs = await inBatches(shape.pairs, 8, async (k) => ({ a: 2 * k, b: 2 * k + 1, conversationId: await befriend(server, users[2 * k], users[2 * k + 1], "binary") }));

  const members = Array.from({ length: shape.groupSize }, (_, i) => i);
  let groupConversation = 0n;
  if (shape.groupSize > 1) {
    const { group } = await client(server, GroupService, "binary", users[0].accessToken).createGroup({ name: "bench", memberIds: members.slice(1).map((i) => users[i].userId) });
    groupConversation = BigInt(group!.groupId);
  }

  const streams = await inBatches(shape.streams, 8, async (k): Promise<Stream> => {
    const owner = shape.pairs > 0 ? 2 * (k % shape.pairs) : k % users.length;
    const created = await client(server, AgentService, "binary", users[owner].accessToken).createAgent({ username: `bench_${process.pid}_${k}`.slice(0, 32), name: `bench ${k}` });
    const conversationId = privateConversationId(users[owner].userId, created.profile!.user!.userId);
    const { messageId } = await client(server, MessageService, "binary", created.token).sendMessage({ conversationId, clientMessageId: 1n, body: streamStartBody() });
    return { owner, agentToken: created.token, conversationId, messageId, seq: 0 };
  });
  return { users, pairs, group: { conversationId: groupConversation, members }, streams };
}
