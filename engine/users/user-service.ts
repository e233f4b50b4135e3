// Users: profiles, usernames and the public view of accounts.
import type { ServiceSchema } from "moleculer";
import {
  BatchGetUserInfoRequestSchema,
  BatchGetUserInfoResponseSchema,
  GetProfileRequestSchema,
  GetProfileResponseSchema,
  ResolveUsernameRequestSchema,
  ResolveUsernameResponseSchema,
  SetUsernameRequestSchema,
  SetUsernameResponseSchema,
  UpdateProfileRequestSchema,
  UpdateProfileResponseSchema,
} from "../../shared/gen/api/v1/user_pb.js";
import type { SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import type { EngineDeps } from "../deps.js";
import { accountScope } from "../delivery/fan-out.js";
import { tellConversationActors } from "../membership.js";
import { requireCaller, requireUser, rpcAction } from "../rpc-action.js";
import { AccountType, AgentStatus, type ProfileChange, type UserRecord } from "../../ports/store/store.js";
import { selfView, userInfoView } from "../views.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

const usernamePattern = /^[a-z0-9_]{5,32}$/;
/** Generated default usernames; reserved so a chosen name can never collide with a future default. */
const defaultUsernamePattern = /^u_[0-9]+$/;

export function usernameProblem(username: string): string | undefined {
  if (!usernamePattern.test(username)) return "a username has 5 to 32 characters: lowercase letters, digits and underscores";
  if (defaultUsernamePattern.test(username)) return "names of the form u_<digits> are reserved";
  return undefined;
}

export function usersService(deps: EngineDeps): ServiceSchema {
  const users = deps.store.users;
  const requireRecord = async (userId: number): Promise<UserRecord> => {
    const user = await users.getUser(userId);
    if (!user) throw new ParleyError(Errors.userNotFound);
    return user;
  };
  return {
    name: "users",
    actions: {
      getProfile: rpcAction(GetProfileRequestSchema, GetProfileResponseSchema, async ({ caller }) => ({
        profile: selfView(await requireRecord(requireCaller(caller).userId)),
      })),
      updateProfile: rpcAction(UpdateProfileRequestSchema, UpdateProfileResponseSchema, async ({ request, caller, ctx }) => {
        const before = await requireRecord(requireCaller(caller).userId);
        const change: ProfileChange = {};
        if (request.nickname !== undefined && request.nickname !== before.nickname) change.nickname = request.nickname;
        if (request.signature !== undefined && request.signature !== before.signature) change.signature = request.signature;
        if (request.avatarUrl !== undefined && request.avatarUrl !== before.avatarUrl) change.avatarUrl = request.avatarUrl;
        if (Object.keys(change).length === 0) return { profile: selfView(before) };
        const event: SnUpdate["update"] = {
          case: "userProfileUpdated",
          value: {
            $typeName: "shared.v1.UserProfileUpdatedEvent",
            userId: before.userId,
            newNickname: change.nickname,
            newAvatarUrl: change.avatarUrl,
            newSignature: change.signature,
          },
        };
        const events = await deps.fanOuts.batch();
        const after = await users.updateProfile(before.userId, change, (updated) => [events.add(accountScope(updated.userId), [updated.userId], event, [userInfoView(updated)])]);
        // Conversation actors attach the sender's record to message events from memory.
        await tellConversationActors(ctx, { userIds: [before.userId] });
        await events.deliver(ctx);
        return { profile: selfView(after) };
      }),
      setUsername: rpcAction(SetUsernameRequestSchema, SetUsernameResponseSchema, async ({ request, caller, ctx }) => {
        const user = await requireRecord(requireUser(caller).userId);
        if (user.usernameCustom) throw new ParleyError(Errors.usernameAlreadySet);
        const problem = usernameProblem(request.username);
        if (problem) throw new ParleyError(Errors.invalidUsername, {}, problem);
        const events = await deps.fanOuts.batch();
        const renamed: UserRecord = { ...user, username: request.username, usernameCustom: true };
        const outcome = await users.setCustomUsername(user.userId, request.username, (result) =>
          result === "ok"
            ? [
                events.add(
                  accountScope(user.userId),
                  [user.userId],
                  { case: "usernameChanged", value: { $typeName: "shared.v1.UsernameChangedEvent", userId: user.userId, newUsername: request.username } },
                  [userInfoView(renamed)],
                ),
              ]
            : [],
        );
        if (outcome === "already-set") throw new ParleyError(Errors.usernameAlreadySet);
        if (outcome === "taken") throw new ParleyError(Errors.usernameTaken);
        await tellConversationActors(ctx, { userIds: [user.userId] });
        await events.deliver(ctx);
        return { profile: selfView(await requireRecord(user.userId)) };
      }),
      resolveUsername: rpcAction(ResolveUsernameRequestSchema, ResolveUsernameResponseSchema, async ({ request, caller }) => {
        const resolver = requireCaller(caller);
        const user = await users.findByUsername(request.username.toLowerCase());
        if (!user) throw new ParleyError(Errors.userNotFound);
        return { user: userInfoView(user), isContact: (await deps.store.contacts.getContact(resolver.userId, user.userId)) !== undefined };
      }),
      batchGetUserInfo: rpcAction(BatchGetUserInfoRequestSchema, BatchGetUserInfoResponseSchema, async ({ request, caller }) => {
        requireCaller(caller);
        const found = await users.getUsers([...new Set(request.userIds)]);
        // The spec omits deleted accounts; the only accounts that can be deleted are agents.
        const deleted = new Set(
          (await Promise.all(found.filter((user) => user.accountType === AccountType.agent).map((user) => deps.store.agents.getAgent(user.userId))))
            .filter((agent) => agent?.status === AgentStatus.deleted)
            .map((agent) => agent!.agentUserId),
        );
        return { users: Object.fromEntries(found.filter((user) => !deleted.has(user.userId)).map((user) => [user.userId, userInfoView(user)])) };
      }),
    } satisfies ActionsOf<EngineActions, "users">,
  };
}
