// Groups and their members (DATA-MODEL.md §5.9). Group changes run one at a time per group (the
// groups service's mailbox; in a cluster, the owner of the group conversation's shard), so
// membership writes read, then commit with their events in one logged batch, with no LWT. The member
// row is the truth; groups_of_user is its reverse index, written in the same batch.
import { ConversationKind, GroupStatus, type GroupRecord, type GroupStore, type MemberRecord } from "../store.js";
import type { CassandraContext } from "./context.js";
import { numberOf, type Row, type Statement } from "./cql.js";
import { orderRowStatements } from "./conversation-order.js";
import { createHead, readHead } from "./conversations.js";
import { commitWithEvents, outboxStatements } from "./outbox-rows.js";

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
  const readGroup = (groupId: number) => cql.row("SELECT * FROM groups WHERE group_id = ?", [groupId]);
  const readMembers = async (groupId: number) => (await cql.rows("SELECT * FROM group_members WHERE group_id = ?", [groupId])).map(toMember);

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
    async updateGroup(groupId, change, events) {
      const row = await readGroup(groupId);
      if (!row) throw new Error(`group ${groupId} does not exist`);
      const updated: GroupRecord = {
        ...toGroup(row),
        ...(change.name !== undefined && { name: change.name }),
        ...(change.avatarUrl !== undefined && { avatarUrl: change.avatarUrl }),
        ...(change.description !== undefined && { description: change.description }),
      };
      return commitWithEvents(
        cql,
        updated,
        [{ query: "UPDATE groups SET name = ?, avatar_url = ?, description = ? WHERE group_id = ?", params: [updated.name, updated.avatarUrl, updated.description, groupId] }],
        events,
      );
    },
    async dissolveGroup(groupId, events) {
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
      return commitWithEvents(cql, removed, change, events);
    },
    async listMembers(groupId) {
      return (await readMembers(groupId)).sort(byJoinTime);
    },
    async getMember(groupId, userId) {
      const row = await cql.row("SELECT * FROM group_members WHERE group_id = ? AND user_id = ?", [groupId, userId]);
      return row && toMember(row);
    },
    async addMembers(groupId, added, events) {
      const [present, head] = await Promise.all([readMembers(groupId), readHead(cql, conversationOf(groupId))]);
      const existing = new Set(present.map((member) => member.userId));
      const fresh = distinctMembers(added).filter((member) => !existing.has(member.userId));
      const listedAt = head?.lastMessageTime ?? 0;
      return commitWithEvents(
        cql,
        fresh.map((member) => member.userId),
        fresh.length > 0 ? memberStatements(groupId, fresh, listedAt) : [],
        events,
      );
    },
    async removeMember(groupId, userId, events) {
      const member = await cql.row("SELECT user_id FROM group_members WHERE group_id = ? AND user_id = ?", [groupId, userId]);
      // The member keeps the conversation in their list, as the SQLite adapter keeps their state row.
      const change: Statement[] = member
        ? [
            { query: "DELETE FROM group_members WHERE group_id = ? AND user_id = ?", params: [groupId, userId] },
            { query: "DELETE FROM groups_of_user WHERE user_id = ? AND group_id = ?", params: [userId, groupId] },
          ]
        : [];
      return commitWithEvents(cql, member !== undefined, change, events);
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
