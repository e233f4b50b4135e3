import type { ServiceBroker } from "moleculer";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { forwardingService, type RouteTable } from "../rpc.js";

export const messageRoutes: RouteTable<typeof MessageService> = {
  sendMessage: { access: "any", action: "conversation.sendMessage" },
  editMessage: { access: "any", action: "conversation.editMessage" },
  deleteMessages: { access: "any", action: "conversations.deleteMessages" },
  deleteHistory: { access: "any", action: "conversations.deleteHistory" },
  recallMessage: { access: "any", action: "conversation.recallMessage" },
  getMessage: { access: "any", action: "conversation.getMessage" },
  getMessageHistory: { access: "any", action: "conversation.getMessageHistory" },
  submitCardAction: { access: "any", action: "conversation.submitCardAction" },
  pushStreamDelta: { access: "agent", action: "conversation.pushStreamDelta" },
  endStream: { access: "agent", action: "conversation.endStream" },
  errorStream: { access: "agent", action: "conversation.errorStream" },
  answerCardAction: { access: "agent", action: "conversation.answerCardAction" },
};

export const messageService = (broker: ServiceBroker) => forwardingService(broker, MessageService, messageRoutes);
