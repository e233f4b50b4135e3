import type { ServiceBroker } from "moleculer";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { forwardingService, type RouteTable } from "../rpc.js";

export const contactRoutes: RouteTable<typeof ContactService> = {
  sendFriendRequest: { access: "user", action: "social.sendFriendRequest" },
  listPendingRequests: { access: "any", action: "social.listPendingRequests" },
  acceptFriendRequest: { access: "user", action: "social.acceptFriendRequest" },
  rejectFriendRequest: { access: "user", action: "social.rejectFriendRequest" },
  addContact: { access: "user", action: "social.addContact" },
  listContacts: { access: "any", action: "social.listContacts" },
  deleteContact: { access: "any", action: "social.deleteContact" },
  updateContactAlias: { access: "any", action: "social.updateContactAlias" },
  searchUsers: { access: "any", action: "social.searchUsers" },
  blockUser: { access: "any", action: "social.blockUser" },
  unblockUser: { access: "any", action: "social.unblockUser" },
  listBlocked: { access: "any", action: "social.listBlocked" },
};

export const contactService = (broker: ServiceBroker) => forwardingService(broker, ContactService, contactRoutes);
