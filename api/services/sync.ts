import type { ServiceBroker } from "moleculer";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const syncRoutes: RouteTable<typeof SyncService> = {
  getDifference: { access: "user", action: "sync.getDifference" },
  getCurrentState: { access: "user", action: "sync.getCurrentState" },
};

export const syncProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, SyncService, syncRoutes);
