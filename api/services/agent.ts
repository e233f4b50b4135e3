import type { ServiceBroker } from "moleculer";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { forwardingService, type RouteTable } from "../rpc.js";

/** Methods not listed yet answer UNIMPLEMENTED. */
export const agentRoutes: Partial<RouteTable<typeof AgentService>> = {
  getAgentInfo: { access: "any", action: "agents.getAgentInfo" },
  createAgent: { access: "user", action: "agents.createAgent" },
  listMyAgents: { access: "user", action: "agents.listMyAgents" },
  getMyAgent: { access: "user", action: "agents.getMyAgent" },
};

export const agentService = (broker: ServiceBroker) => forwardingService(broker, AgentService, agentRoutes);
