import type { ServiceBroker } from "moleculer";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const authRoutes: RouteTable<typeof AuthService> = {
  requestVerifyCode: { access: "none", action: "auth.requestVerifyCode" },
  verifyCode: { access: "none", action: "auth.verifyCode" },
  loginPassword: { access: "none", action: "auth.loginPassword" },
  refreshToken: { access: "none", action: "auth.refreshToken" },
  logout: { access: "user", action: "auth.logout" },
  logoutAll: { access: "user", action: "auth.logoutAll" },
  setupPassword: { access: "user", action: "auth.setupPassword" },
  changePassword: { access: "user", action: "auth.changePassword" },
  resetPasswordRequest: { access: "none", action: "auth.resetPasswordRequest" },
  resetPasswordVerify: { access: "none", action: "auth.resetPasswordVerify" },
  resetPasswordConfirm: { access: "none", action: "auth.resetPasswordConfirm" },
  getClientConfig: { access: "none", action: "auth.getClientConfig" },
};

export const authProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, AuthService, authRoutes);
