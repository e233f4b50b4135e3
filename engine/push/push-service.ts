// Push tokens of device sessions, and the notifications sent to them: the badge reset of
// ClearBadge, and the alert of a new message for recipients who are offline. The conversation
// actor hands new messages over with an event (requestOfflinePush) once they are sequenced and
// fanned out, so the sender never waits for providers and a provider failure never fails a send.
import type { Context, ServiceSchema } from "moleculer";
import {
  ClearBadgeRequestSchema,
  ClearBadgeResponseSchema,
  RegisterTokenRequestSchema,
  RegisterTokenResponseSchema,
  UnregisterTokenRequestSchema,
  UnregisterTokenResponseSchema,
} from "../../shared/gen/api/v1/push_pb.js";
import { PushPlatform } from "../../shared/gen/shared/v1/common_pb.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import type { EngineDeps } from "../deps.js";
import { requireUser, rpcAction } from "../rpc-action.js";
import { AccountType, type PushTokenRecord } from "../../ports/store/store.js";
import type { PushNotification } from "../../ports/push-notifier/push-notifier.js";
import { pushRemovedTokens } from "../../shared/metrics.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";
import { callEngine } from "../engine-actions.js";

export const PushEvents = {
  /** A message was sequenced; its offline recipients may need an alert (NewMessagePush). */
  newMessage: "parley.offline-push.new-message",
} as const;

/** A sequenced message as the push service needs it; JSON-safe, so it crosses nodes as is. */
export interface NewMessagePush {
  conversationId: string;
  messageId: string;
  senderId: number;
  /** As the conversation actor read it to push the message. */
  senderNickname: string;
  /** The conversation's participants when the message was sequenced, sender included. */
  participants: number[];
  /** The group's name; absent in a private chat. */
  groupName?: string;
  /** notificationPreview of the body. */
  preview: string;
}

/** Hands a sequenced message to the push service; the caller does not wait, and a failure only means no alert. */
export function requestOfflinePush(ctx: Pick<Context, "emit">, message: NewMessagePush): void {
  void Promise.resolve(ctx.emit(PushEvents.newMessage, message)).catch(() => undefined);
}

/**
 * The devices to alert about a message: those of recipients who are people (agents get events,
 * not alerts), other than the sender, with no live connection anywhere (an open app already shows
 * the message), and who did not mute the conversation.
 */
async function offlineRecipientTokens(deps: EngineDeps, ctx: Context, message: NewMessagePush): Promise<PushTokenRecord[]> {
  const { store } = deps;
  const others = [...new Set(message.participants)].filter((userId) => userId !== message.senderId);
  if (others.length === 0) return [];
  const online = new Set(await callEngine(ctx, "presence.onlineAmong", { userIds: others }));
  // A fixed number of reads per message, whatever the group's size: tokens first (most members
  // of a large group may have none), then the accounts and mute flags of those who have some.
  // The accounts were read first, for every member: 200 rows per group message for a filter
  // that only the few holding tokens need.
  const tokens = await store.pushTokens.listPushTokensOf(others.filter((userId) => !online.has(userId)));
  if (tokens.length === 0) return [];
  const holders = [...new Set(tokens.map((token) => token.userId))];
  const [accounts, mutedList] = await Promise.all([store.users.getUsers(holders), store.conversations.mutedAmong(BigInt(message.conversationId), holders)]);
  const people = new Set(accounts.filter((user) => user.accountType === AccountType.user).map((user) => user.userId));
  const muted = new Set(mutedList);
  return tokens.filter((token) => people.has(token.userId) && !muted.has(token.userId));
}

/** How long stopping waits for offline pushes already under way. */
const pushDrainMs = 5_000;

/** The conversations a badge counts: the user's most recently active ones (older ones rarely hold unread messages). */
const badgeConversations = 200;

/**
 * The badge of a user's app icon: the unread messages of their listed conversations that they
 * did not mute, counted as clients count them (lastMessageId - lastReadMessageId).
 */
export async function unreadBadge(store: EngineDeps["store"], userId: number): Promise<number> {
  const listed = await store.conversations.listForUser(userId, Number.MAX_SAFE_INTEGER, badgeConversations);
  let unread = 0n;
  for (const { conversation, state } of listed) {
    if (state.isMuted) continue;
    const readUpTo = state.lastReadMessageId > state.clearedUpTo ? state.lastReadMessageId : state.clearedUpTo;
    if (conversation.lastMessageId > readUpTo) unread += conversation.lastMessageId - readUpTo;
  }
  return Number(unread);
}

/** The alert's title and text: the sender in a private chat; the group, then "sender: text", in a group. */
export function alertText(message: Pick<NewMessagePush, "senderNickname" | "groupName" | "preview">): { title: string; body: string } {
  if (message.groupName === undefined) return { title: message.senderNickname, body: message.preview };
  return { title: message.groupName, body: message.senderNickname ? `${message.senderNickname}: ${message.preview}` : message.preview };
}

const providerOf = (platform: number) => (platform === PushPlatform.APNS ? "apns" : "fcm");

export function pushService(deps: EngineDeps): ServiceSchema {
  const { store } = deps;
  // Pushes run after their message was answered; stopping lets the ones under way finish (a
  // broker-wide context tracker would do it too, at a cost on every call of every service).
  const underWay = new Set<Promise<void>>();
  /** The service's own logger, known once Moleculer created it. */
  let logger: { warn(message: string): void } | undefined;
  const track = (work: Promise<void>): Promise<void> => {
    underWay.add(work);
    void work.finally(() => underWay.delete(work));
    return work;
  };
  /** Sends, then removes the tokens the provider called dead, unless the device registered another since. */
  const sendAndForgetRejected = async (tokens: PushTokenRecord[], notification: PushNotification): Promise<void> => {
    const { rejected } = await deps.pushNotifier.send(tokens, notification);
    for (const token of rejected) {
      if (await store.pushTokens.deleteRejectedPushToken(token.userId, token.deviceId, token.token)) pushRemovedTokens.bind({ provider: providerOf(token.platform) }).inc();
    }
  };
  /** Alerts the offline recipients' devices of a message, each user with their own badge; a failure is logged, never thrown. */
  const alertOffline = async (ctx: Context<NewMessagePush>): Promise<void> => {
    const { conversationId, messageId, senderId, senderNickname, preview } = ctx.params;
    const failed = (err: unknown) => logger?.warn(`offline push for message ${conversationId}/${messageId} failed: ${err instanceof Error ? err.message : String(err)}`);
    try {
      const tokens = await offlineRecipientTokens(deps, ctx, ctx.params);
      const byUser = new Map<number, PushTokenRecord[]>();
      for (const token of tokens) byUser.set(token.userId, [...(byUser.get(token.userId) ?? []), token]);
      const { title, body } = alertText(ctx.params);
      await Promise.all(
        [...byUser].map(async ([userId, userTokens]) => {
          try {
            const badge = await unreadBadge(store, userId);
            await sendAndForgetRejected(userTokens, { silent: false, badge, title, body, message: { conversationId, messageId, senderId, senderNickname, preview } });
          } catch (err) {
            failed(err);
          }
        }),
      );
    } catch (err) {
      failed(err);
    }
  };
  return {
    name: "push",
    created(this: { logger: { warn(message: string): void } }) {
      logger = this.logger;
    },
    async stopped() {
      if (underWay.size === 0) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...underWay]), new Promise((resolve) => (timer = setTimeout(resolve, pushDrainMs)))]);
      clearTimeout(timer);
    },
    events: {
      [PushEvents.newMessage]: {
        handler(ctx: Context<NewMessagePush>) {
          return track(alertOffline(ctx));
        },
      },
    },
    actions: {
      registerToken: rpcAction(RegisterTokenRequestSchema, RegisterTokenResponseSchema, async ({ request, caller }) => {
        const user = requireUser(caller);
        const sessions = await store.sessions.listSessions(user.userId);
        // A token only makes sense for a device that is signed in; otherwise it would outlive it.
        if (!sessions.some((session) => session.deviceId === request.deviceId)) throw new ParleyError(Errors.unknownPushDevice);
        await store.pushTokens.upsertPushToken({
          userId: user.userId,
          deviceId: request.deviceId,
          token: request.token,
          platform: request.platform,
          isSandbox: request.isSandbox,
          updatedAt: deps.clock.now(),
        });
        return {};
      }),
      unregisterToken: rpcAction(UnregisterTokenRequestSchema, UnregisterTokenResponseSchema, async ({ request, caller }) => {
        const user = requireUser(caller);
        if (!(await store.pushTokens.deletePushToken(user.userId, request.deviceId))) throw new ParleyError(Errors.pushTokenNotFound);
        return {};
      }),
      clearBadge: rpcAction(ClearBadgeRequestSchema, ClearBadgeResponseSchema, async ({ caller }) => {
        const user = requireUser(caller);
        // Android clears its badge locally; only APNs devices need a silent push with badge 0.
        const apnsTokens = (await store.pushTokens.listPushTokens(user.userId)).filter((t) => t.platform === PushPlatform.APNS);
        // Answered without waiting for Apple: a slow or failing provider must not slow the app down.
        if (apnsTokens.length > 0) {
          void track(sendAndForgetRejected(apnsTokens, { badge: 0, silent: true })).catch((err: unknown) =>
            logger?.warn(`ClearBadge push for user ${user.userId} failed: ${err instanceof Error ? err.message : String(err)}`),
          );
        }
        return {};
      }),
    } satisfies ActionsOf<EngineActions, "push">,
  };
}
