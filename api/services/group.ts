import type { ServiceBroker } from "moleculer";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const groupRoutes: RouteTable<typeof GroupService> = {
  createGroup: { access: "user", action: "groups.createGroup" },
  dissolveGroup: { access: "user", action: "groups.dissolveGroup" },
  updateGroupName: { access: "user", action: "groups.updateGroupName" },
  updateGroupAvatar: { access: "user", action: "groups.updateGroupAvatar" },
  updateGroupDescription: { access: "user", action: "groups.updateGroupDescription" },
  inviteMembers: { access: "user", action: "groups.inviteMembers" },
  removeMember: { access: "user", action: "groups.removeMember" },
  leaveGroup: { access: "any", action: "groups.leaveGroup" },
  getGroupInfo: { access: "any", action: "groups.getGroupInfo" },
  listGroups: { access: "any", action: "groups.listGroups" },
};

export const groupProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, GroupService, groupRoutes);
