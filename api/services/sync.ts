import type { ServiceBroker } from "moleculer";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import { forwardingService, type RouteTable } from "../rpc.js";

export const syncRoutes: RouteTable<typeof SyncService> = {
  getDifference: { access: "user", action: "inbox.getDifference" },
  getCurrentState: { access: "user", action: "inbox.getCurrentState" },
};

export const syncService = (broker: ServiceBroker) => forwardingService(broker, SyncService, syncRoutes);
