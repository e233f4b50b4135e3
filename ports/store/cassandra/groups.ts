// Groups and their members (DATA-MODEL.md §5.9). Group changes run one at a time per group (the
// groups service's mailbox; in a cluster, the owner of the group conversation's shard), so
// membership writes read, then write the change with its events as one logged batch. The member
// row is the truth; groups_of_user is its reverse index, written in the same batch.
//
// A change under the owner's fence commits through the group conversation's head, as a message
// does: one LWT, conditioned on the head as last seen and raising its owner epoch, stores the
// batch as the head's pending write, then the batch is written (rolled forward, again by whoever
// finds it there if this process stops first). A stale owner is refused before writing (the lease
// read) or by the LWT (a newer owner epoch), nothing written.
import { ConversationKind, GroupStatus, OwnershipLostError, type EventsOf, type Fence, type FencedWrite, type GroupRecord, type GroupStore, type MemberRecord } from "../store.js";
import type { CassandraContext } from "./context.js";
import { isUnknownLwtOutcome, numberOf, type Row, type Statement } from "./cql.js";
import { conversationHeads, encodePendingWrite, type HeadSnapshot, type PendingWrite } from "./conversation-head.js";
import { orderRowStatements } from "./conversation-order.js";
import { createHead, readHead } from "./conversations.js";
import { outboxStatements } from "./outbox-rows.js";

/** Head LWTs refused by a write this handle did not know of (another handle's), reloaded and retried before answering. */
const maxHeadAttempts = 4;

const toGroup = (row: Row): GroupRecord => ({
  groupId: row.group_id as number,
  name: row.name as string,
  avatarUrl: row.avatar_url as string,
  description: row.description as string,
  ownerId: row.owner_id as number,
  status: row.status as number,
  createdAt: numberOf(row.created_at),
});

const toMember = (row: Row): MemberRecord => ({ groupId: row.group_id as number, userId: row.user_id as number, role: row.role as number, joinedAt: numberOf(row.joined_at) });

const byJoinTime = (a: MemberRecord, b: MemberRecord) => a.joinedAt - b.joinedAt || a.userId - b.userId;

/** A group's conversation id is the group id. */
const conversationOf = (groupId: number) => BigInt(groupId);

/** The rows of new members (their state in the conversation is the defaults: no row), listed at `listedAt`. */
function memberStatements(groupId: number, members: readonly Omit<MemberRecord, "groupId">[], listedAt: number): Statement[] {
  return [
    ...members.flatMap((member) => [
      { query: "INSERT INTO group_members (group_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)", params: [groupId, member.userId, member.role, BigInt(member.joinedAt)] },
      { query: "INSERT INTO groups_of_user (user_id, group_id) VALUES (?, ?)", params: [member.userId, groupId] },
    ]),
    ...orderRowStatements(
      members.map((member) => member.userId),
      conversationOf(groupId),
      listedAt,
    ),
  ];
}

/** The first of each user among `members` (a repeated one is added once, as its first mention). */
const distinctMembers = <M extends { userId: number }>(members: readonly M[]) => members.filter((member, i) => members.findIndex((other) => other.userId === member.userId) === i);

export function groupStore(ctx: CassandraContext): GroupStore {
  const { cql } = ctx;
  const heads = conversationHeads(ctx);
  const readGroup = (groupId: number) => cql.row("SELECT * FROM groups WHERE group_id = ?", [groupId]);
  const readMembers = async (groupId: number) => (await cql.rows("SELECT * FROM group_members WHERE group_id = ?", [groupId])).map(toMember);

  /**
   * Before a fenced change reads what it changes: the head as this handle knows it, so a change an
   * earlier owner committed there but did not write (it stopped) is written first (a reload rolls
   * it forward) and the change is computed on top of it.
   */
  const settled = async (groupId: number, write: FencedWrite | undefined) => {
    if (write?.fence) await heads.known(conversationOf(groupId));
  };

  /** A head whose owner epoch passed the fence: another owner wrote the group's conversation. */
  const refuseStale = (head: Pick<HeadSnapshot, "ownerEpoch">, fence: Fence) => {
    if (head.ownerEpoch !== null && head.ownerEpoch > fence.epoch) throw new OwnershipLostError(fence);
  };

  /** Commits the change's statements and outbox records through the group conversation's head, under the fence. */
  const commitFenced = async (groupId: number, fence: Fence, statements: Statement[]): Promise<void> => {
    const conversationId = conversationOf(groupId);
    let head = await heads.known(conversationId);
    // Nothing to write: the fence is still checked, so the owner hears that it lost the group.
    if (statements.length === 0) return refuseStale(head, fence);
    const write: PendingWrite = { kind: "group", statements, at: cql.nextTimestamp() };
    const encoded = encodePendingWrite(write);
    for (let attempt = 0; attempt < maxHeadAttempts; attempt++) {
      refuseStale(head, fence);
      let outcome;
      try {
        outcome = await cql.lwt("UPDATE conversations SET owner_epoch = ?, pending_write = ? WHERE conversation_id = ? IF latest_message_id = ? AND owner_epoch = ?", [
          fence.epoch,
          encoded,
          conversationId,
          head.latestMessageId,
          head.ownerEpoch,
        ]);
      } catch (err) {
        if (!isUnknownLwtOutcome(err)) throw err;
        // Whether it applied is learned from the head, whose reload writes the change if it did (DATA-MODEL.md §1.4).
        const reloaded = await heads.reload(conversationId);
        if (reloaded.pending && encodePendingWrite(reloaded.pending).equals(encoded)) return;
        throw err;
      }
      if (outcome.applied) {
        heads.remember(conversationId, { ...head, ownerEpoch: fence.epoch, pending: write });
        return heads.rollForward(write);
      }
      if (outcome.row) refuseStale({ ownerEpoch: (outcome.row.owner_epoch as number | null) ?? null }, fence);
      head = await heads.reload(conversationId);
    }
    throw new Error(`group ${groupId}: its conversation's head kept changing under ${maxHeadAttempts} writes in a row`);
  };

  /**
   * Commits a change (its statements, computed for `result`) with the events it answers for: one
   * logged batch, through the head when fenced. Events that throw, a repeated event id or a stale
   * fence write nothing.
   */
  const commitChange = async <Result>(groupId: number, result: Result, change: readonly Statement[], events: EventsOf<Result> | undefined, write: FencedWrite | undefined): Promise<Result> => {
    const fence = write?.fence;
    const [recorded] = await Promise.all([outboxStatements(cql, events ? events(result) : []), fence && ctx.checkFences([fence])]);
    const statements = [...change, ...recorded];
    if (fence) await heads.exclusive(conversationOf(groupId), () => commitFenced(groupId, fence, statements));
    else await cql.batch(statements);
    return result;
  };

  return {
    async createGroup(group, initial, events) {
      const groupId = await ctx.ids.group.take();
      const record: GroupRecord = { groupId, ...group, status: GroupStatus.normal };
      try {
        // Events first: a callback that throws, or a repeated id, writes nothing (not even the head).
        const recorded = await outboxStatements(cql, events ? events(record) : []);
        const listedAt = await createHead(cql, conversationOf(groupId), ConversationKind.group, group.createdAt);
        await cql.batch([
          {
            query: "INSERT INTO groups (group_id, name, avatar_url, description, owner_id, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            params: [groupId, group.name, group.avatarUrl, group.description, group.ownerId, GroupStatus.normal, BigInt(group.createdAt)],
          },
          ...memberStatements(groupId, distinctMembers(initial), listedAt),
          ...recorded,
        ]);
      } catch (err) {
        ctx.ids.group.giveBack(groupId);
        throw err;
      }
      return record;
    },
    async getGroup(groupId) {
      const row = await readGroup(groupId);
      return row && toGroup(row);
    },
    async updateGroup(groupId, change, events, write) {
      await settled(groupId, write);
      const row = await readGroup(groupId);
      if (!row) throw new Error(`group ${groupId} does not exist`);
      const updated: GroupRecord = {
        ...toGroup(row),
        ...(change.name !== undefined && { name: change.name }),
        ...(change.avatarUrl !== undefined && { avatarUrl: change.avatarUrl }),
        ...(change.description !== undefined && { description: change.description }),
      };
      return commitChange(
        groupId,
        updated,
        [{ query: "UPDATE groups SET name = ?, avatar_url = ?, description = ? WHERE group_id = ?", params: [updated.name, updated.avatarUrl, updated.description, groupId] }],
        events,
        write,
      );
    },
    async dissolveGroup(groupId, events, write) {
      await settled(groupId, write);
      const [row, members] = await Promise.all([readGroup(groupId), readMembers(groupId)]);
      const removed = members.sort(byJoinTime).map((member) => member.userId);
      // A group that does not exist has nothing to dissolve (an update would make a row of it).
      const change: Statement[] = row
        ? [
            { query: "UPDATE groups SET status = ? WHERE group_id = ?", params: [GroupStatus.dissolved, groupId] },
            { query: "DELETE FROM group_members WHERE group_id = ?", params: [groupId] },
            ...removed.map((userId) => ({ query: "DELETE FROM groups_of_user WHERE user_id = ? AND group_id = ?", params: [userId, groupId] })),
          ]
        : [];
      return commitChange(groupId, removed, change, events, write);
    },
    async listMembers(groupId) {
      return (await readMembers(groupId)).sort(byJoinTime);
    },
    async getMember(groupId, userId) {
      const row = await cql.row("SELECT * FROM group_members WHERE group_id = ? AND user_id = ?", [groupId, userId]);
      return row && toMember(row);
    },
    async addMembers(groupId, added, events, write) {
      await settled(groupId, write);
      const [present, head] = await Promise.all([readMembers(groupId), readHead(cql, conversationOf(groupId))]);
      const existing = new Set(present.map((member) => member.userId));
      const fresh = distinctMembers(added).filter((member) => !existing.has(member.userId));
      const listedAt = head?.lastMessageTime ?? 0;
      return commitChange(
        groupId,
        fresh.map((member) => member.userId),
        fresh.length > 0 ? memberStatements(groupId, fresh, listedAt) : [],
        events,
        write,
      );
    },
    async removeMember(groupId, userId, events, write) {
      await settled(groupId, write);
      const member = await cql.row("SELECT user_id FROM group_members WHERE group_id = ? AND user_id = ?", [groupId, userId]);
      // The member keeps the conversation in their list, as the SQLite adapter keeps their state row.
      const change: Statement[] = member
        ? [
            { query: "DELETE FROM group_members WHERE group_id = ? AND user_id = ?", params: [groupId, userId] },
            { query: "DELETE FROM groups_of_user WHERE user_id = ? AND group_id = ?", params: [userId, groupId] },
          ]
        : [];
      return commitChange(groupId, member !== undefined, change, events, write);
    },
    async listGroupsOf(userId, afterId, limit) {
      const found: GroupRecord[] = [];
      let after = afterId;
      while (found.length < limit) {
        const page = await cql.rows("SELECT group_id FROM groups_of_user WHERE user_id = ? AND group_id > ? LIMIT ?", [userId, after, limit]);
        const groups = await Promise.all(page.map((row) => readGroup(row.group_id as number)));
        for (const group of groups) if (group?.status === GroupStatus.normal && found.length < limit) found.push(toGroup(group));
        if (page.length < limit) break;
        after = page[page.length - 1].group_id as number;
      }
      return found;
    },
    async groupIdsOf(userId) {
      return (await cql.rows("SELECT group_id FROM groups_of_user WHERE user_id = ?", [userId])).map((row) => row.group_id as number);
    },
  };
}
