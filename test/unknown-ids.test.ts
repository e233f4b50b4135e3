// Every RPC whose request names something by id, called through a real client with ids that name
// nothing, and where it means something with ids of what the caller may not see: each must answer
// the code and ErrorDetail the spec gives, alike on SQLite, on Cassandra and on the cluster. Int64
// ids are tried past int32 and past 2^53 as well: the Cassandra adapter keeps some of them in int
// columns and derives int partition keys from others, and JavaScript numbers lose precision past
// 2^53, so those are where the topologies could part.
import type { DescService } from "@bufbuild/protobuf";
import { expect } from "chai";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import { ConversationActionType } from "../shared/gen/shared/v1/conversation_pb.js";
import { Errors, type CatalogueEntry } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { device, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, type TestServer } from "./support/harness.js";
import { cardBody, nextClientMessageId, streamStartBody, textBody } from "./support/messaging.js";
import { befriend, createAgent, type TestAgent } from "./support/social.js";

const mode = "json";

/** int32 ids that name nothing: one of ordinary size, and the largest an int32 holds. */
const unknownInt32 = [99_999_999, 2 ** 31 - 1];
/** int64 ids that name nothing: within int32, just past it, past 2^53, and the largest int64. */
const unknownInt64 = [987_654_321n, 2n ** 31n + 7n, 2n ** 53n + 1n, 2n ** 63n - 1n];

/** What the cases act on, built once for the file. */
interface World {
  owner: SignedIn;
  alice: SignedIn;
  bob: SignedIn;
  outsider: SignedIn;
  /** The owner's agent, with its Mini App enabled, a card and an open stream in its conversation with the owner. */
  agent: TestAgent;
  /** Another agent of the owner's, outside the first one's conversation. */
  otherAgent: TestAgent;
  deletedAgentId: number;
  /** The owner and Alice's PRIVATE conversation, with one message of the owner's. */
  privateId: bigint;
  messageId: bigint;
  /** The owner's group with Alice and Bob. */
  groupId: number;
  cardId: bigint;
  streamId: bigint;
  /** A card action the owner submitted on the agent's card. */
  actionId: string;
  /** Bob's pending request to the outsider. */
  requestId: bigint;
  /** Alice's open upload session. */
  sessionId: string;
}

/**
 * One call and what it must answer: a catalogue entry for a refusal, or a check of the answer for
 * an id the spec has the call skip (an unknown id in a list, a cursor past the end).
 */
interface Case {
  what: string;
  call: () => Promise<unknown>;
  expected: CatalogueEntry | ((answer: unknown) => void);
}

type Cases = (w: World, api: Clients) => Case[];

interface Clients {
  agents: (u: SignedIn) => ReturnType<typeof client<typeof AgentService>>;
  users: (u: SignedIn) => ReturnType<typeof client<typeof UserService>>;
  auth: ReturnType<typeof client<typeof AuthService>>;
  contacts: (u: SignedIn) => ReturnType<typeof client<typeof ContactService>>;
  conversations: (u: SignedIn) => ReturnType<typeof client<typeof ConversationService>>;
  groups: (u: SignedIn) => ReturnType<typeof client<typeof GroupService>>;
  media: (u: SignedIn) => ReturnType<typeof client<typeof MediaService>>;
  messages: (u: SignedIn | TestAgent) => ReturnType<typeof client<typeof MessageService>>;
  push: (u: SignedIn) => ReturnType<typeof client<typeof PushService>>;
}

const empty = (field: string) => (answer: unknown) => expect((answer as Record<string, unknown[]>)[field], field).to.deep.equal([]);

/** int32 ids that name no account, a human's id where an agent is asked for, a deleted agent. */
const noAgent = (w: World) => [...unknownInt32.map((id) => [`unknown id ${id}`, id] as const), ["a human's id", w.alice.userId] as const, ["a deleted agent", w.deletedAgentId] as const];

/** An agent-management call of the owner's: unknown and deleted agents are NOT_FOUND, another creator's agent PERMISSION_DENIED. */
const agentManagement =
  (call: (api: Clients, caller: SignedIn, agentUserId: number) => Promise<unknown>): Cases =>
  (w, api) => [
    ...noAgent(w).map(([what, id]) => ({ what, call: () => call(api, w.owner, id), expected: Errors.agentNotFound })),
    { what: "another user's agent", call: () => call(api, w.outsider, w.agent.userId), expected: Errors.notAgentCreator },
  ];

/** Conversation ids that name no conversation: unknown ids of every size, and the PRIVATE id of a pair that never met. */
const noConversation = (w: World) => [
  ...unknownInt64.map((id) => [`unknown id ${id}`, id] as const),
  ["the PRIVATE id of two users who never met", privateConversationId(w.alice.userId, w.outsider.userId)] as const,
];

/** A call on a conversation: NOT_FOUND for one that does not exist, PERMISSION_DENIED (not a member) for the owner and Alice's. */
const onConversation =
  (call: (api: Clients, caller: SignedIn, w: World, conversationId: bigint) => Promise<unknown>): Cases =>
  (w, api) => [
    ...noConversation(w).map(([what, id]) => ({ what: `conversation: ${what}`, call: () => call(api, w.alice, w, id), expected: Errors.conversationNotFound })),
    { what: "another pair's PRIVATE conversation", call: () => call(api, w.outsider, w, w.privateId), expected: Errors.notMember },
    { what: "a group the caller is not in", call: () => call(api, w.outsider, w, BigInt(w.groupId)), expected: Errors.notMember },
  ];

/** A call on one message of the owner and Alice's conversation: the conversation cases, then message ids that name nothing. */
const onMessage =
  (call: (api: Clients, caller: SignedIn, conversationId: bigint, messageId: bigint) => Promise<unknown>, notFound: CatalogueEntry = Errors.messageNotFound): Cases =>
  (w, api) => [
    ...onConversation((a, caller, world, conversationId) => call(a, caller, conversationId, world.messageId))(w, api),
    ...unknownInt64.map((id) => ({ what: `message: unknown id ${id}`, call: () => call(api, w.owner, w.privateId, id), expected: notFound })),
  ];

/** A call on the agent's open stream: conversations that do not exist, a conversation the agent is not in, streams that are not its. */
const onStream =
  (call: (api: Clients, agent: TestAgent, conversationId: bigint, messageId: bigint) => Promise<unknown>): Cases =>
  (w, api) => [
    ...noConversation(w).map(([what, id]) => ({ what: `conversation: ${what}`, call: () => call(api, w.agent, id, w.streamId), expected: Errors.conversationNotFound })),
    { what: "a conversation the agent is not in", call: () => call(api, w.otherAgent, w.agent.conversationId, w.streamId), expected: Errors.notMember },
    ...unknownInt64.map((id) => ({ what: `message: unknown id ${id}`, call: () => call(api, w.agent, w.agent.conversationId, id), expected: Errors.streamNotFound })),
    { what: "a message that is not a stream", call: () => call(api, w.agent, w.agent.conversationId, w.cardId), expected: Errors.streamNotFound },
  ];

/** A group call of the owner's: unknown groups NOT_FOUND; a member who is not the owner and an outsider PERMISSION_DENIED. */
const ownerGroupCall =
  (call: (api: Clients, caller: SignedIn, groupId: number) => Promise<unknown>): Cases =>
  (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown group ${id}`, call: () => call(api, w.owner, id), expected: Errors.groupNotFound })),
    { what: "a member who is not the owner", call: () => call(api, w.alice, w.groupId), expected: Errors.notGroupOwner },
    { what: "a user outside the group", call: () => call(api, w.outsider, w.groupId), expected: Errors.notGroupOwner },
  ];

/** Every RPC that takes an id, by its spec name; the last test checks that none is missing. */
const endpoints: Record<string, Cases> = {
  // AgentService
  "AgentService.GetAgentInfo": (w, api) => noAgent(w).map(([what, id]) => ({ what, call: () => api.agents(w.outsider).getAgentInfo({ agentUserId: id }), expected: Errors.agentNotFound })),
  "AgentService.GetMiniAppLaunchData": (w, api) => [
    ...noAgent(w).map(([what, id]) => ({ what, call: () => api.agents(w.owner).getMiniAppLaunchData({ agentUserId: id, platform: "ios" }), expected: Errors.agentNotFound })),
    ...[...unknownInt64, w.privateId, BigInt(w.groupId)].map((conversationId) => ({
      what: `conversation ${conversationId}, not the caller's with the agent`,
      call: () => api.agents(w.owner).getMiniAppLaunchData({ agentUserId: w.agent.userId, conversationId, platform: "ios" }),
      expected: Errors.launchConversationMismatch,
    })),
  ],
  "AgentService.GetMyAgent": agentManagement((api, u, agentUserId) => api.agents(u).getMyAgent({ agentUserId })),
  "AgentService.SetAgentConfig": agentManagement((api, u, agentUserId) => api.agents(u).setAgentConfig({ agentUserId })),
  "AgentService.DeleteMyAgent": agentManagement((api, u, agentUserId) => api.agents(u).deleteMyAgent({ agentUserId })),
  "AgentService.RegenerateAgentToken": agentManagement((api, u, agentUserId) => api.agents(u).regenerateAgentToken({ agentUserId })),
  "AgentService.RegenerateAgentSecretKey": agentManagement((api, u, agentUserId) => api.agents(u).regenerateAgentSecretKey({ agentUserId })),
  "AgentService.SetAgentMiniApp": agentManagement((api, u, agentUserId) => api.agents(u).setAgentMiniApp({ agentUserId, enabled: false })),

  // UserService
  "UserService.RemoveDevice": (w, api) => [
    { what: "an unknown device", call: () => api.users(w.alice).removeDevice({ deviceId: "no-such-device" }), expected: Errors.deviceNotFound },
    { what: "another user's device", call: () => api.users(w.alice).removeDevice({ deviceId: w.bob.deviceId }), expected: Errors.deviceNotFound },
  ],
  "UserService.BatchGetUserInfo": (w, api) => [
    {
      what: "ids that name no account, or a deleted one, are omitted",
      call: () => api.users(w.alice).batchGetUserInfo({ userIds: [...unknownInt32, w.deletedAgentId, w.agent.userId] }),
      expected: (a) => expect(Object.keys((a as { users: object }).users)).to.deep.equal([String(w.agent.userId)]),
    },
  ],

  // AuthService: the session and token references are the ids here.
  "AuthService.VerifyCode": (_w, api) => [
    { what: "an unknown verify token", call: () => api.auth.verifyCode({ verifyToken: `nxv_${"A".repeat(43)}`, code: "123456", deviceInfo: device() }), expected: Errors.verifySessionNotFound },
  ],
  "AuthService.RefreshToken": (_w, api) => [{ what: "an unknown refresh token", call: () => api.auth.refreshToken({ refreshToken: `nxr_${"A".repeat(43)}` }), expected: Errors.invalidRefreshToken }],
  "AuthService.ResetPasswordVerify": (_w, api) => [
    { what: "an unknown verify token", call: () => api.auth.resetPasswordVerify({ verifyToken: `nxv_${"A".repeat(43)}`, code: "123456" }), expected: Errors.verifySessionNotFound },
  ],
  "AuthService.ResetPasswordConfirm": (_w, api) => [
    { what: "an unknown reset token", call: () => api.auth.resetPasswordConfirm({ resetToken: `nxp_${"A".repeat(43)}`, newPassword: "new password 1" }), expected: Errors.resetTokenNotFound },
  ],

  // ContactService
  "ContactService.SendFriendRequest": (w, api) => unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).sendFriendRequest({ targetUserId: id }), expected: Errors.userNotFound })),
  "ContactService.AcceptFriendRequest": (w, api) => [
    ...unknownInt64.map((id) => ({ what: `unknown request ${id}`, call: () => api.contacts(w.alice).acceptFriendRequest({ requestId: id }), expected: Errors.friendRequestNotFound })),
    { what: "a request to someone else", call: () => api.contacts(w.alice).acceptFriendRequest({ requestId: w.requestId }), expected: Errors.friendRequestNotFound },
    { what: "the caller's own request", call: () => api.contacts(w.bob).acceptFriendRequest({ requestId: w.requestId }), expected: Errors.friendRequestNotFound },
  ],
  "ContactService.RejectFriendRequest": (w, api) => [
    ...unknownInt64.map((id) => ({ what: `unknown request ${id}`, call: () => api.contacts(w.alice).rejectFriendRequest({ requestId: id }), expected: Errors.friendRequestNotFound })),
    { what: "a request to someone else", call: () => api.contacts(w.alice).rejectFriendRequest({ requestId: w.requestId }), expected: Errors.friendRequestNotFound },
    { what: "the caller's own request", call: () => api.contacts(w.bob).rejectFriendRequest({ requestId: w.requestId }), expected: Errors.friendRequestNotFound },
  ],
  "ContactService.AddContact": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).addContact({ targetUserId: id }), expected: Errors.userNotFound })),
    { what: "another user's private agent", call: () => api.contacts(w.outsider).addContact({ targetUserId: w.agent.userId }), expected: Errors.privateAgent },
    { what: "a deleted agent (7003)", call: () => api.contacts(w.owner).addContact({ targetUserId: w.deletedAgentId }), expected: Errors.agentNotActive },
  ],
  "ContactService.ListContacts": (w, api) => [
    { what: "an afterId past every contact", call: () => api.contacts(w.alice).listContacts({ afterId: 2 ** 31 - 1 }), expected: empty("contacts") },
  ],
  "ContactService.DeleteContact": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).deleteContact({ contactUserId: id }), expected: Errors.contactNotFound })),
    { what: "a user who is not a contact", call: () => api.contacts(w.alice).deleteContact({ contactUserId: w.outsider.userId }), expected: Errors.contactNotFound },
  ],
  "ContactService.UpdateContactAlias": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).updateContactAlias({ contactUserId: id, alias: "x" }), expected: Errors.contactNotFound })),
    { what: "a user who is not a contact", call: () => api.contacts(w.alice).updateContactAlias({ contactUserId: w.outsider.userId, alias: "x" }), expected: Errors.contactNotFound },
  ],
  "ContactService.BlockUser": (w, api) => unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).blockUser({ targetUserId: id }), expected: Errors.userNotFound })),
  "ContactService.UnblockUser": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown user ${id}`, call: () => api.contacts(w.alice).unblockUser({ targetUserId: id }), expected: Errors.notBlocked })),
    { what: "a user who is not blocked", call: () => api.contacts(w.alice).unblockUser({ targetUserId: w.outsider.userId }), expected: Errors.notBlocked },
  ],

  // ConversationService
  "ConversationService.GetConversation": onConversation((api, u, _w, conversationId) => api.conversations(u).getConversation({ conversationId })),
  "ConversationService.UpdateConversationAction": onConversation((api, u, _w, conversationId) => api.conversations(u).updateConversationAction({ conversationId, action: ConversationActionType.MUTE })),
  "ConversationService.MarkAsRead": (w, api) => [
    ...onConversation((a, u, _w, conversationId) => a.conversations(u).markAsRead({ conversationId, upToMessageId: 1n }))(w, api),
    // A position past the last message is refused (spec: "must be at least the current read position"; nothing says past the end).
    ...unknownInt64.map((id) => ({ what: `message: unknown id ${id}`, call: () => api.conversations(w.alice).markAsRead({ conversationId: w.privateId, upToMessageId: id }), expected: Errors.invalidArgument })),
  ],

  // GroupService
  "GroupService.CreateGroup": (w, api) => [
    { what: "member ids that name nobody are dropped, leaving too few", call: () => api.groups(w.owner).createGroup({ name: "ghosts", memberIds: [w.alice.userId, ...unknownInt32] }), expected: Errors.groupTooSmall },
  ],
  "GroupService.DissolveGroup": ownerGroupCall((api, u, groupId) => api.groups(u).dissolveGroup({ groupId })),
  "GroupService.UpdateGroupName": ownerGroupCall((api, u, groupId) => api.groups(u).updateGroupName({ groupId, name: "renamed" })),
  "GroupService.UpdateGroupAvatar": ownerGroupCall((api, u, groupId) => api.groups(u).updateGroupAvatar({ groupId, avatarUrl: "" })),
  "GroupService.UpdateGroupDescription": ownerGroupCall((api, u, groupId) => api.groups(u).updateGroupDescription({ groupId, description: "" })),
  "GroupService.InviteMembers": (w, api) => [
    ...ownerGroupCall((a, u, groupId) => a.groups(u).inviteMembers({ groupId, memberIds: [w.outsider.userId] }))(w, api),
    { what: "member ids that name nobody are skipped", call: () => api.groups(w.owner).inviteMembers({ groupId: w.groupId, memberIds: unknownInt32 }), expected: () => undefined },
  ],
  "GroupService.RemoveMember": (w, api) => [
    ...ownerGroupCall((a, u, groupId) => a.groups(u).removeMember({ groupId, targetId: w.bob.userId }))(w, api),
    ...[...unknownInt32, w.outsider.userId].map((targetId) => ({
      what: `target ${targetId}, not a member`,
      call: () => api.groups(w.owner).removeMember({ groupId: w.groupId, targetId }),
      expected: Errors.memberNotFound,
    })),
  ],
  "GroupService.LeaveGroup": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown group ${id}`, call: () => api.groups(w.alice).leaveGroup({ groupId: id }), expected: Errors.groupNotFound })),
    { what: "a group the caller is not in", call: () => api.groups(w.outsider).leaveGroup({ groupId: w.groupId }), expected: Errors.memberNotFound },
  ],
  "GroupService.GetGroupInfo": (w, api) => [
    ...unknownInt32.map((id) => ({ what: `unknown group ${id}`, call: () => api.groups(w.alice).getGroupInfo({ groupId: id }), expected: Errors.groupNotFound })),
    { what: "a group the caller is not in", call: () => api.groups(w.outsider).getGroupInfo({ groupId: w.groupId }), expected: Errors.notGroupMember },
  ],
  "GroupService.ListGroups": (w, api) => [{ what: "an afterId past every group", call: () => api.groups(w.alice).listGroups({ afterId: 2 ** 31 - 1 }), expected: empty("groups") }],

  // MediaService
  "MediaService.UploadChunk": (w, api) => [
    ...["0".repeat(32), "nope"].map((sessionId) => ({ what: `unknown session ${sessionId}`, call: () => api.media(w.alice).uploadChunk({ sessionId, offset: 0n, chunk: Buffer.from("x") }), expected: Errors.uploadSessionNotFound })),
    { what: "another user's session", call: () => api.media(w.bob).uploadChunk({ sessionId: w.sessionId, offset: 0n, chunk: Buffer.from("x") }), expected: Errors.uploadSessionNotFound },
  ],
  "MediaService.CompleteUpload": (w, api) => [
    ...["0".repeat(32), "nope"].map((sessionId) => ({ what: `unknown session ${sessionId}`, call: () => api.media(w.alice).completeUpload({ sessionId }), expected: Errors.uploadSessionNotFound })),
    { what: "another user's session", call: () => api.media(w.bob).completeUpload({ sessionId: w.sessionId }), expected: Errors.uploadSessionNotFound },
  ],
  "MediaService.GetDownloadURL": (w, api) =>
    ["f".repeat(32), "nope", "../etc/passwd"].map((fileId) => ({ what: `unknown file ${fileId}`, call: () => api.media(w.alice).getDownloadURL({ fileId }), expected: Errors.mediaFileNotFound })),

  // MessageService
  "MessageService.SendMessage": (w, api) => [
    ...onConversation((a, u, _w, conversationId) => a.messages(u).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody("x") }))(w, api),
    ...unknownInt64.map((id) => ({
      what: `reply to unknown message ${id}`,
      call: () => api.messages(w.alice).sendMessage({ conversationId: w.privateId, clientMessageId: nextClientMessageId(), body: textBody("x"), replyToMessageId: id }),
      expected: Errors.replyTargetNotFound,
    })),
  ],
  "MessageService.EditMessage": onMessage((api, u, conversationId, messageId) => api.messages(u).editMessage({ conversationId, messageId, newBody: textBody("edited") })),
  "MessageService.DeleteMessages": (w, api) => [
    ...onConversation((a, u, world, conversationId) => a.messages(u).deleteMessages({ conversationId, messageIds: [world.messageId] }))(w, api),
    { what: "message ids that name nothing delete nothing", call: () => api.messages(w.alice).deleteMessages({ conversationId: w.privateId, messageIds: unknownInt64 }), expected: (a) => expect((a as { deletedCount: number }).deletedCount).to.equal(0) },
  ],
  "MessageService.DeleteHistory": (w, api) => [
    ...onConversation((a, u, _w, conversationId) => a.messages(u).deleteHistory({ conversationId, upToMessageId: 1n }))(w, api),
    // Past the last message it clears what there is (Bob's view of the group: no other case reads it).
    ...unknownInt64.map((id) => ({ what: `up to unknown message ${id}`, call: () => api.messages(w.bob).deleteHistory({ conversationId: BigInt(w.groupId), upToMessageId: id }), expected: () => undefined })),
  ],
  "MessageService.RecallMessage": onMessage((api, u, conversationId, messageId) => api.messages(u).recallMessage({ conversationId, messageId })),
  "MessageService.GetMessage": onMessage((api, u, conversationId, messageId) => api.messages(u).getMessage({ conversationId, messageId })),
  "MessageService.GetMessageHistory": (w, api) => [
    ...onConversation((a, u, _w, conversationId) => a.messages(u).getMessageHistory({ conversationId }))(w, api),
    ...unknownInt64.map((id) => ({ what: `after unknown message ${id}`, call: () => api.messages(w.alice).getMessageHistory({ conversationId: w.privateId, afterMessageId: id }), expected: empty("messages") })),
    ...unknownInt64.map((id) => ({
      what: `before unknown message ${id}`,
      call: () => api.messages(w.alice).getMessageHistory({ conversationId: w.privateId, beforeMessageId: id }),
      expected: (a: unknown) => expect((a as { messages: { messageId: bigint }[] }).messages.map((m) => m.messageId)).to.deep.equal([w.messageId]),
    })),
  ],
  "MessageService.SubmitCardAction": (w, api) => [
    ...noConversation(w).map(([what, id]) => ({ what: `conversation: ${what}`, call: () => api.messages(w.owner).submitCardAction({ conversationId: id, messageId: w.cardId, actionData: "{}" }), expected: Errors.conversationNotFound })),
    { what: "a conversation the caller is not in", call: () => api.messages(w.outsider).submitCardAction({ conversationId: w.agent.conversationId, messageId: w.cardId, actionData: "{}" }), expected: Errors.notMember },
    ...unknownInt64.map((id) => ({ what: `message: unknown id ${id}`, call: () => api.messages(w.owner).submitCardAction({ conversationId: w.agent.conversationId, messageId: id, actionData: "{}" }), expected: Errors.messageNotFound })),
  ],
  "MessageService.PushStreamDelta": onStream((api, agent, conversationId, messageId) => api.messages(agent).pushStreamDelta({ conversationId, messageId, seq: 1, delta: "x" })),
  "MessageService.EndStream": onStream((api, agent, conversationId, messageId) => api.messages(agent).endStream({ conversationId, messageId, accumulatedText: "x" })),
  "MessageService.ErrorStream": onStream((api, agent, conversationId, messageId) => api.messages(agent).errorStream({ conversationId, messageId, errorMessage: "x" })),
  "MessageService.AnswerCardAction": (w, api) => {
    const answer = (agent: TestAgent, request: { conversationId?: bigint; messageId?: bigint; actionId?: string }) =>
      api.messages(agent).answerCardAction({ conversationId: w.agent.conversationId, messageId: w.cardId, actionId: w.actionId, showAlert: false, ...request });
    return [
      ...["not-an-action", "0".repeat(32)].map((actionId) => ({ what: `unknown action ${actionId}`, call: () => answer(w.agent, { actionId }), expected: Errors.cardActionNotFound })),
      { what: "another agent's action", call: () => answer(w.otherAgent, {}), expected: Errors.cardActionNotFound },
      ...noConversation(w).map(([what, conversationId]) => ({ what: `conversation: ${what}`, call: () => answer(w.agent, { conversationId }), expected: Errors.cardActionNotFound })),
      ...unknownInt64.map((messageId) => ({ what: `message: unknown id ${messageId}`, call: () => answer(w.agent, { messageId }), expected: Errors.cardActionNotFound })),
    ];
  },

  // PushService
  "PushService.RegisterToken": (w, api) => [
    ...["no-such-device", w.bob.deviceId].map((deviceId) => ({
      what: deviceId === w.bob.deviceId ? "another user's device" : "an unknown device",
      call: () => api.push(w.alice).registerToken({ deviceId, token: "t", platform: PushPlatform.APNS }),
      expected: Errors.unknownPushDevice,
    })),
  ],
  "PushService.UnregisterToken": (w, api) => [
    { what: "an unknown device", call: () => api.push(w.alice).unregisterToken({ deviceId: "no-such-device" }), expected: Errors.pushTokenNotFound },
    { what: "another user's device", call: () => api.push(w.alice).unregisterToken({ deviceId: w.bob.deviceId }), expected: Errors.pushTokenNotFound },
    { what: "a device of the caller's without a token", call: () => api.push(w.alice).unregisterToken({ deviceId: w.alice.deviceId }), expected: Errors.pushTokenNotFound },
  ],
};

/** Request fields that name something by id: every RPC with one must be in the table. */
const idField = /(Id|Ids|Token)$/;
/** Fields ending so that name nothing stored: a client's own idempotency key, and credentials of the caller's own. */
const notIds = new Set(["clientMessageId", "token", "newPassword"]);

describe("unknown ids answer alike on every topology", () => {
  let server: TestServer;
  let world: World;
  let api: Clients;

  before(async function () {
    this.timeout(60_000);
    server = await startTestServer();
    const as = <S extends DescService>(service: S) => (u?: SignedIn | TestAgent) => client(server, service, mode, u && ("accessToken" in u ? u.accessToken : u.token));
    api = {
      agents: as(AgentService),
      users: as(UserService),
      auth: client(server, AuthService, mode),
      contacts: as(ContactService),
      conversations: as(ConversationService),
      groups: as(GroupService),
      media: as(MediaService),
      messages: as(MessageService),
      push: as(PushService),
    };
    const [owner, alice, bob, outsider] = await Promise.all([0, 1, 2, 3].map(() => signInWithCode(server, mode)));
    const [agent, otherAgent, deleted] = [await createAgent(server, owner, mode), await createAgent(server, owner, mode), await createAgent(server, owner, mode)];
    await api.agents(owner).deleteMyAgent({ agentUserId: deleted.userId });
    await api.agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", permissions: 0 });
    const privateId = await befriend(server, owner, alice, mode);
    const { messageId } = await api.messages(owner).sendMessage({ conversationId: privateId, clientMessageId: nextClientMessageId(), body: textBody("hello") });
    const { group } = await api.groups(owner).createGroup({ name: "team", memberIds: [alice.userId, bob.userId] });
    const { messageId: cardId } = await api.messages(agent).sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: cardBody('{"type":"AdaptiveCard"}', "card") });
    const { messageId: streamId } = await api.messages(agent).sendMessage({ conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() });
    const { actionId } = await api.messages(owner).submitCardAction({ conversationId: agent.conversationId, messageId: cardId, actionData: "{}" });
    const { requestId } = await api.contacts(bob).sendFriendRequest({ targetUserId: outsider.userId });
    const { sessionId } = await api.media(alice).initUpload({ fileName: "a.bin", contentType: "application/octet-stream", size: 10n });
    world = { owner, alice, bob, outsider, agent, otherAgent, deletedAgentId: deleted.userId, privateId, messageId, groupId: group!.groupId, cardId, streamId, actionId, requestId, sessionId };
  });
  after(async () => server?.dispose());

  for (const [endpoint, cases] of Object.entries(endpoints)) {
    it(`${endpoint}`, async () => {
      // Every case runs, in parallel (none changes what another sees); all differences are reported at once.
      const all = cases(world, api);
      expect(all.length, "cases").to.be.greaterThan(0);
      const outcomes = await Promise.allSettled(
        all.map(async ({ call, expected }) => {
          if (typeof expected === "function") expected(await call());
          else await expectError(call(), expected);
        }),
      );
      const failures = outcomes.flatMap((outcome, i) => (outcome.status === "rejected" ? [`${all[i].what}: ${(outcome.reason as Error).message}`] : []));
      expect(failures, `${endpoint}`).to.deep.equal([]);
    });
  }

  it("covers every RPC whose request names something by id", () => {
    const services: DescService[] = [AgentService, UserService, AuthService, ContactService, ConversationService, GroupService, MediaService, MessageService, PushService, SyncService];
    const withIds = services.flatMap((service) =>
      service.methods.filter((method) => method.input.fields.some((field) => idField.test(field.localName) && !notIds.has(field.localName))).map((method) => `${service.name}.${method.name}`),
    );
    expect(withIds.filter((name) => !(name in endpoints)), "RPCs with ids missing from the table").to.deep.equal([]);
  });
});
