import type { ServiceBroker } from "moleculer";
import { PushService } from "../../shared/gen/api/v1/push_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const pushRoutes: RouteTable<typeof PushService> = {
  registerToken: { access: "user", action: "push.registerToken" },
  unregisterToken: { access: "user", action: "push.unregisterToken" },
  clearBadge: { access: "user", action: "push.clearBadge" },
};

export const pushProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, PushService, pushRoutes);
