// Messages (DATA-MODEL.md §5.10): one LWT on the conversation head per write, then its rows
// (conversation-head.ts). Messages are kept in partitions of 4,096 ids; a user's deletions in one
// partition per (user, conversation).
import { OwnershipLostError, type Fence, type MessageRecord, type MessageStore, type OpenStreamRecord } from "../store.js";
import { isUnknownLwtOutcome, type Row, type Statement } from "./cql.js";
import type { CassandraContext } from "./context.js";
import { bucketOf, conversationHeads, encodePendingWrite, isStorableMessageId, messageColumns, messageOf, readMessage, type HeadSnapshot, type PendingWrite } from "./conversation-head.js";
import { commitWithEvents } from "./outbox-rows.js";
import type { SweepItem } from "./sweep-index.js";

/** Head LWTs refused by a write this handle did not know of, reloaded and retried before answering. */
const maxHeadAttempts = 4;

export function messageStore(ctx: CassandraContext): MessageStore {
  const { cql } = ctx;
  const heads = conversationHeads(ctx);

  const fenceRead = (fence: Fence | undefined) => ctx.checkFences(fence ? [fence] : undefined);

  /** A head whose owner epoch passed the fence: another owner wrote the key. */
  const refuseStale = (head: Pick<HeadSnapshot, "ownerEpoch">, fence: Fence | undefined) => {
    if (fence && head.ownerEpoch !== null && head.ownerEpoch > fence.epoch) throw new OwnershipLostError(fence);
  };

  /**
   * Commits a write through the head: one LWT conditioned on the snapshot (sequence and owner
   * epoch), setting `sets` and the pending write. Answers the snapshot it applied on, or
   * undefined when `acceptable` refuses the head as reloaded (the caller's "conflict").
   */
  const commit = async (
    conversationId: bigint,
    fence: Fence | undefined,
    acceptable: (head: HeadSnapshot) => boolean,
    statements: (head: HeadSnapshot) => Statement[],
    isOurs: (pending: PendingWrite | undefined) => boolean,
  ): Promise<HeadSnapshot | undefined> => {
    let head = await heads.known(conversationId);
    if (!acceptable(head)) head = await heads.reload(conversationId);
    for (let attempt = 0; attempt < maxHeadAttempts; attempt++) {
      refuseStale(head, fence);
      if (!acceptable(head)) return undefined;
      let applied: boolean;
      let met: Row | undefined;
      try {
        ({ applied, row: met } = await cql.lwtBatch(statements(head)));
      } catch (err) {
        if (!isUnknownLwtOutcome(err)) throw err;
        // Whether it applied is learned from the head itself (DATA-MODEL.md §1.4).
        const reloaded = await heads.reload(conversationId);
        if (isOurs(reloaded.pending)) return head;
        throw err;
      }
      if (applied) return head;
      if (met) refuseStale({ ownerEpoch: (met.owner_epoch as number | null) ?? null }, fence);
      head = await heads.reload(conversationId);
    }
    throw new Error(`conversation ${conversationId}: the head kept changing under ${maxHeadAttempts} writes in a row`);
  };

  /** The head update of a write: its condition is the snapshot, and a fenced write raises the owner epoch. */
  const headUpdate = (conversationId: bigint, head: HeadSnapshot, fence: Fence | undefined, sets: Record<string, unknown>, write: PendingWrite): Statement => {
    const columns = { ...sets, ...(fence ? { owner_epoch: fence.epoch } : {}), pending_write: encodePendingWrite(write) };
    return {
      query: `UPDATE conversations SET ${Object.keys(columns)
        .map((column) => `${column} = ?`)
        .join(", ")} WHERE conversation_id = ? IF latest_message_id = ? AND owner_epoch = ?`,
      params: [...Object.values(columns), conversationId, head.latestMessageId, head.ownerEpoch],
    };
  };

  const clientMessageIdOf = async (conversationId: bigint, senderId: number, clientMessageId: bigint) => {
    const row = await cql.row("SELECT message_id FROM message_client_ids WHERE conversation_id = ? AND sender_id = ? AND client_message_id = ?", [
      conversationId,
      senderId,
      clientMessageId,
    ]);
    return row?.message_id as bigint | undefined;
  };

  /** The stored message, or the one the head committed whose rows are not written yet (written now). */
  const getMessage = async (conversationId: bigint, messageId: bigint) => {
    const stored = await readMessage(cql, conversationId, messageId);
    if (stored) return stored;
    const pending = await heads.settle(conversationId);
    return pending?.kind === "insert" && pending.message.messageId === messageId ? pending.message : undefined;
  };

  /** Open streams of the indexed conversations; drops index items whose conversation has none left. */
  const openStreams = async (): Promise<OpenStreamRecord[]> => {
    const found = await ctx.sweeps.items("open_streams");
    const byConversation = new Map<string, SweepItem[]>();
    for (const entry of found) byConversation.set(entry.item, [...(byConversation.get(entry.item) ?? []), entry]);
    const emptied: SweepItem[] = [];
    const lists = await Promise.all(
      [...byConversation].map(async ([item, entries]) => {
        const rows = await cql.rows("SELECT conversation_id, message_id, sender_id, started_at FROM open_streams WHERE conversation_id = ?", [BigInt(item)]);
        if (rows.length === 0) emptied.push(...entries);
        return rows.map((row) => ({
          conversationId: row.conversation_id as bigint,
          messageId: row.message_id as bigint,
          senderId: row.sender_id as number,
          startedAt: Number(row.started_at),
        }));
      }),
    );
    await ctx.sweeps.drop("open_streams", found, emptied);
    return lists.flat();
  };

  /**
   * Up to `limit` messages of the user's view with ids in (low, high), walking buckets from `high`
   * down ("before") or from `low` up ("after"); the user's deletions of each page are read for its id range.
   */
  const visible = async (userId: number, conversationId: bigint, direction: "before" | "after", low: bigint, high: bigint, limit: number): Promise<MessageRecord[]> => {
    const found: MessageRecord[] = [];
    let from = direction === "before" ? high - 1n : low + 1n;
    const inRange = (id: bigint) => id > low && id < high;
    while (found.length < limit && inRange(from)) {
      const bucket = bucketOf(from);
      const wanted = limit - found.length;
      const rows =
        direction === "before"
          ? await cql.rows(`SELECT ${messageColumns} FROM messages WHERE conversation_id = ? AND bucket = ? AND message_id <= ? AND message_id > ? LIMIT ?`, [
              conversationId,
              bucket,
              from,
              low,
              wanted,
            ])
          : await cql.rows(
              `SELECT ${messageColumns} FROM messages WHERE conversation_id = ? AND bucket = ? AND message_id >= ? AND message_id < ? ORDER BY message_id ASC LIMIT ?`,
              [conversationId, bucket, from, high, wanted],
            );
      if (rows.length > 0) {
        const ids = rows.map((row) => row.message_id as bigint);
        const [first, last] = [ids[0], ids[ids.length - 1]];
        const [lowest, highest] = first < last ? [first, last] : [last, first];
        const deleted = new Set(
          (
            await cql.rows("SELECT message_id FROM message_deletions WHERE user_id = ? AND conversation_id = ? AND message_id >= ? AND message_id <= ?", [
              userId,
              conversationId,
              lowest,
              highest,
            ])
          ).map((row) => row.message_id as bigint),
        );
        for (const row of rows) if (!deleted.has(row.message_id as bigint)) found.push(messageOf(row));
      }
      if (rows.length === wanted) from = direction === "before" ? (rows[rows.length - 1].message_id as bigint) - 1n : (rows[rows.length - 1].message_id as bigint) + 1n;
      else from = direction === "before" ? (BigInt(bucket) << 12n) - 1n : (BigInt(bucket) + 1n) << 12n;
    }
    return found;
  };

  return {
    async insertMessage(m, options = {}) {
      const { fence } = options;
      const [, existingId] = await Promise.all([
        fenceRead(fence),
        m.clientMessageId > 0n ? clientMessageIdOf(m.conversationId, m.senderId, m.clientMessageId) : undefined,
        heads.known(m.conversationId),
      ]);
      if (existingId !== undefined) {
        const existing = await getMessage(m.conversationId, existingId);
        if (existing) return { outcome: "duplicate", existing };
      }
      const written = (head: HeadSnapshot): PendingWrite => ({
        kind: "insert",
        message: m,
        fanOut: options.fanOut,
        opensStream: options.opensStream === true,
        listMove: options.recordAsLast ? { participants: [...options.recordAsLast.participants], previousTime: head.lastMessageTime } : undefined,
      });
      return heads.exclusive(m.conversationId, async () => {
        const applied = await commit(
          m.conversationId,
          fence,
          (head) => (head.latestMessageId ?? 0n) === m.messageId - 1n,
          (head) => {
            // The sequence always moves; the listed last message only with recordAsLast (as ConversationStore.recordMessage).
            const sets = { latest_message_id: m.messageId, ...(options.recordAsLast ? { last_message_id: m.messageId, last_message_time: BigInt(m.createdAt) } : {}) };
            const statements = [headUpdate(m.conversationId, head, fence, sets, written(head))];
            if (options.postsSystemMessage !== undefined) {
              statements.push({ query: "DELETE FROM conversations WHERE conversation_id = ? AND system_message_id = ?", params: [m.conversationId, options.postsSystemMessage] });
            }
            return statements;
          },
          (pending) => pending?.kind === "insert" && pending.message.messageId === m.messageId && pending.message.senderId === m.senderId && pending.message.clientMessageId === m.clientMessageId,
        );
        if (!applied) return { outcome: "conflict" } as const;
        const write = written(applied);
        heads.remember(m.conversationId, {
          latestMessageId: m.messageId,
          ownerEpoch: fence ? fence.epoch : applied.ownerEpoch,
          lastMessageTime: options.recordAsLast ? m.createdAt : applied.lastMessageTime,
          pending: write,
        });
        await heads.rollForward(write);
        return { outcome: "ok" } as const;
      });
    },

    async latestMessageId(conversationId) {
      return (await heads.reload(conversationId)).latestMessageId ?? 0n;
    },

    getMessage,

    async findByClientMessageId(conversationId, senderId, clientMessageId) {
      const messageId = await clientMessageIdOf(conversationId, senderId, clientMessageId);
      return messageId === undefined ? undefined : getMessage(conversationId, messageId);
    },

    async updateMessage(conversationId, messageId, change, options = {}) {
      const { fence } = options;
      const [, stored, known] = await Promise.all([fenceRead(fence), readMessage(cql, conversationId, messageId), heads.known(conversationId)]);
      let current = stored ?? committedInsert(known, messageId);
      // Not found: perhaps committed by a write this handle has not seen; the reload rolls it forward.
      if (!current) current = committedInsert(await heads.reload(conversationId), messageId) ?? (await readMessage(cql, conversationId, messageId));
      const write: PendingWrite = {
        kind: "update",
        conversationId,
        messageId,
        message: current ? { ...current, body: change.body, updatedAt: change.updatedAt, edited: change.edited } : null,
        fanOut: options.fanOut,
        closesStream: options.closesStream === true,
      };
      const encoded = encodePendingWrite(write);
      await heads.exclusive(conversationId, async () => {
        const applied = await commit(
          conversationId,
          fence,
          () => true,
          (head) => [headUpdate(conversationId, head, fence, {}, write)],
          (pending) => pending !== undefined && encodePendingWrite(pending).equals(encoded),
        );
        if (!applied) throw new Error(`conversation ${conversationId}: the update of message ${messageId} was refused`);
        heads.remember(conversationId, { ...applied, ownerEpoch: fence ? fence.epoch : applied.ownerEpoch, pending: write });
        await heads.rollForward(write);
      });
    },

    async listOpenStreams(startedBefore, limit) {
      return (await openStreams())
        .filter((open) => open.startedAt <= startedBefore)
        .sort((a, b) => a.startedAt - b.startedAt || compareIds(a.conversationId, b.conversationId) || compareIds(a.messageId, b.messageId))
        .slice(0, limit);
    },

    async listVisible(userId, conversationId, direction, cursor, clearedUpTo, limit) {
      if (limit <= 0) return [];
      // The walk is bounded by the sequence: a cursor past it (the newest page) starts at the last message.
      const latest = ((await cql.row("SELECT latest_message_id FROM conversations WHERE conversation_id = ? LIMIT 1", [conversationId]))?.latest_message_id as bigint | null) ?? 0n;
      if (direction === "before") return visible(userId, conversationId, "before", clearedUpTo, cursor <= latest ? cursor : latest + 1n, limit);
      return visible(userId, conversationId, "after", cursor > clearedUpTo ? cursor : clearedUpTo, latest + 1n, limit);
    },

    async isDeletedFor(userId, conversationId, messageId) {
      return (await cql.row("SELECT message_id FROM message_deletions WHERE user_id = ? AND conversation_id = ? AND message_id = ?", [userId, conversationId, messageId])) !== undefined;
    },

    async deleteFor(userId, conversationId, messageIds, clearedUpTo, events) {
      const candidates = [...new Set(messageIds)].filter((id) => id > clearedUpTo && isStorableMessageId(id));
      const byBucket = new Map<number, bigint[]>();
      for (const id of candidates) byBucket.set(bucketOf(id), [...(byBucket.get(bucketOf(id)) ?? []), id]);
      const [existing, alreadyDeleted] = await Promise.all([
        Promise.all(
          [...byBucket].map(([bucket, ids]) => cql.rows("SELECT message_id FROM messages WHERE conversation_id = ? AND bucket = ? AND message_id IN ?", [conversationId, bucket, ids])),
        ),
        candidates.length === 0 ? [] : cql.rows("SELECT message_id FROM message_deletions WHERE user_id = ? AND conversation_id = ? AND message_id IN ?", [userId, conversationId, candidates]),
      ]);
      const exists = new Set(existing.flat().map((row) => row.message_id as bigint));
      const deletedBefore = new Set(alreadyDeleted.map((row) => row.message_id as bigint));
      const deleted = candidates.filter((id) => exists.has(id) && !deletedBefore.has(id));
      const statements = deleted.map((id) => ({ query: "INSERT INTO message_deletions (user_id, conversation_id, message_id) VALUES (?, ?, ?)", params: [userId, conversationId, id] }));
      return commitWithEvents(cql, deleted, statements, events);
    },
  };
}

/** The message a head's pending write inserts, when it is this one. */
const committedInsert = (head: HeadSnapshot, messageId: bigint) => (head.pending?.kind === "insert" && head.pending.message.messageId === messageId ? head.pending.message : undefined);

const compareIds = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
