// The ids the spec calls increasing increase on every topology: friend request ids
// ("server-assigned, increasing"), message ids within a conversation, the sn of a user's update
// stream and a stream's delta seq. In the cluster's shape the calls alternate between the two api
// nodes, each of which spreads the engine's actions round-robin over the two engines, so
// consecutive calls are served by different engines (unsharded actions such as friend requests)
// and reach the sharded owners from both api nodes; sockets come through either gateway.
import { expect } from "chai";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import type { Parley } from "../server.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import type { TestCluster } from "./support/cluster-topology.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedEnvelopes, streamOf, streamStartBody, textBody } from "./support/messaging.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

const mode = "json";

/** Asserts each value is above the one before it. */
function expectIncreasing<T extends number | bigint>(values: T[], what: string): void {
  for (let i = 1; i < values.length; i++) expect(values[i] > values[i - 1], `${what} increase: ${values.join(", ")}`).to.equal(true);
}

describe("ids the spec calls increasing increase across nodes", () => {
  let server: TestServer;
  /** The api nodes' own URLs in the cluster's shape (the server's alone in one process). */
  let apiUrls: string[];
  const sockets: GatewayClient[] = [];

  before(async function () {
    this.timeout(60_000);
    server = await startTestServer();
    const nodes = (server as TestServer & Partial<Pick<TestCluster, "nodes">>).nodes;
    apiUrls = nodes ? Object.entries(nodes).flatMap(([name, node]: [string, Parley]) => (name.startsWith("api") ? [node.url] : [])) : [server.url];
  });
  afterEach(() => {
    for (const socket of sockets.splice(0)) socket.close();
  });
  after(async () => server?.dispose());

  /** The `i`-th call's api node: consecutive calls alternate between the nodes. */
  const node = (i: number) => ({ url: apiUrls[i % apiUrls.length] });
  const tokenOf = (u: SignedIn | TestAgent) => ("accessToken" in u ? u.accessToken : u.token);
  const users = (n: number) => Promise.all(Array.from({ length: n }, () => signInWithCode(server, mode)));

  async function socketOf(u: SignedIn | TestAgent): Promise<GatewayClient> {
    const socket = await GatewayClient.connect(server.url, mode);
    sockets.push(socket);
    const answer = await socket.authenticate(tokenOf(u));
    expect(answer.payload.case === "authResponse" && answer.payload.value.success, "socket authenticated").to.equal(true);
    return socket;
  }

  it("has two api nodes to alternate between in the cluster's shape", () => {
    expect(apiUrls).to.have.length((server as TestServer & Partial<Pick<TestCluster, "nodes">>).nodes ? 2 : 1);
  });

  it("friend request ids: requests made one after the other, by one user and by others, through both api nodes, increase", async () => {
    const [a, b, c, d, e, f] = await users(6);
    // The first two are one user's two requests, as in the report that found ids 259 then 5.
    const requests: [SignedIn, SignedIn][] = [
      [a, b],
      [a, c],
      [d, b],
      [e, c],
      [f, b],
      [d, c],
      [e, f],
      [a, d],
    ];
    const ids: bigint[] = [];
    for (const [i, [from, to]] of requests.entries()) {
      server.clock.advance(1);
      ids.push((await client(node(i), ContactService, mode, from.accessToken).sendFriendRequest({ targetUserId: to.userId })).requestId);
    }
    expectIncreasing(ids, "request ids");
    // Newest first by time is highest id first.
    const listed = (await client(server, ContactService, mode, b.accessToken).listPendingRequests({})).items.map((item) => item.requestId);
    expect(listed).to.deep.equal([ids[4], ids[2], ids[0]]);
  });

  it("message ids within a conversation: senders alternating between api nodes, then a burst through both at once", async () => {
    const [alice, bob] = await users(2);
    const conversationId = await befriend(server, alice, bob, mode);
    const send = (i: number, text: string) =>
      client(node(i), MessageService, mode, tokenOf(i % 3 === 0 ? alice : bob)).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    const sequential: bigint[] = [];
    for (let i = 0; i < 6; i++) sequential.push((await send(i, `m${i}`)).messageId);
    expectIncreasing(sequential, "message ids");
    const burst = (await Promise.all(Array.from({ length: 10 }, (_, i) => send(i, `b${i}`)))).map((sent) => sent.messageId);
    expect(new Set(burst).size, "distinct ids in the burst").to.equal(burst.length);
    expect(burst.every((id) => id > sequential[sequential.length - 1]), "the burst's ids follow the earlier ones").to.equal(true);
    // History lists them in id order, each text once: ids and the order of the stored messages agree.
    const history = (await client(server, MessageService, mode, alice.accessToken).getMessageHistory({ conversationId, afterMessageId: 0n, limit: 200 })).messages;
    expect(history.map((m) => m.messageId)).to.deep.equal([...sequential, ...[...burst].sort((x, y) => (x < y ? -1 : 1))]);
  });

  it("sn: a user's stream takes events from both engines and both api nodes in order, live on a socket and by GetDifference", async () => {
    const [user, friend, ...senders] = await users(5);
    const socket = await socketOf(user);
    const conversationId = await befriend(server, friend, user, mode);
    const latest: number[] = [];
    const latestSn = async (i: number) => latest.push((await client(node(i), SyncService, mode, user.accessToken).getCurrentState({})).state!.latestSn);
    const steps: ((i: number) => Promise<unknown>)[] = [
      ...senders.map((sender) => (i: number) => client(node(i), ContactService, mode, sender.accessToken).sendFriendRequest({ targetUserId: user.userId })),
      (i) => client(node(i), MessageService, mode, friend.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("one") }),
      (i) => client(node(i), UserService, mode, user.accessToken).updateProfile({ nickname: "renamed" }),
      (i) => client(node(i), GroupService, mode, friend.accessToken).createGroup({ name: "g", memberIds: [user.userId, senders[0].userId] }),
      (i) => client(node(i), MessageService, mode, friend.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("two") }),
    ];
    await latestSn(0);
    for (const [i, step] of steps.entries()) {
      await step(i);
      await latestSn(i + 1);
    }
    expectIncreasing(latest, "latest sn after each change");
    const sns: number[] = [];
    for (let sn = 0, i = 0; ; i++) {
      const page = await client(node(i), SyncService, mode, user.accessToken).getDifference({ sn });
      sns.push(...page.updates.map((u) => u.sn));
      sn = page.sn;
      if (!page.hasMore) break;
    }
    expect(sns, "the whole stream, gapless from 1").to.deep.equal(Array.from({ length: latest[latest.length - 1] }, (_, i) => i + 1));
    await eventually(() => socket.pushedSns().at(-1) === sns[sns.length - 1], "the socket received the latest sn");
    const pushed = socket.pushedSns();
    expect(pushed, "pushed live in order, gapless").to.deep.equal(sns.slice(sns.indexOf(pushed[0])));
  });

  it("stream delta seq: deltas pushed through both api nodes, one by one and all at once, reach the user in seq order", async () => {
    const [owner] = await users(1);
    const agent = await createAgent(server, owner, mode);
    const socket = await socketOf(owner);
    const { conversationId } = agent;
    const { messageId } = await client(server, MessageService, mode, agent.token).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
    const push = (seq: number) => client(node(seq), MessageService, mode, agent.token).pushStreamDelta({ conversationId, messageId, seq, delta: `${seq},` });
    for (let seq = 1; seq <= 4; seq++) await push(seq);
    await Promise.all(Array.from({ length: 12 }, (_, i) => push(5 + i)));
    const deltas = () => pushedEnvelopes(socket, "nonSnUpdate", messageId).map((envelope) => streamOf(envelope)?.seq);
    await eventually(() => deltas().length === 16, "16 deltas on the socket");
    expect(deltas()).to.deep.equal(Array.from({ length: 16 }, (_, i) => i + 1));
    const { message } = await client(server, MessageService, mode, owner.accessToken).getMessage({ conversationId, messageId });
    expect(streamOf(message)?.accumulatedText).to.equal(Array.from({ length: 16 }, (_, i) => `${i + 1},`).join(""));
  });
});
