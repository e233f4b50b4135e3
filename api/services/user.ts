import type { ServiceBroker } from "moleculer";
import { UserService } from "../../shared/gen/api/v1/user_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const userRoutes: RouteTable<typeof UserService> = {
  getProfile: { access: "any", action: "users.getProfile" },
  updateProfile: { access: "any", action: "users.updateProfile" },
  listDevices: { access: "user", action: "auth.listDevices" },
  removeDevice: { access: "user", action: "auth.removeDevice" },
  setUsername: { access: "user", action: "users.setUsername" },
  resolveUsername: { access: "any", action: "users.resolveUsername" },
  batchGetUserInfo: { access: "any", action: "users.batchGetUserInfo" },
};

export const userProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, UserService, userRoutes);
