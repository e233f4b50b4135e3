// On Cassandra, what a message costs in Paxos rounds must not grow with its recipients (DATA-MODEL
// §5.4: stream appends are plain batches fenced by write timestamps): a private message at most 1
// (the conversation head's), a 200-member group message at most 2. Counted from the statements the
// servers send, which run in this process. The SQLite pass has no Paxos round to count.
import { expect } from "chai";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { tallyCassandraStatements, type StatementTally } from "./support/cassandra-statements.js";
import { client, startTestServer, testStore, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, textBody } from "./support/messaging.js";
import { befriend } from "./support/social.js";

const members = 200;
const counted = 5;
/** Lease renewals run on a timer, whatever is sent: not a message's cost. */
const renewal = (text: string) => text.startsWith("UPDATE leases SET expires_at");

describe("Paxos rounds per message on Cassandra", function () {
  this.timeout(180_000);
  let server: TestServer;
  let users: SignedIn[];
  let tally: StatementTally;

  before(async function () {
    if (testStore !== "cassandra") this.skip();
    server = await startTestServer();
    users = [];
    // Forty at a time: one by one took most of this file's time.
    for (let i = 0; i < members; i += 40) users.push(...(await Promise.all(Array.from({ length: Math.min(40, members - i) }, () => signInWithCode(server)))));
    tally = tallyCassandraStatements();
  });
  after(async () => {
    tally?.stop();
    await server?.dispose();
  });

  /** Sends `counted` messages after two to warm (leases taken, heads cached), then the rounds per message once every stream took them. */
  async function roundsPerMessage(sender: SignedIn, conversationId: bigint, recipients: number): Promise<number> {
    const send = client(server, MessageService, "json", sender.accessToken);
    for (let i = 0; i < 2; i++) await send.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("warm") });
    // One entry per stream and message, however many streams share a request.
    const streamEntries = () => tally.statementsStarting("INSERT INTO stream_entries");
    await eventually(() => streamEntries() >= 2 * recipients, "the warming messages in every stream", 20_000);
    tally.clear();
    for (let i = 0; i < counted; i++) await send.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(`counted ${i}`) });
    await eventually(() => streamEntries() >= counted * recipients, "the counted messages in every stream", 20_000);
    const rounds = tally.paxosRounds(renewal) / counted;
    const conditional = [...tally.counts].filter(([text, { conditional }]) => conditional && !renewal(text)).map(([text, { count }]) => `${count} × ${text.slice(0, 90)}`);
    console.log(`      ${recipients} streams: ${rounds} Paxos rounds per message (${conditional.join("; ") || "none"})`);
    return rounds;
  }

  it("a private message: at most 1, its conversation head's", async () => {
    const [alice, bob] = users;
    const conversationId = await befriend(server, alice, bob);
    expect(await roundsPerMessage(alice, conversationId, 2)).to.be.at.most(1);
  });

  it(`a ${members}-member group message: at most 2, however many streams it reaches`, async () => {
    const [owner, ...others] = users;
    const created = await client(server, GroupService, "json", owner.accessToken).createGroup({ name: "counted", memberIds: others.map((user) => user.userId) });
    expect(await roundsPerMessage(owner, BigInt(created.group!.groupId), members)).to.be.at.most(2);
  });
});
