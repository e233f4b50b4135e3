// Counts what one message costs Cassandra, not its time: lightweight transactions (each a Paxos
// round), conditional batches (one Paxos round each), plain writes and batches, and reads, per
// private SendMessage and per SendMessage to a group of `--members` members, with the server in
// this process on the test Cassandra (started if it is not running; stopped at the end if this run
// started it). Issue 23's first target is read here: a private message at most 1 Paxos round, a
// 200-member group message at most 2. `--statements` lists each conditional statement's count,
// `--statements --all` every statement's.
//
//   npx tsx scripts/bench/paxos-counts.ts [--members 200] [--messages 10] [--statements [--all]]
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { members: { type: "string", default: "200" }, messages: { type: "string", default: "10" }, statements: { type: "boolean", default: false }, all: { type: "boolean", default: false } } });
const members = Number(values.members);
const messages = Number(values.messages);
// Read by the harness when it loads: every test server of this run is on Cassandra.
process.env.PARLEY_TEST_STORE = "cassandra";

const { tallyCassandraStatements } = await import("../../test/support/cassandra-statements.js");
const tally = tallyCassandraStatements();
const leaseRenewal = (text: string) => text.startsWith("UPDATE leases SET expires_at");
const { startTestServer, client } = await import("../../test/support/harness.js");
const { releaseTestCassandra, closeTestKeyspaces } = await import("../../test/support/cassandra.js");
const { signInWithCode } = await import("../../test/support/accounts.js");
const { befriend } = await import("../../test/support/social.js");
const { scrape, sumOf } = await import("../../test/support/prometheus-text.js");
const { MessageService } = await import("../../shared/gen/api/v1/message_pb.js");
const { GroupService } = await import("../../shared/gen/api/v1/group_pb.js");
const { MessageType } = await import("../../shared/gen/shared/v1/message_pb.js");

const kinds = ["lwt", "lwt_batch", "write", "batch", "read"] as const;
const server = await startTestServer({ env: { LOG_LEVEL: "warn" } });
try {
  const queryCounts = async () => {
    const text = await scrape(server.url);
    return Object.fromEntries(kinds.map((kind) => [kind, sumOf(text, "parley_store_query_duration_seconds_count", { store: "cassandra", kind })])) as Record<(typeof kinds)[number], number>;
  };
  const users = [];
  for (let i = 0; i < members; i++) users.push(await signInWithCode(server));
  const [alice, bob] = users;
  const privateId = await befriend(server, alice, bob);
  const created = await client(server, GroupService, "json", alice.accessToken).createGroup({ name: "counted", memberIds: users.slice(1).map((user) => user.userId) });
  const groupId = BigInt(created.group!.groupId);
  const send = client(server, MessageService, "json", alice.accessToken);
  let clientMessageId = 1n;
  const message = (text: string) => ({ type: MessageType.TEXT, content: { case: "text" as const, value: { text } } });

  const rows: string[] = [];
  for (const [label, conversationId] of [
    ["private message", privateId],
    [`group message (${members} members)`, groupId],
  ] as const) {
    // Warm: what is read once per user or conversation and then cached is not what is counted.
    for (let i = 0; i < 3; i++) await send.sendMessage({ conversationId, clientMessageId: clientMessageId++, body: message("warm") });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const before = await queryCounts();
    tally.clear();
    for (let i = 0; i < messages; i++) await send.sendMessage({ conversationId, clientMessageId: clientMessageId++, body: message(`counted ${i}`) });
    // Deliveries finish after the answer: wait for them to settle before reading the counts.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const after = await queryCounts();
    const per = (kind: (typeof kinds)[number]) => ((after[kind] - before[kind]) / messages).toFixed(1);
    // Lease renewals run on a timer whatever is sent: shown apart, as test/paxos-rounds.test.ts leaves them out.
    const renewals = tally.paxosRounds() - tally.paxosRounds(leaseRenewal);
    const paxos = ((after.lwt - before.lwt + after.lwt_batch - before.lwt_batch - renewals) / messages).toFixed(1);
    rows.push(`| ${label} | ${paxos} | ${(renewals / messages).toFixed(1)} | ${per("lwt")} | ${per("lwt_batch")} | ${per("write")} | ${per("batch")} | ${per("read")} |`);
    if (values.statements) {
      console.log(`\n${label}: ${values.all ? "" : "conditional "}statements per message`);
      const listed = [...tally.counts].filter(([, { conditional }]) => conditional || values.all).sort((a, b) => b[1].count - a[1].count);
      for (const [query, { count }] of listed) console.log(`  ${(count / messages).toFixed(1).padStart(6)}  ${query.slice(0, 100)}`);
    }
  }
  console.log(`\nCassandra work per SendMessage (${messages} messages each, after 3 to warm; ${new Date().toISOString().slice(0, 10)})\n`);
  console.log("| message | Paxos rounds | lease renewals meanwhile | LWTs | conditional batches | writes | batches | reads |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const row of rows) console.log(row);
} finally {
  tally.stop();
  await server.dispose();
  await closeTestKeyspaces();
  await releaseTestCassandra();
}
