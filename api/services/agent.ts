import type { ServiceBroker } from "moleculer";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { forwardingProcedures, type RouteTable } from "../rpc.js";

export const agentRoutes: RouteTable<typeof AgentService> = {
  listFeaturedAgents: { access: "any", action: "agents.listFeaturedAgents" },
  getAgentInfo: { access: "any", action: "agents.getAgentInfo" },
  getMiniAppLaunchData: { access: "user", action: "agents.getMiniAppLaunchData" },
  createAgent: { access: "user", action: "agents.createAgent" },
  listMyAgents: { access: "user", action: "agents.listMyAgents" },
  getMyAgent: { access: "user", action: "agents.getMyAgent" },
  setAgentConfig: { access: "user", action: "agents.setAgentConfig" },
  deleteMyAgent: { access: "user", action: "agents.deleteMyAgent" },
  regenerateAgentToken: { access: "user", action: "agents.regenerateAgentToken" },
  regenerateAgentSecretKey: { access: "user", action: "agents.regenerateAgentSecretKey" },
  setAgentMiniApp: { access: "user", action: "agents.setAgentMiniApp" },
  updateAgentSelfConfig: { access: "agent", action: "agents.updateAgentSelfConfig" },
};

export const agentProcedures = (broker: ServiceBroker) => forwardingProcedures(broker, AgentService, agentRoutes);
