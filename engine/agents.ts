// Agents: programmatic accounts created by a user (the developer). An agent is a user record of
// account type AGENT plus an agent record holding its credentials and delivery settings.
import { create } from "@bufbuild/protobuf";
import type { ServiceSchema } from "moleculer";
import {
  AgentInfoSchema,
  AgentProfileSchema,
  CreateAgentRequestSchema,
  CreateAgentResponseSchema,
  GetAgentInfoRequestSchema,
  GetAgentInfoResponseSchema,
  GetMyAgentRequestSchema,
  GetMyAgentResponseSchema,
  ListMyAgentsRequestSchema,
  ListMyAgentsResponseSchema,
  type AgentInfo,
  type AgentProfile,
} from "../shared/gen/api/v1/agent_pb.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { TokenPrefix, hashToken, newToken } from "./credentials.js";
import type { EngineDeps } from "./deps.js";
import { requireCaller, requireUser, rpcAction } from "./rpc-action.js";
import { AgentStatus, AgentVisibility, ConversationKind, DeliveryMode, type AgentRecord, type UserRecord } from "./store/store.js";
import { appendToStream } from "./inbox.js";
import { usernameProblem } from "./users.js";
import { userInfoView } from "./views.js";

/** How much of a token or key profile views show, enough to tell two apart. */
const visiblePrefixLength = 12;

export function agentProfileView(agent: AgentRecord, user: UserRecord): AgentProfile {
  return create(AgentProfileSchema, {
    user: userInfoView(user),
    status: agent.status,
    visibility: agent.visibility,
    isSystemAgent: agent.isSystem,
    deliveryMode: agent.deliveryMode,
    tokenPrefix: agent.tokenPrefix,
    secretKeyPrefix: agent.secretKey.slice(0, visiblePrefixLength),
    ipWhitelist: agent.ipWhitelist,
    commands: agent.commands,
    createdAt: BigInt(agent.createdAt),
    updatedAt: BigInt(agent.updatedAt),
  });
}

export function agentInfoView(agent: AgentRecord, user: UserRecord, creator: UserRecord | undefined): AgentInfo {
  return create(AgentInfoSchema, {
    user: userInfoView(user),
    creator: creator && userInfoView(creator),
    status: agent.status,
    visibility: agent.visibility,
    isSystemAgent: agent.isSystem,
    commands: agent.commands,
    createdAt: BigInt(agent.createdAt),
  });
}

export function agentsService(deps: EngineDeps): ServiceSchema {
  const { store, clock } = deps;

  async function ownedAgent(creatorId: number, agentUserId: number): Promise<{ agent: AgentRecord; user: UserRecord }> {
    const agent = await store.agents.getAgent(agentUserId);
    const user = agent && (await store.users.getUser(agentUserId));
    if (!agent || !user || agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotFound);
    if (agent.creatorId !== creatorId) throw new ParleyError(Errors.notAgentCreator);
    return { agent, user };
  }

  return {
    name: "agents",
    actions: {
      createAgent: rpcAction(CreateAgentRequestSchema, CreateAgentResponseSchema, async ({ request, caller, ctx }) => {
        const creator = requireUser(caller);
        const problem = usernameProblem(request.username);
        if (problem) throw new ParleyError(Errors.invalidUsername, {}, problem);
        if (request.name.trim().length === 0) throw new ParleyError(Errors.invalidArgument, { field: "name" }, "name cannot be blank");
        if (await store.users.findByUsername(request.username)) throw new ParleyError(Errors.usernameTaken);
        const token = newToken(TokenPrefix.agent);
        const secretKey = newToken(TokenPrefix.secretKey);
        const now = clock.now();
        let created: { user: UserRecord; agent: AgentRecord };
        try {
          created = await store.agents.createAgent(
            { accountType: 2, username: request.username, nickname: request.name, signature: request.signature, createdAt: now },
            {
              creatorId: creator.userId,
              status: AgentStatus.active,
              visibility: AgentVisibility.private,
              isSystem: false,
              tokenHash: hashToken(token),
              tokenPrefix: token.slice(0, visiblePrefixLength),
              secretKey,
              deliveryMode: DeliveryMode.websocket,
              webhookUrl: "",
              ipWhitelist: [],
              commands: [],
              miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
              createdAt: now,
              updatedAt: now,
            },
          );
        } catch (err) {
          // Another request took the username between the check and the insert.
          if ((err as { code?: string }).code === "SQLITE_CONSTRAINT_UNIQUE") throw new ParleyError(Errors.usernameTaken);
          throw err;
        }
        const { user, agent } = created;
        await store.social.addContact(creator.userId, user.userId, now);
        await store.social.addContact(user.userId, creator.userId, now);
        await store.conversations.ensureConversation(privateConversationId(creator.userId, user.userId), ConversationKind.private, [creator.userId, user.userId], now);
        await appendToStream(ctx, creator.userId, [{ case: "contactAdded", value: { $typeName: "api.v1.ContactAddedEvent", peerUserId: user.userId } }], [userInfoView(user)]);
        return { profile: agentProfileView(agent, user), token, secretKey };
      }),
      listMyAgents: rpcAction(ListMyAgentsRequestSchema, ListMyAgentsResponseSchema, async ({ caller }) => {
        const creator = requireUser(caller);
        const agents = (await store.agents.listByCreator(creator.userId)).filter((a) => a.status === AgentStatus.active);
        const users = new Map((await store.users.getUsers(agents.map((a) => a.agentUserId))).map((u) => [u.userId, u]));
        return { agents: agents.map((agent) => agentProfileView(agent, users.get(agent.agentUserId)!)) };
      }),
      getMyAgent: rpcAction(GetMyAgentRequestSchema, GetMyAgentResponseSchema, async ({ request, caller }) => {
        const { agent, user } = await ownedAgent(requireUser(caller).userId, request.agentUserId);
        return { profile: agentProfileView(agent, user) };
      }),
      getAgentInfo: rpcAction(GetAgentInfoRequestSchema, GetAgentInfoResponseSchema, async ({ request, caller }) => {
        requireCaller(caller);
        const agent = await store.agents.getAgent(request.agentUserId);
        const user = agent && (await store.users.getUser(agent.agentUserId));
        if (!agent || !user || agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotFound);
        return { agent: agentInfoView(agent, user, await store.users.getUser(agent.creatorId)) };
      }),
    },
  };
}
