// Per-user conversation state: the conversation list, mute and delete, read positions and local
// message deletion. Only the caller's own state changes here, so these run outside the
// conversation actor.
import { create } from "@bufbuild/protobuf";
import type { ServiceSchema } from "moleculer";
import { ConversationActionType, ConversationInfoSchema, ConversationType, type ConversationInfo } from "../../shared/gen/shared/v1/conversation_pb.js";
import {
  GetConversationRequestSchema,
  GetConversationResponseSchema,
  ListConversationsRequestSchema,
  ListConversationsResponseSchema,
  MarkAsReadRequestSchema,
  MarkAsReadResponseSchema,
  UpdateConversationActionRequestSchema,
  UpdateConversationActionResponseSchema,
} from "../../shared/gen/api/v1/conversation_pb.js";
import {
  DeleteHistoryRequestSchema,
  DeleteHistoryResponseSchema,
  DeleteMessagesRequestSchema,
  DeleteMessagesResponseSchema,
} from "../../shared/gen/api/v1/message_pb.js";
import type { SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import { privateParticipants } from "../../shared/ids.js";
import { envelopeOf } from "../messages/conversation-actor.js";
import type { EngineDeps } from "../deps.js";
import { accountScope, type EventBatch } from "../delivery/fan-out.js";
import { requireParticipant, type ConversationAccess } from "../membership.js";
import { requireCaller, rpcAction } from "../rpc-action.js";
import { ConversationKind, type UserConversationRecord } from "../../ports/store/store.js";
import { groupInfoView, userInfoView } from "../views.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

export const ConversationPolicy = { listPageDefault: 20 } as const;

function infoOf(access: Pick<ConversationAccess, "conversation" | "peerId">, state: UserConversationRecord): ConversationInfo {
  return create(ConversationInfoSchema, {
    conversationId: access.conversation.conversationId,
    type: access.conversation.type === ConversationKind.private ? ConversationType.PRIVATE : ConversationType.GROUP,
    isMuted: state.isMuted,
    lastMessageTime: BigInt(access.conversation.lastMessageTime),
    lastMessageId: access.conversation.lastMessageId,
    lastReadMessageId: state.lastReadMessageId,
    peerId: access.peerId,
  });
}

export function conversationsService(deps: EngineDeps): ServiceSchema {
  const { store, clock } = deps;
  /** The event telling the user's devices of a change the user made to their own conversation state, added to the change's batch. */
  const event = (events: EventBatch, userId: number, update: SnUpdate["update"]) => events.add(accountScope(userId), [userId], update);

  return {
    name: "conversations",
    actions: {
      getConversation: rpcAction(GetConversationRequestSchema, GetConversationResponseSchema, async ({ request, caller }) => {
        const user = requireCaller(caller);
        const access = await requireParticipant(store, request.conversationId, user.userId);
        return { conversation: infoOf(access, await store.conversations.getUserState(user.userId, request.conversationId)) };
      }),
      listConversations: rpcAction(ListConversationsRequestSchema, ListConversationsResponseSchema, async ({ request, caller }) => {
        const user = requireCaller(caller);
        const limit = request.limit || ConversationPolicy.listPageDefault;
        const before = request.beforeTime !== undefined ? Number(request.beforeTime) : Number.MAX_SAFE_INTEGER;
        // The only cursor is a time and the store answers times strictly before it, so a batch or
        // page must never end inside a run of equal times: the rest of the run would be skipped.
        const timeOf = (row: { conversation: { lastMessageTime: number } }) => row.conversation.lastMessageTime;
        const rows: Awaited<ReturnType<typeof store.conversations.listForUser>> = [];
        for (let cursor = before; rows.length <= limit; ) {
          const batch = await store.conversations.listForUser(user.userId, cursor, limit + 1);
          let usable = batch;
          let next: number | undefined;
          if (batch.length > limit) {
            const last = timeOf(batch[batch.length - 1]);
            const head = batch.filter((row) => timeOf(row) !== last);
            // The next batch starts at the run of `last` (times <= last); a batch that is one
            // run (more than a page of conversations in one millisecond) can only move past it.
            [usable, next] = head.length > 0 ? [head, last + 1] : [batch, last];
          }
          // A block hides the conversation from both users without deleting it; unblocking shows it again.
          const peers = usable.map((row) => privateParticipants(row.conversation.conversationId)?.find((id) => id !== user.userId) ?? 0);
          const blocked = await store.contacts.blockedAmong(user.userId, peers);
          rows.push(...usable.filter((_, index) => !blocked.has(peers[index])));
          if (next === undefined) break;
          cursor = next;
        }
        let page = rows.slice(0, limit);
        if (rows.length > limit && timeOf(rows[limit]) === timeOf(page[page.length - 1])) {
          const head = page.filter((row) => timeOf(row) !== timeOf(rows[limit]));
          if (head.length > 0) page = head;
        }
        const conversations: ConversationInfo[] = [];
        const peers = new Set<number>();
        const groups = [];
        const latest = [];
        for (const { conversation, state } of page) {
          const access = await requireParticipant(store, conversation.conversationId, user.userId).catch(() => undefined);
          if (!access) continue; // left or dissolved since; its state row stays for history
          conversations.push(infoOf(access, state));
          if (access.group) groups.push(groupInfoView(access.group));
          else peers.add(access.peerId);
          const [message] = await store.messages.listVisible(user.userId, conversation.conversationId, "before", conversation.lastMessageId + 1n, state.clearedUpTo, 1);
          if (message) latest.push(envelopeOf(message));
        }
        const users = await store.users.getUsers([...peers]);
        return { conversations, relatedUsers: users.map(userInfoView), relatedGroups: groups, messages: latest, hasMore: rows.length > limit };
      }),
      updateConversationAction: rpcAction(UpdateConversationActionRequestSchema, UpdateConversationActionResponseSchema, async ({ request, caller, ctx }) => {
        const user = requireCaller(caller);
        const access = await requireParticipant(store, request.conversationId, user.userId);
        // The relationship decides access: a PRIVATE conversation belongs to the caller's contacts.
        if (!access.group && !(await store.contacts.getContact(user.userId, access.peerId))) throw new ParleyError(Errors.contactNotFound);
        const events = await deps.fanOuts.batch();
        const clearMessages = request.action === ConversationActionType.DELETE && request.clearMessages;
        const actionEvent = () => [
          event(events, user.userId, {
            case: "conversationAction",
            value: { $typeName: "shared.v1.ConversationActionEvent", conversationId: request.conversationId, action: request.action, clearMessages },
          }),
        ];
        if (request.action === ConversationActionType.DELETE) {
          // As with DeleteHistory, cleared messages are no longer unread (the store moves the read position too).
          await store.conversations.markDeleted(user.userId, request.conversationId, clearMessages ? access.conversation.lastMessageId : 0n, actionEvent);
        } else {
          await store.conversations.setMuted(user.userId, request.conversationId, request.action === ConversationActionType.MUTE, actionEvent);
        }
        await events.deliver(ctx);
        return {};
      }),
      markAsRead: rpcAction(MarkAsReadRequestSchema, MarkAsReadResponseSchema, async ({ request, caller, ctx }) => {
        const user = requireCaller(caller);
        const access = await requireParticipant(store, request.conversationId, user.userId);
        const state = await store.conversations.getUserState(user.userId, request.conversationId);
        if (request.upToMessageId < state.lastReadMessageId) {
          throw new ParleyError(Errors.readPositionBackwards, { lastReadMessageId: String(state.lastReadMessageId) });
        }
        if (request.upToMessageId > access.conversation.lastMessageId) {
          throw new ParleyError(Errors.invalidArgument, { field: "up_to_message_id", lastMessageId: String(access.conversation.lastMessageId) }, "upToMessageId is beyond the last message");
        }
        const readAt = BigInt(clock.now());
        const events = await deps.fanOuts.batch();
        await store.conversations.advanceRead(user.userId, request.conversationId, request.upToMessageId, (position) => [
          event(events, user.userId, {
            case: "readReceipt",
            value: { $typeName: "shared.v1.ReadReceiptEvent", conversationId: request.conversationId, readerUserId: user.userId, lastReadMessageId: position, readAt },
          }),
        ]);
        await events.deliver(ctx);
        return {};
      }),
      deleteMessages: rpcAction(DeleteMessagesRequestSchema, DeleteMessagesResponseSchema, async ({ request, caller, ctx }) => {
        const user = requireCaller(caller);
        await requireParticipant(store, request.conversationId, user.userId);
        const state = await store.conversations.getUserState(user.userId, request.conversationId);
        // The event tells the caller's other devices what changed: the ids deleted now, each once.
        const events = await deps.fanOuts.batch();
        const deleted = await store.messages.deleteFor(user.userId, request.conversationId, request.messageIds, state.clearedUpTo, (ids) =>
          ids.length > 0
            ? [event(events, user.userId, { case: "messageDeleted", value: { $typeName: "shared.v1.MessageDeletedEvent", conversationId: request.conversationId, messageIds: ids, upToMessageId: 0n } })]
            : [],
        );
        if (deleted.length > 0) await events.deliver(ctx);
        return { deletedCount: deleted.length };
      }),
      deleteHistory: rpcAction(DeleteHistoryRequestSchema, DeleteHistoryResponseSchema, async ({ request, caller, ctx }) => {
        const user = requireCaller(caller);
        const access = await requireParticipant(store, request.conversationId, user.userId);
        // Only messages that exist can be deleted: a position beyond the last one would hide
        // messages that arrive later.
        const last = access.conversation.lastMessageId;
        const upTo = request.upToMessageId < last ? request.upToMessageId : last;
        const before = await store.conversations.getUserState(user.userId, request.conversationId);
        if (upTo <= before.clearedUpTo) return {};
        // Deleted messages cannot stay unread (unread = lastMessageId - lastReadMessageId must count
        // only messages the user can still see): the store moves the read position with the clearing.
        const events = await deps.fanOuts.batch();
        await store.conversations.clearHistory(user.userId, request.conversationId, upTo, () => [
          event(events, user.userId, { case: "messageDeleted", value: { $typeName: "shared.v1.MessageDeletedEvent", conversationId: request.conversationId, messageIds: [], upToMessageId: upTo } }),
        ]);
        await events.deliver(ctx);
        return {};
      }),
    } satisfies ActionsOf<EngineActions, "conversations">,
  };
}
