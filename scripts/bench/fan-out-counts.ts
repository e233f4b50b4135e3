// Counts the work one message costs, not its time: SQL statements executed, transactions, broker
// calls, broadcasts and frame encodings, per private SendMessage and per SendMessage to a group of
// `--members` members, every member connected by WebSocket. The server runs in this process (the
// test harness), so every layer can be counted; stores and services are the real ones.
//
//   npx tsx scripts/bench/fan-out-counts.ts [--members 200] [--messages 20] [--statements]   (--statements: each SQL statement's count)
//   PARLEY_ROOT=/path/to/other/checkout npx tsx scripts/bench/fan-out-counts.ts   # the same counts for another build
import { resolve, join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import Database from "better-sqlite3";

const { values } = parseArgs({ options: { members: { type: "string", default: "200" }, messages: { type: "string", default: "20" }, statements: { type: "boolean", default: false } } });
const members = Number(values.members);
const messages = Number(values.messages);
const root = resolve(process.env.PARLEY_ROOT ?? join(import.meta.dirname, "..", ".."));
const load = async <T>(path: string): Promise<T> => (await import(pathToFileURL(join(root, path)).href)) as T;

const bySql = new Map<string, number>();
const counts = { statements: 0, transactions: 0, calls: new Map<string, number>(), broadcasts: new Map<string, number>(), emits: 0, fullEncodes: 0, splices: 0 };
const total = (map: Map<string, number>) => [...map.values()].reduce((sum, n) => sum + n, 0);
const bump = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1);

// SQL: every execution of a prepared statement, and every outermost transaction.
const probe = new Database(":memory:");
const statementPrototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, (...args: unknown[]) => unknown>;
for (const method of ["run", "get", "all", "iterate"]) {
  const original = statementPrototype[method];
  statementPrototype[method] = function (this: unknown, ...args: unknown[]) {
    counts.statements += 1;
    bump(bySql, (this as { source: string }).source.replace(/\s+/g, " ").slice(0, 90));
    return original.apply(this, args);
  };
}
probe.close();
const databasePrototype = Database.prototype as unknown as { transaction: (fn: (...args: unknown[]) => unknown) => (...args: unknown[]) => unknown };
const transaction = databasePrototype.transaction;
databasePrototype.transaction = function (this: Database.Database, fn) {
  const made = transaction.call(this, fn) as ((...args: unknown[]) => unknown) & Record<"deferred" | "immediate" | "exclusive", (...args: unknown[]) => unknown>;
  const inTransaction = () => this.inTransaction;
  const counted = (run: (...args: unknown[]) => unknown) =>
    function (this: unknown, ...args: unknown[]) {
      if (!inTransaction()) counts.transactions += 1;
      return run.apply(this, args);
    };
  // The store begins its transactions through the variants (IMMEDIATE): each is counted too.
  return Object.assign(counted(made), { default: counted(made), deferred: counted(made.deferred), immediate: counted(made.immediate), exclusive: counted(made.exclusive) });
};

// Frames: a full encoding of an update, or (the batched build) an sn put into one.
const codec = await load<Record<string, { prototype: Record<string, (...args: unknown[]) => unknown> }>>("gateway/frame-codec.ts");
for (const [name, methods] of [
  ["PushFrame", ["encoded"]],
  ["UpdateFrame", ["encoded"]],
  ["SequencedFrames", ["jsonWithSn", "binaryWithSn"]],
] as const) {
  const prototype = codec[name]?.prototype;
  if (!prototype?.[methods[0]]) continue;
  for (const method of methods) {
    const original = prototype[method];
    const encoded = new WeakMap<object, Set<string>>();
    prototype[method] = function (this: object, ...args: unknown[]) {
      // One full encoding per frame object and form; later calls reuse it (or only put an sn in).
      const form = method === "encoded" ? String(args[0]) : method;
      const forms = encoded.get(this) ?? new Set<string>();
      encoded.set(this, forms);
      if (forms.has(form)) counts.splices += name === "SequencedFrames" ? 1 : 0;
      else {
        forms.add(form);
        counts.fullEncodes += 1;
      }
      return original.apply(this, args);
    };
  }
}

interface Harness {
  startTestServer(options?: { env?: Record<string, string> }): Promise<{ url: string; codesFile: string; broker: unknown; dispose(): Promise<void> }>;
  client(server: { url: string }, service: unknown, mode: string, token?: string): Record<string, (request: unknown) => Promise<Record<string, unknown>>>;
}
const harness = await load<Harness>("test/support/harness.ts");
const { signInWithCode } = await load<{ signInWithCode(server: unknown): Promise<{ userId: number; accessToken: string }> }>("test/support/accounts.ts");
const { befriend } = await load<{ befriend(server: unknown, a: unknown, b: unknown): Promise<bigint> }>("test/support/social.ts");
const { GatewayClient } = await load<{ GatewayClient: { connect(url: string, mode: string): Promise<GatewayProbe> } }>("test/support/ws-client.ts");
const { MessageService } = await load<{ MessageService: unknown }>("shared/gen/api/v1/message_pb.ts");
const { GroupService } = await load<{ GroupService: unknown }>("shared/gen/api/v1/group_pb.ts");

interface GatewayProbe {
  authenticate(token: string): Promise<unknown>;
  frames: { payload: { case?: string; value?: unknown } }[];
  socket: { close(): void };
}

const server = await harness.startTestServer({ env: { LOG_LEVEL: "warn" } });
const broker = server.broker as Record<string, (...args: unknown[]) => unknown>;
for (const [method, tally] of [
  ["call", (name: unknown) => bump(counts.calls, String(name))],
  ["broadcast", (name: unknown) => bump(counts.broadcasts, String(name))],
  ["emit", () => (counts.emits += 1)],
] as const) {
  const original = broker[method].bind(broker);
  broker[method] = (...args: unknown[]) => {
    tally(args[0]);
    return original(...args);
  };
}

try {
  const users = [];
  for (let i = 0; i < members; i++) users.push(await signInWithCode(server));
  const [alice, bob] = users;
  const privateId = await befriend(server, alice, bob);
  const sockets: GatewayProbe[] = [];
  for (const user of users) {
    const socket = await GatewayClient.connect(server.url, "json");
    await socket.authenticate(user.accessToken);
    sockets.push(socket);
  }
  const created = await harness.client(server, GroupService, "json", alice.accessToken).createGroup({ name: "counted", memberIds: users.slice(1).map((user) => user.userId) });
  const groupId = BigInt((created.group as { groupId: number }).groupId);
  const send = harness.client(server, MessageService, "json", alice.accessToken);
  let clientMessageId = 1n;
  const updatesOn = (socket: GatewayProbe) => socket.frames.filter((frame) => frame.payload.case === "update").length;
  /** Waits until every socket given has had `expected` updates in all. */
  const delivered = async (watched: GatewayProbe[], expected: number[]) => {
    while (watched.some((socket, index) => updatesOn(socket) < expected[index])) await new Promise((resolve) => setTimeout(resolve, 5));
  };

  async function measure(label: string, conversationId: bigint, watched: GatewayProbe[]) {
    // Warm: caches that fill once per user or conversation are not what is counted.
    for (let i = 0; i < 3; i++) await send.sendMessage({ conversationId, clientMessageId: clientMessageId++, body: { type: 1, content: { case: "text", value: { text: "warm" } } } });
    await delivered(watched, watched.map(() => 0));
    const before = watched.map(updatesOn);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const start = structuredClone(counts);
    const sqlBefore = new Map(bySql);
    for (let i = 0; i < messages; i++) {
      await send.sendMessage({ conversationId, clientMessageId: clientMessageId++, body: { type: 1, content: { case: "text", value: { text: `counted ${i}` } } } });
    }
    await delivered(
      watched,
      before.map((n) => n + messages),
    );
    const per = (now: number, then: number) => ((now - then) / messages).toFixed(1);
    console.log(
      [
        `${label}, per message:`,
        `SQL statements ${per(counts.statements, start.statements)}`,
        `transactions ${per(counts.transactions, start.transactions)}`,
        `broker calls ${per(total(counts.calls), total(start.calls))}`,
        `broadcasts ${per(total(counts.broadcasts), total(start.broadcasts))}`,
        `emits ${per(counts.emits, start.emits)}`,
        `full frame encodes ${per(counts.fullEncodes, start.fullEncodes)}`,
        `sn splices ${per(counts.splices, start.splices)}`,
      ].join("  "),
    );
    const calls = [...counts.calls].map(([name, n]) => [name, n - (start.calls.get(name) ?? 0)] as const).filter(([, n]) => n > 0);
    console.log(`  broker calls by action: ${calls.map(([name, n]) => `${name} ${(n / messages).toFixed(1)}`).join(", ")}`);
    const statements = [...bySql].map(([sql, n]) => [sql, (n - (sqlBefore.get(sql) ?? 0)) / messages] as const).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
    if (values.statements) for (const [sql, n] of statements) console.log(`  ${n.toFixed(1).padStart(6)}  ${sql}`);
  }

  await measure("private SendMessage", privateId, sockets.slice(0, 2));
  await measure(`group SendMessage (${members} members, all connected)`, groupId, sockets);
  for (const socket of sockets) socket.socket.close();
} finally {
  await server.dispose();
}
