// The least SQLite can spend on a durable private message on this machine, whatever runs above it:
// raw better-sqlite3, no Parley code, the smallest schema that still keeps what the spec asks to keep
// (the message under its dense id, the conversation's last id, an entry in each member's stream
// under its dense sn), one transaction per message, the store's own pragmas (WAL, synchronous
// NORMAL). Messages go to `--pairs` conversations picked at random, as the benchmark's closed loop
// sends them. `--per-commit N` commits N messages together, as a group commit across conversations
// would. Prints CPU per message (user and system: WAL writes and checkpoints are system time).
// Issue 23's item 5 asks 0.15 ms of server CPU per private message for everything: this is the
// part no code of ours can take away (docs/benchmarks.md, "the floor under item 5").
//
//   npx tsx scripts/bench/sqlite-floor.ts [--pairs 50] [--messages 30000] [--rounds 4] [--per-commit 1]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import Database from "better-sqlite3";

const { values } = parseArgs({
  options: {
    pairs: { type: "string", default: "50" },
    messages: { type: "string", default: "30000" },
    rounds: { type: "string", default: "4" },
    "per-commit": { type: "string", default: "1" },
  },
});
const pairs = Number(values.pairs);
const messages = Number(values.messages);
const rounds = Number(values.rounds);
const perCommit = Number(values["per-commit"]);
if (![pairs, messages, rounds, perCommit].every((n) => Number.isInteger(n) && n > 0)) throw new Error("--pairs, --messages, --rounds and --per-commit take positive integers");

const dir = mkdtempSync(join(tmpdir(), "sqlite-floor-"));
const db = new Database(join(dir, "floor.db"));
db.pragma("journal_mode = WAL");
db.pragma("synchronous = NORMAL");
db.exec(`
  CREATE TABLE messages (conversation_id INTEGER, message_id INTEGER, sender_id INTEGER, body BLOB, created_at INTEGER, PRIMARY KEY (conversation_id, message_id)) WITHOUT ROWID;
  CREATE TABLE conversations (conversation_id INTEGER PRIMARY KEY, last_message_id INTEGER);
  CREATE TABLE stream_entries (user_id INTEGER, sn INTEGER, entry BLOB, PRIMARY KEY (user_id, sn)) WITHOUT ROWID;
`);
const insertMessage = db.prepare("INSERT INTO messages VALUES (?, ?, ?, ?, ?)");
const recordLast = db.prepare("INSERT INTO conversations VALUES (?, ?) ON CONFLICT (conversation_id) DO UPDATE SET last_message_id = excluded.last_message_id");
const appendEntry = db.prepare("INSERT INTO stream_entries VALUES (?, ?, ?)");

// Ids and sns are held in memory, as Parley's actors hold them: no read per message.
const lastMessageId = new Map<number, number>();
const latestSn = new Map<number, number>();
// About a short text message's envelope and its stream entry.
const body = Buffer.alloc(120, 7);
const entry = Buffer.alloc(200, 9);

function send(sender: number, recipient: number): void {
  const conversationId = Math.max(sender, recipient) * 1_000_000 + Math.min(sender, recipient);
  const messageId = (lastMessageId.get(conversationId) ?? 0) + 1;
  lastMessageId.set(conversationId, messageId);
  insertMessage.run(conversationId, messageId, sender, body, Date.now());
  recordLast.run(conversationId, messageId);
  for (const userId of [sender, recipient]) {
    const sn = (latestSn.get(userId) ?? 0) + 1;
    latestSn.set(userId, sn);
    appendEntry.run(userId, sn, entry);
  }
}

const randomPair = (): [number, number] => {
  const first = 2 * Math.floor(Math.random() * pairs);
  return Math.random() < 0.5 ? [first, first + 1] : [first + 1, first];
};
const commit = db.transaction(() => {
  for (let i = 0; i < perCommit; i++) send(...randomPair());
});

console.log(`raw SQLite, durable private message: ${pairs} pairs, ${perCommit} message(s) per commit, ${messages} messages a round`);
const perMessage: number[] = [];
for (let round = 1; round <= rounds; round++) {
  const before = process.cpuUsage();
  for (let sent = 0; sent < messages; sent += perCommit) commit();
  const used = process.cpuUsage(before);
  const micros = (used.user + used.system) / messages;
  perMessage.push(micros);
  console.log(`round ${round}: ${micros.toFixed(1)} µs CPU per message (user ${(used.user / messages).toFixed(1)}, system ${(used.system / messages).toFixed(1)})`);
}
const sorted = [...perMessage].sort((a, b) => a - b);
console.log(`median: ${sorted[Math.floor(sorted.length / 2)].toFixed(1)} µs CPU per message`);
db.close();
rmSync(dir, { recursive: true, force: true });
