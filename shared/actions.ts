// The Moleculer actions one role calls on another, by full name, with what each takes and answers.
// Calls go through callAction and each service declares its actions with `satisfies ActionsOf<…>`,
// so a name mistyped on either side, an action a service stops serving, or params of the wrong
// shape fail to compile, and a reader goes from a call to this list and from here to the service.
// Actions the engine's services call among themselves extend this list in engine/engine-actions.ts.
import type { Readable } from "node:stream";
import type { CallingOptions, ServiceActionsSchema } from "moleculer";
import type { AgentBacklog, AgentBacklogParams, DeliveryModeChangedParams, MarkDeliveredParams, ParkAgentFeedsParams, ParkedAgentFeeds, ReleaseAgentFeedsParams } from "./agent-delivery.js";
import type { LiveEvent } from "./bus.js";
import type { RpcParams } from "./caller.js";
import type { ForgetIdentitiesParams, ResolveTokenParams, TokenIdentity } from "./identity.js";
import type { MediaDownloadParams } from "./media-download.js";
import type { OnlineAmongParams } from "./presence.js";
import type { VerifyEndpointParams, VerifyEndpointResult } from "./webhook-check.js";
import type { WireMessage } from "./wire.js";

/** An action's contract: its params, and what it answers. */
export interface Action<Params, Answer> {
  params: Params;
  answer: Answer;
}

/** An action that serves one RPC for the API tier: the request's wire form in, the response's out (engine/rpc-action.ts). */
export type Rpc = Action<RpcParams, WireMessage>;

/** The engine actions that serve the spec's RPCs; api/services/ routes each method to one of them. */
export type RpcActionName =
  // AuthService, and UserService's device list (engine/auth/auth-service.ts)
  | "auth.requestVerifyCode"
  | "auth.verifyCode"
  | "auth.loginPassword"
  | "auth.refreshToken"
  | "auth.logout"
  | "auth.logoutAll"
  | "auth.setupPassword"
  | "auth.changePassword"
  | "auth.resetPasswordRequest"
  | "auth.resetPasswordVerify"
  | "auth.resetPasswordConfirm"
  | "auth.getClientConfig"
  | "auth.listDevices"
  | "auth.removeDevice"
  // AgentService (engine/agents/agent-service.ts)
  | "agents.listFeaturedAgents"
  | "agents.getAgentInfo"
  | "agents.getMiniAppLaunchData"
  | "agents.createAgent"
  | "agents.listMyAgents"
  | "agents.getMyAgent"
  | "agents.setAgentConfig"
  | "agents.deleteMyAgent"
  | "agents.regenerateAgentToken"
  | "agents.regenerateAgentSecretKey"
  | "agents.setAgentMiniApp"
  | "agents.updateAgentSelfConfig"
  // MessageService's per-conversation methods (engine/messages/message-service.ts)
  | "messages.sendMessage"
  | "messages.editMessage"
  | "messages.recallMessage"
  | "messages.getMessage"
  | "messages.getMessageHistory"
  | "messages.submitCardAction"
  | "messages.pushStreamDelta"
  | "messages.endStream"
  | "messages.errorStream"
  | "messages.answerCardAction"
  // ConversationService, and MessageService's per-user deletions (engine/conversations/conversation-service.ts)
  | "conversations.getConversation"
  | "conversations.listConversations"
  | "conversations.updateConversationAction"
  | "conversations.markAsRead"
  | "conversations.deleteMessages"
  | "conversations.deleteHistory"
  // GroupService (engine/groups/group-service.ts)
  | "groups.createGroup"
  | "groups.dissolveGroup"
  | "groups.updateGroupName"
  | "groups.updateGroupAvatar"
  | "groups.updateGroupDescription"
  | "groups.inviteMembers"
  | "groups.removeMember"
  | "groups.leaveGroup"
  | "groups.getGroupInfo"
  | "groups.listGroups"
  // SyncService (engine/sync/inbox.ts)
  | "sync.getDifference"
  | "sync.getCurrentState"
  // MediaService (engine/media/media-service.ts)
  | "media.uploadFile"
  | "media.initUpload"
  | "media.uploadChunk"
  | "media.completeUpload"
  | "media.getDownloadURL"
  // PushService (engine/push/push-service.ts)
  | "push.registerToken"
  | "push.unregisterToken"
  | "push.clearBadge"
  // ContactService (engine/contacts/contact-service.ts)
  | "contacts.sendFriendRequest"
  | "contacts.listPendingRequests"
  | "contacts.acceptFriendRequest"
  | "contacts.rejectFriendRequest"
  | "contacts.addContact"
  | "contacts.listContacts"
  | "contacts.deleteContact"
  | "contacts.updateContactAlias"
  | "contacts.searchUsers"
  | "contacts.blockUser"
  | "contacts.unblockUser"
  | "contacts.listBlocked"
  // UserService (engine/users/user-service.ts)
  | "users.getProfile"
  | "users.updateProfile"
  | "users.setUsername"
  | "users.resolveUsername"
  | "users.batchGetUserInfo";

/** Every action one role calls on another. */
export type Actions = { [Name in RpcActionName]: Rpc } & {
  /** Engine (engine/auth/auth-service.ts): the facts of a bearer token; UNAUTHENTICATED or TOKEN_EXPIRED when it is not valid now. */
  "auth.resolveToken": Action<ResolveTokenParams, TokenIdentity>;
  /** Each API and gateway process (api/identity-cache.ts): forget the cached identities of one account. */
  "identityCache.forget": Action<ForgetIdentitiesParams, unknown>;
  /** Engine (engine/presence-service.ts): which of the users have a live connection on some gateway. */
  "presence.onlineAmong": Action<OnlineAmongParams, number[]>;
  /** Engine (engine/sync/inbox.ts): a page of an agent's stream for its WebSocket catch-up. */
  "sync.agentBacklog": Action<AgentBacklogParams, AgentBacklog>;
  /** Engine (engine/sync/inbox.ts): moves an agent's delivered position forward. */
  "sync.markDelivered": Action<MarkDeliveredParams, unknown>;
  /** Engine (engine/sync/inbox.ts): makes an agent's current delivery mode take effect on its queue. */
  "sync.deliveryModeChanged": Action<DeliveryModeChangedParams, unknown>;
  /** Engine (engine/media/media-service.ts): a download by URL; the answer is the byte stream, or null for HEAD. */
  "media.download": Action<MediaDownloadParams, Readable | null>;
  /** One gateway node (gateway/gateway-service.ts): a live push to the connections it holds. */
  "gateway.deliver": Action<LiveEvent, unknown>;
  /** One gateway node: parks an agent's feeds before a switch into WEBHOOK mode (gateway/agent-feed.ts). */
  "gateway.parkAgentFeeds": Action<ParkAgentFeedsParams, ParkedAgentFeeds>;
  /** One gateway node: tells an agent's feeds how a mode switch ended. */
  "gateway.releaseAgentFeeds": Action<ReleaseAgentFeedsParams, unknown>;
  /** The webhook fleet (webhooks/webhook-service.ts): a signed test request to a webhook URL. */
  "webhooks.verifyEndpoint": Action<VerifyEndpointParams, VerifyEndpointResult>;
};

/** What can make a Moleculer call: a broker, or a context (which carries the caller's meta and tracing). */
export interface Calls {
  call(actionName: string, params?: unknown, opts?: CallingOptions): Promise<unknown>;
}

type AnyAction = Action<unknown, unknown>;

/** A call function checked against one list of actions (`Actions`, or the engine's longer list). */
export function callerOf<List extends { [Name in keyof List]: AnyAction }>() {
  return <Name extends keyof List & string>(via: Calls, name: Name, params: List[Name]["params"], opts?: CallingOptions): Promise<List[Name]["answer"]> =>
    via.call(name, params, opts) as Promise<List[Name]["answer"]>;
}

/** Calls an action another role serves. */
export const callAction = callerOf<Actions>();

/** The names of `Service`'s actions in `List`, without the service's prefix ("sync.getDifference" → "getDifference"). */
export type LocalActionNames<List, Service extends string> = { [Name in keyof List & string]: Name extends `${Service}.${infer Local}` ? Local : never }[keyof List &
  string];

/**
 * The actions a service's schema must declare: exactly those `List` names under its prefix. A
 * service that serves more than the list has them added to the list, so every action is written
 * down in one place.
 */
export type ActionsOf<List, Service extends string> = Record<LocalActionNames<List, Service>, ServiceActionsSchema[string]>;
