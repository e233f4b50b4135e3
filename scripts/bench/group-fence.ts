// What the owner's fence costs a group change on SQLite. Two parts, each in rounds, every figure the
// median of its rounds:
// - the store alone: addMembers + removeMember of one member under a fence (the lease read in the
//   change's transaction) and without one, rounds alternating, same database;
// - through a server (embedded, SQLite, in this process): the latency of InviteMembers +
//   RemoveMember of one member, and of a text SendMessage to a group, sequential calls, and the
//   process's CPU time per call (client and server: the same client on every build; less
//   disturbed than latency by other processes on a shared machine).
// Run it on two builds to compare them through the server (the store part compares within a run).
// Usage: tsx scripts/bench/group-fence.ts [--rounds 5] [--changes 2000] [--calls 200]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { openSqliteStore } from "../../ports/store/sqlite/sqlite-store.js";
import type { Fence, FencedWrite } from "../../ports/store/store.js";
import { signInWithCode } from "../../test/support/accounts.js";
import { client, startTestServer } from "../../test/support/harness.js";
import { nextClientMessageId, textBody } from "../../test/support/messaging.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" }, changes: { type: "string", default: "2000" }, calls: { type: "string", default: "200" } } });
const rounds = Number(values.rounds);
const changes = Number(values.changes);
const calls = Number(values.calls);

const median = (xs: readonly number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const microseconds = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;

/** Per change (add then remove one member), in ms: the median of `rounds` rounds, fenced and not, alternating. */
async function storePart(): Promise<{ fenced: number; unfenced: number }> {
  const dir = mkdtempSync(join(tmpdir(), "parley-bench-group-fence-"));
  const store = await openSqliteStore(dir);
  try {
    const lease = await store.leases.acquire(7, { node: "bench", instance: "bench-1" }, Date.now(), 3_600_000);
    const fence: Fence = { shard: lease.shard, epoch: lease.epoch };
    const members = Array.from({ length: 50 }, (_, i) => ({ userId: 1000 + i, role: i === 0 ? 1 : 2, joinedAt: 1 }));
    const group = await store.groups.createGroup({ name: "bench", avatarUrl: "", description: "", ownerId: 1000, createdAt: 1 }, members);
    const round = async (write: FencedWrite | undefined) => {
      const started = performance.now();
      for (let i = 0; i < changes; i++) {
        await store.groups.addMembers(group.groupId, [{ userId: 5000, role: 2, joinedAt: 2 }], undefined, write);
        await store.groups.removeMember(group.groupId, 5000, undefined, write);
      }
      return (performance.now() - started) / changes;
    };
    await round(undefined);
    await round({ fence });
    const fenced: number[] = [];
    const unfenced: number[] = [];
    for (let r = 0; r < rounds; r++) {
      unfenced.push(await round(undefined));
      fenced.push(await round({ fence }));
    }
    return { fenced: median(fenced), unfenced: median(unfenced) };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Timed {
  /** Median latency, ms. */
  latency: number;
  /** CPU time of this process per call, ms. */
  cpu: number;
}

/** Through a server: a membership change (invite + remove) and a group send. */
async function serverPart(): Promise<{ change: Timed; send: Timed }> {
  const server = await startTestServer();
  try {
    const people = [];
    for (let i = 0; i < 21; i++) people.push(await signInWithCode(server));
    const [owner, ...others] = people;
    const joiner = others.pop()!;
    const groups = client(server, GroupService, "json", owner.accessToken);
    const messages = client(server, MessageService, "json", owner.accessToken);
    const group = (await groups.createGroup({ name: "bench", memberIds: others.map((p) => p.userId) })).group!;
    const conversationId = BigInt(group.groupId);
    const timed = async (n: number, call: () => Promise<unknown>): Promise<Timed> => {
      const latencies: number[] = [];
      const cpuBefore = process.cpuUsage();
      for (let i = 0; i < n; i++) {
        const started = performance.now();
        await call();
        latencies.push(performance.now() - started);
      }
      const cpu = process.cpuUsage(cpuBefore);
      return { latency: median(latencies), cpu: (cpu.user + cpu.system) / 1000 / n };
    };
    const change = async () => {
      await groups.inviteMembers({ groupId: group.groupId, memberIds: [joiner.userId] });
      await groups.removeMember({ groupId: group.groupId, targetId: joiner.userId });
    };
    const send = () => messages.sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("bench") });
    await timed(20, change);
    await timed(20, send);
    const changeRounds: Timed[] = [];
    const sendRounds: Timed[] = [];
    for (let r = 0; r < rounds; r++) {
      changeRounds.push(await timed(calls, change));
      sendRounds.push(await timed(calls, send));
    }
    const medianOf = (timings: Timed[]): Timed => ({ latency: median(timings.map((t) => t.latency)), cpu: median(timings.map((t) => t.cpu)) });
    return { change: medianOf(changeRounds), send: medianOf(sendRounds) };
  } finally {
    await server.dispose();
  }
}

const store = await storePart();
const server = await serverPart();
console.log(`| what (SQLite, ${rounds} rounds, median) | figure |`);
console.log("|---|---|");
console.log(`| store: addMembers + removeMember, no fence | ${microseconds(store.unfenced)} per change pair |`);
console.log(`| store: addMembers + removeMember, fenced | ${microseconds(store.fenced)} per change pair (${(((store.fenced - store.unfenced) / store.unfenced) * 100).toFixed(1)} %) |`);
const call = (timed: Timed) => `${timed.latency.toFixed(2)} ms latency, ${timed.cpu.toFixed(2)} ms CPU`;
console.log(`| server: InviteMembers + RemoveMember (20-member group) | ${call(server.change)} |`);
console.log(`| server: SendMessage to the group (20 members) | ${call(server.send)} |`);
process.exit(0);
