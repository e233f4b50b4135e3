import type { ServiceBroker } from "moleculer";
import { ConversationService } from "../../shared/gen/api/v1/conversation_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const conversationRoutes: RouteTable<typeof ConversationService> = {
  getConversation: { access: "any", action: "conversations.getConversation" },
  listConversations: { access: "any", action: "conversations.listConversations" },
  updateConversationAction: { access: "any", action: "conversations.updateConversationAction" },
  markAsRead: { access: "any", action: "conversations.markAsRead" },
};

export const conversationProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, ConversationService, conversationRoutes);
