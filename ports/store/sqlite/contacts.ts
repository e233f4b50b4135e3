import type Database from "better-sqlite3";
import type { BlockRecord, ContactRecord, FriendRequestRecord, FriendRequestStatusValue, ContactStore } from "../store.js";
import { ConversationKind, FriendRequestStatus } from "../store.js";
import { privateConversationId } from "../../../shared/ids.js";
import type { Recorder } from "./outbox.js";

interface RequestRow {
  request_id: number;
  from_user_id: number;
  to_user_id: number;
  message: string;
  status: FriendRequestStatusValue;
  created_at: number;
}

interface ContactRow {
  owner_id: number;
  contact_id: number;
  alias: string | null;
  created_at: number;
}

const toRequest = (row: RequestRow): FriendRequestRecord => ({
  requestId: row.request_id,
  fromUserId: row.from_user_id,
  toUserId: row.to_user_id,
  message: row.message,
  status: row.status,
  createdAt: row.created_at,
});

const toContact = (row: ContactRow): ContactRecord => ({ ownerId: row.owner_id, contactId: row.contact_id, alias: row.alias, createdAt: row.created_at });

export function contactStore(db: Database.Database, record: Recorder): ContactStore {
  const insertRequest = db.prepare("INSERT INTO friend_requests (from_user_id, to_user_id, message, status, created_at) VALUES (?, ?, ?, ?, ?)");
  const requestById = db.prepare<[number], RequestRow>("SELECT * FROM friend_requests WHERE request_id = ?");
  const pendingBetween = db.prepare<[number, number, number, number, number], RequestRow>(
    "SELECT * FROM friend_requests WHERE status = ? AND ((from_user_id = ? AND to_user_id = ?) OR (from_user_id = ? AND to_user_id = ?)) LIMIT 1",
  );
  const resolve = db.prepare("UPDATE friend_requests SET status = ?, handled_at = ? WHERE request_id = ? AND status = ?");
  const pendingIdsBetween = db.prepare<[number, number, number, number, number], { request_id: number }>(
    "SELECT request_id FROM friend_requests WHERE status = ? AND ((from_user_id = ? AND to_user_id = ?) OR (from_user_id = ? AND to_user_id = ?))",
  );
  const deleteRequest = db.prepare("DELETE FROM friend_requests WHERE request_id = ?");
  const listPending = db.prepare<[number, number, number, number], RequestRow>(
    "SELECT * FROM friend_requests WHERE to_user_id = ? AND status = ? AND created_at < ? ORDER BY created_at DESC, request_id DESC LIMIT ?",
  );
  const insertContact = db.prepare("INSERT OR IGNORE INTO contacts (owner_id, contact_id, alias, created_at) VALUES (?, ?, NULL, ?)");
  const deleteContact = db.prepare("DELETE FROM contacts WHERE owner_id = ? AND contact_id = ?");
  const contact = db.prepare<[number, number], ContactRow>("SELECT * FROM contacts WHERE owner_id = ? AND contact_id = ?");
  const contacts = db.prepare<[number, number, number], ContactRow>("SELECT * FROM contacts WHERE owner_id = ? AND contact_id > ? ORDER BY contact_id LIMIT ?");
  const countContacts = db.prepare<[number], { n: number }>("SELECT COUNT(*) AS n FROM contacts WHERE owner_id = ?");
  const setAlias = db.prepare("UPDATE contacts SET alias = ? WHERE owner_id = ? AND contact_id = ?");
  const owners = db.prepare<[number], { owner_id: number }>("SELECT owner_id FROM contacts WHERE contact_id = ?");
  const insertBlock = db.prepare("INSERT OR IGNORE INTO blocks (blocker_id, blocked_id, blocked_at) VALUES (?, ?, ?)");
  const deleteBlock = db.prepare("DELETE FROM blocks WHERE blocker_id = ? AND blocked_id = ?");
  const blockedEither = db.prepare<[number, number, number, number], { n: number }>(
    "SELECT COUNT(*) AS n FROM blocks WHERE (blocker_id = ? AND blocked_id = ?) OR (blocker_id = ? AND blocked_id = ?)",
  );
  const blocksOf = db.prepare<[number, number], { blocker_id: number; blocked_id: number }>(
    "SELECT blocker_id, blocked_id FROM blocks WHERE blocker_id = ? OR blocked_id = ?",
  );
  const listBlocked = db.prepare<[number], { blocker_id: number; blocked_id: number; blocked_at: number }>(
    "SELECT * FROM blocks WHERE blocker_id = ? ORDER BY blocked_at DESC, blocked_id DESC",
  );
  const cancel = db.transaction((a: number, b: number) => {
    const ids = pendingIdsBetween.all(FriendRequestStatus.pending, a, b, b, a).map((row) => row.request_id);
    for (const id of ids) deleteRequest.run(id);
    return ids;
  });
  const insertConversation = db.prepare("INSERT OR IGNORE INTO conversations (conversation_id, type, created_at, last_message_time) VALUES (?, ?, ?, ?)");
  const insertState = db.prepare("INSERT OR IGNORE INTO user_conversations (user_id, conversation_id) VALUES (?, ?)");
  const connect = (a: number, b: number, conversationId: bigint, at: number) => {
    insertContact.run(a, b, at);
    insertContact.run(b, a, at);
    insertConversation.run(conversationId, ConversationKind.private, at, at);
    insertState.run(a, conversationId);
    insertState.run(b, conversationId);
  };

  return {
    async createFriendRequest(fromUserId, toUserId, message, createdAt, events) {
      return record(() => {
        const { lastInsertRowid } = insertRequest.run(fromUserId, toUserId, message, FriendRequestStatus.pending, createdAt);
        return toRequest(requestById.get(Number(lastInsertRowid))!);
      }, events);
    },
    async getFriendRequest(requestId) {
      const row = requestById.get(requestId);
      return row && toRequest(row);
    },
    async findPendingBetween(a, b) {
      const row = pendingBetween.get(FriendRequestStatus.pending, a, b, b, a);
      return row && toRequest(row);
    },
    async resolveFriendRequest(requestId, status, handledAt, events) {
      return record(() => {
        if (resolve.run(status, handledAt, requestId, FriendRequestStatus.pending).changes !== 1) return false;
        if (status === FriendRequestStatus.accepted) {
          const request = requestById.get(requestId)!;
          const [a, b] = [request.from_user_id, request.to_user_id];
          connect(a, b, privateConversationId(a, b), handledAt);
        }
        return true;
      }, events);
    },
    async connect(a, b, conversationId, at, events) {
      record(() => connect(a, b, conversationId, at), events);
    },
    async listPendingRequests(toUserId, beforeTime, limit) {
      return listPending.all(toUserId, FriendRequestStatus.pending, beforeTime, limit).map(toRequest);
    },
    async removeContact(ownerId, contactId, events) {
      return record(() => deleteContact.run(ownerId, contactId).changes === 1, events);
    },
    async getContact(ownerId, contactId) {
      const row = contact.get(ownerId, contactId);
      return row && toContact(row);
    },
    async listContacts(ownerId, afterId, limit) {
      return contacts.all(ownerId, afterId, limit).map(toContact);
    },
    async countContacts(ownerId) {
      return countContacts.get(ownerId)?.n ?? 0;
    },
    async setAlias(ownerId, contactId, alias, events) {
      return record(() => setAlias.run(alias, ownerId, contactId).changes === 1, events);
    },
    async listContactOwners(contactId) {
      return owners.all(contactId).map((row) => row.owner_id);
    },
    async block(blockerId, blockedId, blockedAt, events) {
      return record(() => {
        if (insertBlock.run(blockerId, blockedId, blockedAt).changes !== 1) return { blocked: false, contactRemoved: false };
        const contactRemoved = deleteContact.run(blockerId, blockedId).changes === 1;
        cancel(blockerId, blockedId);
        return { blocked: true, contactRemoved };
      }, events);
    },
    async unblock(blockerId, blockedId, events) {
      return record(() => deleteBlock.run(blockerId, blockedId).changes === 1, events);
    },
    async isBlockedEitherWay(a, b) {
      return (blockedEither.get(a, b, b, a)?.n ?? 0) > 0;
    },
    async blockedAmong(userId, userIds) {
      const wanted = new Set(userIds);
      const found = new Set<number>();
      for (const row of blocksOf.all(userId, userId)) {
        const other = row.blocker_id === userId ? row.blocked_id : row.blocker_id;
        if (wanted.has(other)) found.add(other);
      }
      return found;
    },
    async listBlocked(blockerId): Promise<BlockRecord[]> {
      return listBlocked.all(blockerId).map((row) => ({ blockerId: row.blocker_id, blockedId: row.blocked_id, blockedAt: row.blocked_at }));
    },
  };
}
