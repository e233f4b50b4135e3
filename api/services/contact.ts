import type { ServiceBroker } from "moleculer";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const contactRoutes: RouteTable<typeof ContactService> = {
  sendFriendRequest: { access: "user", action: "contacts.sendFriendRequest" },
  listPendingRequests: { access: "any", action: "contacts.listPendingRequests" },
  acceptFriendRequest: { access: "user", action: "contacts.acceptFriendRequest" },
  rejectFriendRequest: { access: "user", action: "contacts.rejectFriendRequest" },
  addContact: { access: "user", action: "contacts.addContact" },
  listContacts: { access: "any", action: "contacts.listContacts" },
  deleteContact: { access: "any", action: "contacts.deleteContact" },
  updateContactAlias: { access: "any", action: "contacts.updateContactAlias" },
  searchUsers: { access: "any", action: "contacts.searchUsers" },
  blockUser: { access: "any", action: "contacts.blockUser" },
  unblockUser: { access: "any", action: "contacts.unblockUser" },
  listBlocked: { access: "any", action: "contacts.listBlocked" },
};

export const contactProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, ContactService, contactRoutes);
