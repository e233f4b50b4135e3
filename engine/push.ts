// Push tokens of device sessions, and the notifications sent to them.
import type { ServiceSchema } from "moleculer";
import {
  ClearBadgeRequestSchema,
  ClearBadgeResponseSchema,
  RegisterTokenRequestSchema,
  RegisterTokenResponseSchema,
  UnregisterTokenRequestSchema,
  UnregisterTokenResponseSchema,
} from "../shared/gen/api/v1/push_pb.js";
import { PushPlatform } from "../shared/gen/api/v1/common_pb.js";
import { Errors, ParleyError } from "../shared/errors.js";
import type { EngineDeps } from "./deps.js";
import { requireUser, rpcAction } from "./rpc-action.js";

export function pushService(deps: EngineDeps): ServiceSchema {
  const { store } = deps;
  return {
    name: "push",
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
    },
  };
}
