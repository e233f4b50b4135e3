// Friend requests, contacts and blocks (DATA-MODEL.md §5.8). Rows of a user's side live in that
// user's partitions, with reverse-index partitions for the lookups from the other side. Only
// resolving a request needs an invariant across callers (an accept and a reject racing must not both
// win): it is an LWT whose events wait tentatively (P4). The other changes read, then commit the
// change with its events in one logged batch (P2): two identical calls racing may both answer that
// they did it, and both record their (identical) events; the rows they write are the same.
import { randomBytes } from "node:crypto";
import { ConversationKind, FriendRequestStatus, type BlockRecord, type ContactRecord, type FanOutRecord, type FriendRequestRecord, type FriendRequestStatusValue, type ContactStore } from "../store.js";
import { privateConversationId } from "../../../shared/ids.js";
import type { CassandraContext } from "./context.js";
import { fitsInt32, isUnknownLwtOutcome, numberOf, type Cql, type Row, type Statement } from "./cql.js";
import { createHead } from "./conversations.js";
import { orderRowStatements } from "./conversation-order.js";
import { commitWithEvents, outboxStatements } from "./outbox-rows.js";
import { confirmStatement, discardStatement, tentativeEvents } from "./tentative-outbox.js";

const toRequest = (row: Row): FriendRequestRecord => ({
  requestId: row.request_id as number,
  fromUserId: row.from_user_id as number,
  toUserId: row.to_user_id as number,
  message: row.message as string,
  status: row.status as FriendRequestStatusValue,
  createdAt: numberOf(row.created_at),
});

/**
 * A contact row is one with a creation time: a setAlias racing a removal can leave the alias cell of
 * a removed contact behind, which is no contact.
 */
const isContact = (row: Row | undefined): row is Row => row !== undefined && row.created_at !== null;

const toContact = (row: Row): ContactRecord => ({
  ownerId: row.owner_id as number,
  contactId: row.contact_id as number,
  alias: (row.alias as string | null) ?? null,
  createdAt: numberOf(row.created_at),
});

const pairOf = (a: number, b: number): [number, number] => (a < b ? [a, b] : [b, a]);

/** The guard of a resolution's tentative events: the request, and the token only that resolution wrote. */
const resolutionGuard = (requestId: number, token: string) => `friend_request:${requestId}:${token}`;

export function contactStore(ctx: CassandraContext): ContactStore {
  const { cql } = ctx;
  const readRequest = (requestId: number) => readRequestRow(cql, requestId);
  const readRequests = async (ids: readonly number[]) => (await Promise.all(ids.map((id) => readRequest(id)))).filter((row): row is Row => row !== undefined);
  const readContact = (ownerId: number, contactId: number) => readContactRow(cql, ownerId, contactId);

  /** The PENDING requests between two users, in either direction (stale index rows skipped). */
  async function pendingBetween(a: number, b: number): Promise<Row[]> {
    const [low, high] = pairOf(a, b);
    const ids = (await cql.rows("SELECT request_id FROM pending_requests_between WHERE low_user_id = ? AND high_user_id = ?", [low, high])).map((row) => row.request_id as number);
    return (await readRequests(ids)).filter((row) => row.status === FriendRequestStatus.pending).sort((x, y) => (x.request_id as number) - (y.request_id as number));
  }

  return {
    async createFriendRequest(fromUserId, toUserId, message, createdAt, events) {
      const requestId = await ctx.ids.friend_request.take();
      const request: FriendRequestRecord = { requestId, fromUserId, toUserId, message, status: FriendRequestStatus.pending, createdAt };
      const [low, high] = pairOf(fromUserId, toUserId);
      let recorded: Statement[];
      try {
        recorded = await outboxStatements(cql, events ? events(request) : []);
      } catch (err) {
        // Refused before anything was written: the id may be handed out again.
        await ctx.ids.friend_request.giveBack(requestId);
        throw err;
      }
      // Not given back if the batch fails: a timed-out logged batch may still apply, and its id must never name a second request.
      await cql.batch([
        {
          query: "INSERT INTO friend_requests (request_id, from_user_id, to_user_id, message, status, created_at) VALUES (?, ?, ?, ?, ?, ?)",
          params: [requestId, fromUserId, toUserId, message, FriendRequestStatus.pending, BigInt(createdAt)],
        },
        { query: "INSERT INTO pending_requests_to (to_user_id, created_at, request_id) VALUES (?, ?, ?)", params: [toUserId, BigInt(createdAt), requestId] },
        { query: "INSERT INTO pending_requests_between (low_user_id, high_user_id, request_id) VALUES (?, ?, ?)", params: [low, high, requestId] },
        ...recorded,
      ]);
      return request;
    },
    async getFriendRequest(requestId) {
      const row = await readRequest(requestId);
      return row && toRequest(row);
    },
    async findPendingBetween(a, b) {
      const [first] = await pendingBetween(a, b);
      return first && toRequest(first);
    },
    async resolveFriendRequest(requestId, status, handledAt, events) {
      const current = await readRequest(requestId);
      // A request seen non-PENDING never becomes PENDING again: no LWT needed to refuse.
      if (current?.status !== FriendRequestStatus.pending) return commitWithEvents(cql, false, [], events);
      const token = randomBytes(12).toString("base64url");
      const decided = await tentativeEvents<boolean>(cql, true, events, resolutionGuard(requestId, token));
      await cql.batch(decided.tentative);
      const applied = await cql
        .lwt("UPDATE friend_requests SET status = ?, handled_at = ?, resolution = ? WHERE request_id = ? IF status = ?", [status, BigInt(handledAt), token, requestId, FriendRequestStatus.pending])
        .then(
          (outcome) => outcome.applied,
          // An LWT whose outcome is unknown (a CAS timeout) is learnt at LOCAL_SERIAL, which settles it if still in flight.
          async (err: unknown) => {
            if (!isUnknownLwtOutcome(err)) throw err;
            return (await readRequestRow(cql, requestId, true))?.resolution === token;
          },
        );
      if (!applied) {
        await cql.batch(await decided.refuse(false));
        return false;
      }
      await cql.batch([...(await resolutionConsequences(cql, current, status, handledAt)), ...decided.confirm()]);
      return true;
    },
    async connect(a, b, conversationId, at, events) {
      // Events first: a callback that throws, or a repeated id, writes nothing (not even the head).
      const recorded = await outboxStatements(cql, events ? events(undefined) : []);
      await cql.batch([...(await connectStatements(cql, a, b, conversationId, at)), ...recorded]);
    },
    async listPendingRequests(toUserId, beforeTime, limit) {
      const found: FriendRequestRecord[] = [];
      let cursor: [bigint, number] | undefined;
      while (found.length < limit) {
        const page = cursor
          ? await cql.rows("SELECT created_at, request_id FROM pending_requests_to WHERE to_user_id = ? AND (created_at, request_id) < (?, ?) LIMIT ?", [toUserId, ...cursor, limit])
          : await cql.rows("SELECT created_at, request_id FROM pending_requests_to WHERE to_user_id = ? AND created_at < ? LIMIT ?", [toUserId, BigInt(beforeTime), limit]);
        if (page.length === 0) break;
        const requests = new Map((await readRequests(page.map((row) => row.request_id as number))).map((row) => [row.request_id as number, row]));
        for (const entry of page) {
          const request = requests.get(entry.request_id as number);
          if (request?.status === FriendRequestStatus.pending && found.length < limit) found.push(toRequest(request));
        }
        if (page.length < limit) break;
        const last = page[page.length - 1];
        cursor = [last.created_at as bigint, last.request_id as number];
      }
      return found;
    },
    async removeContact(ownerId, contactId, events) {
      const existed = (await readContact(ownerId, contactId)) !== undefined;
      return commitWithEvents(cql, existed, existed ? removeContactStatements(ownerId, contactId) : [], events);
    },
    async getContact(ownerId, contactId) {
      const row = await readContact(ownerId, contactId);
      return row && toContact(row);
    },
    async listContacts(ownerId, afterId, limit) {
      const found: ContactRecord[] = [];
      let after = afterId;
      while (found.length < limit) {
        const page = await cql.rows("SELECT * FROM contacts WHERE owner_id = ? AND contact_id > ? LIMIT ?", [ownerId, after, limit]);
        for (const row of page) if (isContact(row) && found.length < limit) found.push(toContact(row));
        if (page.length < limit) break;
        after = page[page.length - 1].contact_id as number;
      }
      return found;
    },
    async countContacts(ownerId) {
      // One partition, bounded by the contact limit; alias-only leftovers do not count.
      return (await cql.rows("SELECT created_at FROM contacts WHERE owner_id = ?", [ownerId])).filter(isContact).length;
    },
    async setAlias(ownerId, contactId, alias, events) {
      const exists = (await readContact(ownerId, contactId)) !== undefined;
      const change = exists ? [{ query: "UPDATE contacts SET alias = ? WHERE owner_id = ? AND contact_id = ?", params: [alias, ownerId, contactId] }] : [];
      return commitWithEvents(cql, exists, change, events);
    },
    async listContactOwners(contactId) {
      const owners = (await cql.rows("SELECT owner_id FROM contact_owners WHERE contact_id = ?", [contactId])).map((row) => row.owner_id as number);
      // The reverse index is written with the contact; an owner whose side is gone is not listed.
      const sides = await Promise.all(owners.map((ownerId) => readContact(ownerId, contactId)));
      return owners.filter((_ownerId, i) => sides[i] !== undefined);
    },
    async block(blockerId, blockedId, blockedAt, events) {
      const existing = await cql.row("SELECT blocked_at FROM blocks WHERE blocker_id = ? AND blocked_id = ?", [blockerId, blockedId]);
      if (existing) return commitWithEvents(cql, { blocked: false, contactRemoved: false }, [], events);
      const [contact, pending] = await Promise.all([readContact(blockerId, blockedId), pendingBetween(blockerId, blockedId)]);
      const at = BigInt(blockedAt);
      const change: Statement[] = [
        { query: "INSERT INTO blocks (blocker_id, blocked_id, blocked_at) VALUES (?, ?, ?)", params: [blockerId, blockedId, at] },
        { query: "INSERT INTO blocks_by_time (blocker_id, blocked_at, blocked_id) VALUES (?, ?, ?)", params: [blockerId, at, blockedId] },
        { query: "INSERT INTO blocked_by (blocked_id, blocker_id) VALUES (?, ?)", params: [blockedId, blockerId] },
        ...(contact ? removeContactStatements(blockerId, blockedId) : []),
        ...pending.flatMap((request) => [{ query: "DELETE FROM friend_requests WHERE request_id = ?", params: [request.request_id] }, ...unindexRequest(request)]),
      ];
      return commitWithEvents(cql, { blocked: true, contactRemoved: contact !== undefined }, change, events);
    },
    async unblock(blockerId, blockedId, events) {
      const existing = await cql.row("SELECT blocked_at FROM blocks WHERE blocker_id = ? AND blocked_id = ?", [blockerId, blockedId]);
      const change: Statement[] = existing
        ? [
            { query: "DELETE FROM blocks WHERE blocker_id = ? AND blocked_id = ?", params: [blockerId, blockedId] },
            { query: "DELETE FROM blocks_by_time WHERE blocker_id = ? AND blocked_at = ? AND blocked_id = ?", params: [blockerId, existing.blocked_at, blockedId] },
            { query: "DELETE FROM blocked_by WHERE blocked_id = ? AND blocker_id = ?", params: [blockedId, blockerId] },
          ]
        : [];
      return commitWithEvents(cql, existing !== undefined, change, events);
    },
    async isBlockedEitherWay(a, b) {
      const rows = await Promise.all([
        cql.row("SELECT blocked_id FROM blocks WHERE blocker_id = ? AND blocked_id = ?", [a, b]),
        cql.row("SELECT blocked_id FROM blocks WHERE blocker_id = ? AND blocked_id = ?", [b, a]),
      ]);
      return rows.some((row) => row !== undefined);
    },
    async blockedAmong(userId, userIds) {
      const wanted = new Set(userIds);
      const [blocked, blockers] = await Promise.all([
        cql.rows("SELECT blocked_id FROM blocks WHERE blocker_id = ?", [userId]),
        cql.rows("SELECT blocker_id FROM blocked_by WHERE blocked_id = ?", [userId]),
      ]);
      const found = new Set<number>();
      for (const other of [...blocked.map((row) => row.blocked_id as number), ...blockers.map((row) => row.blocker_id as number)]) if (wanted.has(other)) found.add(other);
      return found;
    },
    async listBlocked(blockerId): Promise<BlockRecord[]> {
      const [byTime, current] = await Promise.all([
        cql.rows("SELECT blocked_at, blocked_id FROM blocks_by_time WHERE blocker_id = ?", [blockerId]),
        cql.rows("SELECT blocked_id, blocked_at FROM blocks WHERE blocker_id = ?", [blockerId]),
      ]);
      // Two blocks racing can leave a second time row: the block row's time is the one listed.
      const times = new Map(current.map((row) => [row.blocked_id as number, row.blocked_at as bigint]));
      return byTime
        .filter((row) => times.get(row.blocked_id as number) === (row.blocked_at as bigint))
        .map((row) => ({ blockerId, blockedId: row.blocked_id as number, blockedAt: numberOf(row.blocked_at) }));
    },
  };
}

/** The request's row; an id past int32 (the API's ids are int64) names no request here. */
const readRequestRow = async (cql: Cql, requestId: number, serial = false): Promise<Row | undefined> =>
  fitsInt32(requestId) ? cql.row("SELECT * FROM friend_requests WHERE request_id = ?", [requestId], { serial }) : undefined;

async function readContactRow(cql: Cql, ownerId: number, contactId: number): Promise<Row | undefined> {
  const row = await cql.row("SELECT * FROM contacts WHERE owner_id = ? AND contact_id = ?", [ownerId, contactId]);
  return isContact(row) ? row : undefined;
}

/** The index rows of a request that stops being PENDING (or goes). */
function unindexRequest(request: Row): Statement[] {
  const [low, high] = pairOf(request.from_user_id as number, request.to_user_id as number);
  return [
    { query: "DELETE FROM pending_requests_to WHERE to_user_id = ? AND created_at = ? AND request_id = ?", params: [request.to_user_id, request.created_at, request.request_id] },
    { query: "DELETE FROM pending_requests_between WHERE low_user_id = ? AND high_user_id = ? AND request_id = ?", params: [low, high, request.request_id] },
  ];
}

const removeContactStatements = (ownerId: number, contactId: number): Statement[] => [
  { query: "DELETE FROM contacts WHERE owner_id = ? AND contact_id = ?", params: [ownerId, contactId] },
  { query: "DELETE FROM contact_owners WHERE contact_id = ? AND owner_id = ?", params: [contactId, ownerId] },
];

/**
 * What connecting a and b writes besides its events: the sides that do not exist, the PRIVATE
 * conversation's head (an LWT of its own, before the batch: it keeps the first creation time) and
 * both users' list rows at the head's time.
 */
async function connectStatements(cql: Cql, a: number, b: number, conversationId: bigint, at: number): Promise<Statement[]> {
  const [mine, theirs, headTime] = await Promise.all([readContactRow(cql, a, b), readContactRow(cql, b, a), createHead(cql, conversationId, ConversationKind.private, at)]);
  const sides: Statement[] = [];
  for (const [ownerId, contactId, existing] of [
    [a, b, mine],
    [b, a, theirs],
  ] as const) {
    if (existing) continue;
    sides.push(
      { query: "INSERT INTO contacts (owner_id, contact_id, alias, created_at) VALUES (?, ?, null, ?)", params: [ownerId, contactId, BigInt(at)] },
      { query: "INSERT INTO contact_owners (contact_id, owner_id) VALUES (?, ?)", params: [contactId, ownerId] },
    );
  }
  return [...sides, ...orderRowStatements([a, b], conversationId, headTime)];
}

/** What a resolution changes besides the request row: its index rows, and when accepted the connection. */
async function resolutionConsequences(cql: Cql, request: Row, status: FriendRequestStatusValue, handledAt: number): Promise<Statement[]> {
  const [a, b] = [request.from_user_id as number, request.to_user_id as number];
  const connection = status === FriendRequestStatus.accepted ? await connectStatements(cql, a, b, privateConversationId(a, b), handledAt) : [];
  return [...unindexRequest(request), ...connection];
}

/**
 * Settles a tentative fan-out (tentative-outbox.ts) by its guard: the outbox reader calls it for
 * tentative rows older than tentativeSettleAfterMs. When the guarded change happened, its
 * consequences are rolled forward (a resolver that died after its LWT left them unwritten) and the
 * fan-out is confirmed; otherwise it is deleted. Answers whether it was confirmed. Read at
 * LOCAL_SERIAL, so an LWT still in flight is settled first.
 */
export async function settleTentative(cql: Cql, fanOut: Pick<FanOutRecord, "scope" | "fanOutId">, guard: string): Promise<boolean> {
  const resolution = /^friend_request:(\d+):([\w-]+)$/.exec(guard);
  if (!resolution) throw new Error(`unknown guard of tentative events: ${guard}`);
  const request = await readRequestRow(cql, Number(resolution[1]), true);
  const happened = request?.resolution === resolution[2];
  const consequences = happened ? await resolutionConsequences(cql, request!, request!.status as FriendRequestStatusValue, numberOf(request!.handled_at)) : [];
  await cql.batch([...consequences, happened ? confirmStatement(fanOut) : discardStatement(fanOut)]);
  return happened;
}
