// The messages service: MessageService's per-conversation methods and the conversation actors'
// internal actions, bound to Moleculer (the actors are conversation-actor.ts). Each call is
// routed to the engine owning the conversation's shard.
import type { Context, ServiceSchema } from "moleculer";
import {
  AnswerCardActionRequestSchema,
  AnswerCardActionResponseSchema,
  EditMessageRequestSchema,
  EditMessageResponseSchema,
  EndStreamRequestSchema,
  EndStreamResponseSchema,
  ErrorStreamRequestSchema,
  ErrorStreamResponseSchema,
  GetMessageHistoryRequestSchema,
  GetMessageHistoryResponseSchema,
  GetMessageRequestSchema,
  GetMessageResponseSchema,
  PushStreamDeltaRequestSchema,
  PushStreamDeltaResponseSchema,
  RecallMessageRequestSchema,
  RecallMessageResponseSchema,
  SendMessageRequestSchema,
  SendMessageResponseSchema,
  SubmitCardActionRequestSchema,
  SubmitCardActionResponseSchema,
} from "../../shared/gen/api/v1/message_pb.js";
import { MessageBodySchema } from "../../shared/gen/shared/v1/message_pb.js";
import type { ActionsOf } from "../../shared/actions.js";
import { backgroundFailed } from "../../shared/background.js";
import { streamsOpen } from "../../shared/metrics.js";
import { fromWire } from "../../shared/wire.js";
import type { EngineDeps } from "../deps.js";
import { FanOutPolicy } from "../delivery/fan-out.js";
import type { SystemMessageParams } from "../delivery/fan-out-contracts.js";
import { callEngine, type AdoptStreamParams, type EngineActions, type FinishFanOutsParams, type ForgetParams } from "../engine-actions.js";
import { requireCaller, rpcAction } from "../rpc-action.js";
import { routeToOwner } from "../shard-owners.js";
import { ConversationActors, MessagePolicy } from "./conversation-actor.js";

const shardByConversation = routeToOwner("request.conversationId", "conversation");

export function messagesService(deps: EngineDeps): ServiceSchema {
  const actors = new ConversationActors(deps);
  const sharded = <T>(handler: T) => ({ ...shardByConversation, handler });
  let sweep: NodeJS.Timeout | undefined;
  let fanOutSweep: NodeJS.Timeout | undefined;
  let unsampleStreams = () => {};
  return {
    name: "messages",
    started() {
      const broker = this.broker;
      unsampleStreams = streamsOpen.sample({}, () => actors.openStreams);
      // Each node owns the streams in its memory, so the sweep is called on this node only.
      sweep = setInterval(() => {
        callEngine(broker, "messages.endAbandonedStreams", {}, { nodeID: broker.nodeID }).catch((err: unknown) => backgroundFailed("stream_sweep", err, broker.logger, "ending abandoned streams"));
      }, MessagePolicy.streamSweepIntervalMs);
      sweep.unref();
      fanOutSweep = setInterval(() => {
        void (async () => {
          if (await deps.ownership.leads("fan-out-sweep")) await deps.fanOuts.sweep(broker);
        })().catch((err: unknown) => backgroundFailed("fanout_sweep", err, broker.logger, "finishing recorded fan-outs"));
      }, FanOutPolicy.sweepIntervalMs);
      fanOutSweep.unref();
    },
    stopped() {
      clearInterval(sweep);
      clearInterval(fanOutSweep);
      unsampleStreams();
    },
    events: {
      // A node that lost sight of others (or sees a new one) may have missed a change meant for it.
      "$node.connected"() {
        actors.forgetAll();
      },
      "$node.disconnected"() {
        actors.forgetAll();
      },
    },
    actions: {
      forget: {
        handler: (ctx: Context<ForgetParams>) => {
          actors.forget(ctx.params);
          return {};
        },
      },
      adoptStream: {
        ...shardByConversation,
        handler: async (ctx: Context<AdoptStreamParams>) => {
          await actors.adoptStream(BigInt(ctx.params.request.conversationId), BigInt(ctx.params.messageId), ctx.params.senderId);
          return {};
        },
      },
      finishFanOuts: {
        ...shardByConversation,
        handler: async (ctx: Context<FinishFanOutsParams>) => {
          await actors.finishFanOuts(ctx, BigInt(ctx.params.request.conversationId));
          return {};
        },
      },
      endAbandonedStreams: {
        handler: async (ctx: Context) => ({ ended: await actors.endAbandonedStreams(ctx) }),
      },
      sendMessage: sharded(rpcAction(SendMessageRequestSchema, SendMessageResponseSchema, ({ request, caller, ctx }) => actors.send(ctx, requireCaller(caller), request))),
      editMessage: sharded(
        rpcAction(EditMessageRequestSchema, EditMessageResponseSchema, ({ request, caller, ctx }) =>
          actors.edit(ctx, requireCaller(caller), request.conversationId, request.messageId, request.newBody!),
        ),
      ),
      recallMessage: sharded(
        rpcAction(RecallMessageRequestSchema, RecallMessageResponseSchema, ({ request, caller, ctx }) =>
          actors.recall(ctx, requireCaller(caller), request.conversationId, request.messageId),
        ),
      ),
      getMessage: sharded(
        rpcAction(GetMessageRequestSchema, GetMessageResponseSchema, ({ request, caller }) => actors.getMessage(requireCaller(caller), request.conversationId, request.messageId)),
      ),
      getMessageHistory: sharded(
        rpcAction(GetMessageHistoryRequestSchema, GetMessageHistoryResponseSchema, ({ request, caller }) =>
          actors.history(requireCaller(caller), request.conversationId, request.beforeMessageId, request.afterMessageId, request.limit),
        ),
      ),
      submitCardAction: sharded(
        rpcAction(SubmitCardActionRequestSchema, SubmitCardActionResponseSchema, ({ request, caller, ctx }) =>
          actors.submitCardAction(ctx, requireCaller(caller), request.conversationId, request.messageId, request.actionData, request.verb),
        ),
      ),
      pushStreamDelta: sharded(
        rpcAction(PushStreamDeltaRequestSchema, PushStreamDeltaResponseSchema, ({ request, caller, ctx }) =>
          actors.pushDelta(ctx, requireCaller(caller), request.conversationId, request.messageId, request.seq, request.delta),
        ),
      ),
      endStream: sharded(
        rpcAction(EndStreamRequestSchema, EndStreamResponseSchema, ({ request, caller, ctx }) =>
          actors.finishStream(ctx, requireCaller(caller), request.conversationId, request.messageId, { text: request.accumulatedText, entities: request.entities }),
        ),
      ),
      errorStream: sharded(
        rpcAction(ErrorStreamRequestSchema, ErrorStreamResponseSchema, ({ request, caller, ctx }) =>
          actors.finishStream(ctx, requireCaller(caller), request.conversationId, request.messageId, { error: request.errorMessage }),
        ),
      ),
      postSystemMessage: {
        ...shardByConversation,
        handler: async (ctx: Context<SystemMessageParams>) => {
          const { messageId } = await actors.postSystemMessage(
            ctx,
            BigInt(ctx.params.request.conversationId),
            fromWire(MessageBodySchema, ctx.params.body),
            ctx.params.extraRecipients ?? [],
            BigInt(ctx.params.systemMessageId),
          );
          return messageId === undefined ? {} : { messageId: String(messageId) };
        },
      },
      answerCardAction: sharded(
        rpcAction(AnswerCardActionRequestSchema, AnswerCardActionResponseSchema, ({ request, caller, ctx }) =>
          actors.answerCardAction(ctx, requireCaller(caller), request.conversationId, request.messageId, request.actionId, request.text ?? "", request.showAlert),
        ),
      ),
    } satisfies ActionsOf<EngineActions, "messages">,
  };
}
