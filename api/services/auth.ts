import type { ServiceBroker } from "moleculer";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { forwardingService, type RouteTable } from "../rpc.js";

export const authRoutes: RouteTable<typeof AuthService> = {
  requestVerifyCode: { access: "none", action: "accounts.requestVerifyCode" },
  verifyCode: { access: "none", action: "accounts.verifyCode" },
  loginPassword: { access: "none", action: "accounts.loginPassword" },
  refreshToken: { access: "none", action: "accounts.refreshToken" },
  logout: { access: "user", action: "accounts.logout" },
  logoutAll: { access: "user", action: "accounts.logoutAll" },
  setupPassword: { access: "user", action: "accounts.setupPassword" },
  changePassword: { access: "user", action: "accounts.changePassword" },
  resetPasswordRequest: { access: "none", action: "accounts.resetPasswordRequest" },
  resetPasswordVerify: { access: "none", action: "accounts.resetPasswordVerify" },
  resetPasswordConfirm: { access: "none", action: "accounts.resetPasswordConfirm" },
  getClientConfig: { access: "none", action: "accounts.getClientConfig" },
};

export const authService = (broker: ServiceBroker) => forwardingService(broker, AuthService, authRoutes);
