// The actions the engine's services call among themselves, beside those other roles call
// (shared/actions.ts): one list, checked at each call (callEngine) and by each service's schema
// (`satisfies ActionsOf<EngineActions, …>`). The params that only the engine passes live here.
import { callerOf, type Action, type Actions } from "../shared/actions.js";
import type { WireMessage } from "../shared/wire.js";
import type { AppendFanOutsAnswer, AppendFanOutsParams, SystemMessageParams } from "./delivery/fan-out-contracts.js";

/** The parameters of `messages.forget`: what changed, so every node holding it drops it. */
export interface ForgetParams {
  /** Conversations (decimal ids) whose participants, group, contacts or blocks changed. */
  conversationIds?: string[];
  /** Accounts whose record (nickname, username, avatar…) or agent status changed. */
  userIds?: number[];
}

export interface AdoptStreamParams {
  /** Shaped like an RPC request so the same shard key routes it to the conversation's owner. */
  request: { conversationId: string };
  messageId: string;
  senderId: number;
}

export interface FinishFanOutsParams {
  /** Shaped like an RPC request so the conversation's shard key routes it. */
  request: { conversationId: string };
}

export interface CardActionParams {
  /** The agent that sent the card. */
  userId: number;
  /** CardActionPayload wire form. */
  cardAction: WireMessage;
  /** The submitting user's UserInfo wire form. */
  users?: WireMessage[];
}

/** The parameters of the internal `agents.configureWebhook` action (the system agent's /setwebhook). */
export interface ConfigureWebhookParams {
  agentUserId: number;
  url: string;
}

export type EngineActions = Actions & {
  /** Every node's conversation actors (engine/messages/conversation-actor.ts) drop what they held of the conversations or accounts that changed (engine/membership.ts). */
  "messages.forget": Action<ForgetParams, unknown>;
  /** The conversation's owner takes over a stream whose owner moved. */
  "messages.adoptStream": Action<AdoptStreamParams, unknown>;
  /** The conversation's owner finishes the recorded fan-outs of its scope (engine/delivery/fan-out.ts). */
  "messages.finishFanOuts": Action<FinishFanOutsParams, unknown>;
  /** This node's conversation actors end the streams nobody fed within the limit. */
  "messages.endAbandonedStreams": Action<Record<string, never>, { ended: number }>;
  /** The conversation's owner posts a recorded system message once. */
  "messages.postSystemMessage": Action<SystemMessageParams, { messageId?: string }>;
  /** An inbox (engine/sync/inbox.ts) appends fan-outs to the streams of the recipients its node owns. */
  "sync.appendFanOuts": Action<AppendFanOutsParams, AppendFanOutsAnswer>;
  /** The agent's inbox delivers a card action to it. */
  "sync.deliverCardAction": Action<CardActionParams, unknown>;
  /** Sets an agent's webhook as the system agent's /setwebhook asks (engine/agents/agent-service.ts). */
  "agents.configureWebhook": Action<ConfigureWebhookParams, { secretKey: string }>;
};

/** Calls an action of the engine's or of another role's. */
export const callEngine = callerOf<EngineActions>();
