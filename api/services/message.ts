import type { ServiceBroker } from "moleculer";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const messageRoutes: RouteTable<typeof MessageService> = {
  sendMessage: { access: "any", action: "messages.sendMessage" },
  editMessage: { access: "any", action: "messages.editMessage" },
  deleteMessages: { access: "any", action: "conversations.deleteMessages" },
  deleteHistory: { access: "any", action: "conversations.deleteHistory" },
  recallMessage: { access: "any", action: "messages.recallMessage" },
  getMessage: { access: "any", action: "messages.getMessage" },
  getMessageHistory: { access: "any", action: "messages.getMessageHistory" },
  submitCardAction: { access: "any", action: "messages.submitCardAction" },
  pushStreamDelta: { access: "agent", action: "messages.pushStreamDelta" },
  endStream: { access: "agent", action: "messages.endStream" },
  errorStream: { access: "agent", action: "messages.errorStream" },
  answerCardAction: { access: "agent", action: "messages.answerCardAction" },
};

export const messageProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, MessageService, messageRoutes);
