import type Database from "better-sqlite3";
import { ConversationKind, GroupStatus, type FencedWrite, type GroupRecord, type GroupStore, type MemberRecord } from "../store.js";
import type { FenceCheck } from "./leases.js";
import type { Recorder } from "./outbox.js";

interface GroupRow {
  group_id: number;
  name: string;
  avatar_url: string;
  description: string;
  owner_id: number;
  status: number;
  created_at: number;
}

interface MemberRow {
  group_id: number;
  user_id: number;
  role: number;
  joined_at: number;
}

const toGroup = (row: GroupRow): GroupRecord => ({
  groupId: row.group_id,
  name: row.name,
  avatarUrl: row.avatar_url,
  description: row.description,
  ownerId: row.owner_id,
  status: row.status,
  createdAt: row.created_at,
});
const toMember = (row: MemberRow): MemberRecord => ({ groupId: row.group_id, userId: row.user_id, role: row.role, joinedAt: row.joined_at });

export function groupStore(db: Database.Database, record: Recorder, requireFence: FenceCheck): GroupStore {
  const insertGroup = db.prepare("INSERT INTO groups (name, avatar_url, description, owner_id, status, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  const insertMember = db.prepare("INSERT OR IGNORE INTO group_members (group_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)");
  const byId = db.prepare<[number], GroupRow>("SELECT * FROM groups WHERE group_id = ?");
  const update = db.prepare(
    "UPDATE groups SET name = COALESCE(?, name), avatar_url = COALESCE(?, avatar_url), description = COALESCE(?, description) WHERE group_id = ?",
  );
  const setStatus = db.prepare("UPDATE groups SET status = ? WHERE group_id = ?");
  const members = db.prepare<[number], MemberRow>("SELECT * FROM group_members WHERE group_id = ? ORDER BY joined_at, user_id");
  const member = db.prepare<[number, number], MemberRow>("SELECT * FROM group_members WHERE group_id = ? AND user_id = ?");
  const deleteMember = db.prepare("DELETE FROM group_members WHERE group_id = ? AND user_id = ?");
  const deleteMembers = db.prepare("DELETE FROM group_members WHERE group_id = ?");
  const groupsOf = db.prepare<[number, number, number, number], GroupRow>(
    `SELECT g.* FROM group_members m JOIN groups g ON g.group_id = m.group_id
     WHERE m.user_id = ? AND g.status = ? AND g.group_id > ? ORDER BY g.group_id LIMIT ?`,
  );
  const idsOf = db.prepare<[number], { group_id: number }>("SELECT group_id FROM group_members WHERE user_id = ?");

  const insertConversation = db.prepare("INSERT OR IGNORE INTO conversations (conversation_id, type, created_at, last_message_time) VALUES (?, ?, ?, ?)");
  const insertState = db.prepare("INSERT OR IGNORE INTO user_conversations (user_id, conversation_id) VALUES (?, ?)");
  /** Adds members with their state in the group's conversation; answers the ids actually added. */
  const add = (groupId: number, added: readonly Omit<MemberRecord, "groupId">[]) =>
    added
      .filter((m) => insertMember.run(groupId, m.userId, m.role, m.joinedAt).changes === 1)
      .map((m) => {
        insertState.run(m.userId, BigInt(groupId));
        return m.userId;
      });
  const create = (group: Omit<GroupRecord, "groupId" | "status">, initial: readonly Omit<MemberRecord, "groupId">[]) => {
    const { lastInsertRowid } = insertGroup.run(group.name, group.avatarUrl, group.description, group.ownerId, GroupStatus.normal, group.createdAt);
    const groupId = Number(lastInsertRowid);
    insertConversation.run(BigInt(groupId), ConversationKind.group, group.createdAt, group.createdAt);
    add(groupId, initial);
    return toGroup(byId.get(groupId)!);
  };
  const dissolve = (groupId: number) => {
    const removed = members.all(groupId).map((row) => row.user_id);
    setStatus.run(GroupStatus.dissolved, groupId);
    deleteMembers.run(groupId);
    return removed;
  };
  /** A change under the owner's fence: checked first in the change's transaction (record's), so a stale one writes nothing. */
  const fenced =
    <Result>(write: FencedWrite | undefined, change: () => Result) =>
    () => {
      requireFence(write?.fence);
      return change();
    };

  return {
    async createGroup(group, initial, events) {
      return record(() => create(group, initial), events);
    },
    async getGroup(groupId) {
      const row = byId.get(groupId);
      return row && toGroup(row);
    },
    async updateGroup(groupId, change, events, write) {
      return record(
        fenced(write, () => {
          update.run(change.name ?? null, change.avatarUrl ?? null, change.description ?? null, groupId);
          return toGroup(byId.get(groupId)!);
        }),
        events,
      );
    },
    async dissolveGroup(groupId, events, write) {
      return record(
        fenced(write, () => dissolve(groupId)),
        events,
      );
    },
    async listMembers(groupId) {
      return members.all(groupId).map(toMember);
    },
    async getMember(groupId, userId) {
      const row = member.get(groupId, userId);
      return row && toMember(row);
    },
    async addMembers(groupId, added, events, write) {
      return record(
        fenced(write, () => add(groupId, added)),
        events,
      );
    },
    async removeMember(groupId, userId, events, write) {
      return record(
        fenced(write, () => deleteMember.run(groupId, userId).changes === 1),
        events,
      );
    },
    async listGroupsOf(userId, afterId, limit) {
      return groupsOf.all(userId, GroupStatus.normal, afterId, limit).map(toGroup);
    },
    async groupIdsOf(userId) {
      return idsOf.all(userId).map((row) => row.group_id);
    },
  };
}
