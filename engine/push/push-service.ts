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
  /** contentPreview of the body. */
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

export function pushService(deps: EngineDeps): ServiceSchema {
  const { store } = deps;
  // Pushes run after their message was answered; stopping lets the ones under way finish (a
  // broker-wide context tracker would do it too, at a cost on every call of every service).
  const underWay = new Set<Promise<void>>();
  /** Alerts the offline recipients' devices of a message; a failure is logged, never thrown. */
  const alertOffline = async (ctx: Context<NewMessagePush>, logger: { warn(message: string): void }): Promise<void> => {
    const { conversationId, messageId, senderId, senderNickname, preview } = ctx.params;
    try {
      const tokens = await offlineRecipientTokens(deps, ctx, ctx.params);
      if (tokens.length === 0) return;
      // Every recipient gets the same alert (the server keeps no unread count to badge), so
      // one call carries all devices and a provider driver can batch them.
      await deps.pushNotifier.send(tokens, {
        silent: false,
        title: senderNickname,
        body: preview,
        message: { conversationId, messageId, senderId, senderNickname, preview },
      });
    } catch (err) {
      logger.warn(`offline push for message ${conversationId}/${messageId} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  return {
    name: "push",
    async stopped() {
      if (underWay.size === 0) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...underWay]), new Promise((resolve) => (timer = setTimeout(resolve, pushDrainMs)))]);
      clearTimeout(timer);
    },
    events: {
      [PushEvents.newMessage]: {
        handler(this: { logger: { warn(message: string): void } }, ctx: Context<NewMessagePush>) {
          const work = alertOffline(ctx, this.logger);
          underWay.add(work);
          void work.finally(() => underWay.delete(work));
          return work;
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
        if (apnsTokens.length > 0) await deps.pushNotifier.send(apnsTokens, { badge: 0, silent: true });
        return {};
      }),
    } satisfies ActionsOf<EngineActions, "push">,
  };
}
