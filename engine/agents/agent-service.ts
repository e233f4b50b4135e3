// Agents: programmatic accounts created by a user (the developer). An agent is a user record of
// account type AGENT plus an agent record holding its credentials and delivery settings.
//
// A change of one agent's record is written on a condition the store checks with the write, across
// every engine process: a configuration change on the version it read and checked (a webhook
// configuration waits up to 5 s for the test request meanwhile), so a change made elsewhere in
// between makes it re-read and re-check rather than be overwritten or interleaved; the other
// changes on the agent still being active, so of two deletions exactly one writes and announces.
// Every change is broadcast (BusEvents.agentChanged) so views cached elsewhere reload the record.
import { create, toJsonString } from "@bufbuild/protobuf";
import moleculer, { type Context, type ServiceSchema } from "moleculer";
import {
  AgentInfoSchema,
  AgentProfileSchema,
  AgentStatus as AgentStatusEnum,
  type AgentCommandInfo,
  type AgentInfo,
  type AgentProfile,
} from "../../shared/gen/shared/v1/agent_pb.js";
import {
  CreateAgentRequestSchema,
  CreateAgentResponseSchema,
  DeleteMyAgentRequestSchema,
  DeleteMyAgentResponseSchema,
  GetAgentInfoRequestSchema,
  GetAgentInfoResponseSchema,
  GetMiniAppLaunchDataRequestSchema,
  GetMiniAppLaunchDataResponseSchema,
  GetMyAgentRequestSchema,
  GetMyAgentResponseSchema,
  ListFeaturedAgentsRequestSchema,
  ListFeaturedAgentsResponseSchema,
  ListMyAgentsRequestSchema,
  ListMyAgentsResponseSchema,
  RegenerateAgentSecretKeyRequestSchema,
  RegenerateAgentSecretKeyResponseSchema,
  RegenerateAgentTokenRequestSchema,
  RegenerateAgentTokenResponseSchema,
  SetAgentConfigRequestSchema,
  SetAgentConfigResponseSchema,
  SetAgentMiniAppRequestSchema,
  SetAgentMiniAppResponseSchema,
  UpdateAgentSelfConfigRequestSchema,
  UpdateAgentSelfConfigResponseSchema,
} from "../../shared/gen/api/v1/agent_pb.js";
import { UserInfoSchema } from "../../shared/gen/shared/v1/common_pb.js";
import { BusEvents, type AgentChangedEvent, type AgentTokenRevokedEvent, type AgentWhitelistChangedEvent } from "../../shared/bus.js";
import type { Caller } from "../../shared/caller.js";
import { Errors, ParleyError, parleyErrorParts } from "../../shared/errors.js";
import { backgroundFailed, retryInBackground, type BackgroundRetry } from "../../shared/background.js";
import { privateConversationId } from "../../shared/ids.js";
import { httpsUrlProblem } from "../../shared/https-url.js";
import { invalidAddressRule } from "../../shared/ip.js";
import { TokenPrefix, hashToken, newToken } from "../auth/credentials.js";
import type { EngineDeps } from "../deps.js";
import { accountScope, type EventBatch } from "../delivery/fan-out.js";
import { forgetIdentities } from "../auth/identity-revocation.js";
import { Mailboxes } from "../../shared/mailbox.js";
import { requireParticipant, tellConversationActors } from "../membership.js";
import { MiniAppPermission, allMiniAppPermissions, signInitData } from "./mini-app.js";
import { requireCaller, requireUser, rpcAction } from "../rpc-action.js";
import { AgentChangeRefused, AgentStatus, AgentVisibility, DeliveryMode, noMiniApp, type AgentChange, type AgentRecord, type EventsOf, type UserRecord } from "../../ports/store/store.js";
import { usernameProblem } from "../users/user-service.js";
import { userInfoView } from "../views.js";
import { callEngine, type ConfigureWebhookParams, type EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

/** How much of a token or key profile views show, enough to tell two apart. */
const visiblePrefixLength = 12;

export const AgentPolicy = {
  featuredDefault: 20,
  maxAllowedOrigins: 50,
  maxStartParamLength: 512,
  /** Tries at finishing a deletion (leaving groups, telling contacts), 2, 4, 8… seconds apart. */
  deletionAttempts: 5,
  /**
   * Reads, checks and conditional writes of one configuration change before it answers UNAVAILABLE:
   * each retry follows a change another node wrote meanwhile, so more than a few means the agent is
   * being reconfigured from several places at once.
   */
  configWriteAttempts: 4,
} as const;

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
    miniAppEnabled: agent.miniApp.enabled,
    miniAppUrl: agent.miniApp.url,
    miniAppAllowedOrigins: agent.miniApp.allowedOrigins,
    miniAppPermissions: agent.miniApp.permissions,
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
    miniAppEnabled: agent.miniApp.enabled,
    miniAppUrl: agent.miniApp.url,
    miniAppPermissions: agent.miniApp.permissions,
    createdAt: BigInt(agent.createdAt),
  });
}

/** The fields of SetAgentConfig and UpdateAgentSelfConfig; absent ones keep their values. */
export interface AgentConfigChange {
  visibility?: number;
  ipWhitelist?: string[];
  commands?: AgentCommandInfo[];
  deliveryMode?: number;
  webhookUrl?: string;
}

const loopbackHosts = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** Whether the text is exactly an origin: https://host[:port], or http:// for a loopback host during development. */
function isOrigin(raw: string): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  const schemeAllowed = url.protocol === "https:" || (url.protocol === "http:" && loopbackHosts.has(url.hostname));
  return schemeAllowed && url.origin === raw;
}

export function agentsService(deps: EngineDeps): ServiceSchema {
  const { store, clock } = deps;
  // Correctness comes from the store's condition; the mailbox only queues this process's own changes
  // of one agent behind each other, so they do not refuse each other's writes and repeat the work
  // (a webhook test request) that a conditional write throws away when refused.
  const mailboxes = new Mailboxes();

  async function ownedAgent(creatorId: number, agentUserId: number): Promise<{ agent: AgentRecord; user: UserRecord }> {
    const agent = await store.agents.getAgent(agentUserId);
    const user = agent && (await store.users.getUser(agentUserId));
    if (!agent || !user || agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotFound);
    if (agent.creatorId !== creatorId) throw new ParleyError(Errors.notAgentCreator);
    return { agent, user };
  }

  function announceChange(ctx: Context, agentUserId: number, tokenRevoked = false): void {
    if (tokenRevoked) void ctx.broadcast(BusEvents.agentTokenRevoked, { agentUserId } satisfies AgentTokenRevokedEvent);
    void ctx.broadcast(BusEvents.agentChanged, { agentUserId } satisfies AgentChangedEvent);
  }

  /**
   * Writes the change while the agent is still active, whatever else changed meanwhile (the fields
   * it sets do not depend on the others). A deletion that got in first answers what ownedAgent
   * answers for a deleted agent; the change and its events are then not written.
   */
  async function writeWhileActive(agentUserId: number, change: AgentChange, events?: EventsOf<AgentRecord>): Promise<AgentRecord> {
    try {
      return await store.agents.updateAgent(agentUserId, { ...change, updatedAt: clock.now() }, events, { ifStatus: AgentStatus.active });
    } catch (err) {
      if (err instanceof AgentChangeRefused) throw new ParleyError(Errors.agentNotFound);
      throw err;
    }
  }

  /** Writes a change of the agent's record while it is active, in its mailbox, and announces it. */
  async function updateAgent(ctx: Context, agentUserId: number, change: AgentChange, tokenRevoked = false): Promise<AgentRecord> {
    const saved = await mailboxes.run(agentUserId, () => writeWhileActive(agentUserId, change));
    if (tokenRevoked) await forgetIdentities(ctx.broker, { userId: agentUserId });
    announceChange(ctx, agentUserId, tokenRevoked);
    return saved;
  }

  /**
   * Validates and applies a configuration change. A webhook configuration (WEBHOOK mode with a
   * new mode or URL given) is accepted only once the URL answered a test request signed with the
   * agent's current secret key: the key its receiver verifies with until it hears of another, so
   * an agent can point its own verifying handler at itself. `issuesNewKey` (the owner's calls:
   * SetAgentConfig, /setwebhook) replaces the key once the change is written, and every request
   * sent after that is signed with the new one; the agent's own call (UpdateAgentSelfConfig)
   * keeps it, because its answer has no field to carry a new key. On any refusal nothing changes.
   *
   * The change is checked against the record read and written only if the record is still that
   * version. When another node changed it in between, the change is checked again against the new
   * record and applied over it (fields the change does not name keep the other node's values), up to
   * AgentPolicy.configWriteAttempts times; a URL that already passed its test request is not asked
   * again. Past that it answers UNAVAILABLE, retryable, with nothing written.
   */
  async function applyConfig(ctx: Context, agentUserId: number, change: AgentConfigChange, issuesNewKey: boolean): Promise<{ agent: AgentRecord; secretKey: string }> {
    const update: Partial<AgentRecord> = {};
    if (change.visibility !== undefined) {
      if (change.visibility !== AgentVisibility.public && change.visibility !== AgentVisibility.private) {
        throw new ParleyError(Errors.invalidAgentConfig, { field: "visibility" }, "visibility must be PUBLIC or PRIVATE");
      }
      update.visibility = change.visibility;
    }
    if (change.ipWhitelist !== undefined) {
      const entries = change.ipWhitelist.map((entry) => entry.trim());
      const invalid = invalidAddressRule(entries);
      if (invalid !== undefined) throw new ParleyError(Errors.invalidIpWhitelist, { entry: invalid }, `not an IP address or CIDR block: ${JSON.stringify(invalid)}`);
      update.ipWhitelist = [...new Set(entries)];
    }
    if (change.commands !== undefined) {
      const seen = new Set<string>();
      for (const { command } of change.commands) {
        if (seen.has(command)) throw new ParleyError(Errors.invalidAgentConfig, { field: "commands", command }, `the command ${command} is listed twice`);
        seen.add(command);
      }
      update.commands = change.commands.map(({ command, description }) => ({ command, description }));
    }
    if (change.deliveryMode !== undefined && change.deliveryMode !== DeliveryMode.webhook && change.deliveryMode !== DeliveryMode.websocket) {
      throw new ParleyError(Errors.invalidAgentConfig, { field: "delivery_mode" }, "deliveryMode must be WEBHOOK or WEBSOCKET");
    }

    return mailboxes.run(agentUserId, async () => {
      let verifiedUrl: string | undefined;
      let parked = false;
      try {
        for (let attempt = 1; ; attempt++) {
          const agent = await store.agents.getAgent(agentUserId);
          if (!agent) throw new ParleyError(Errors.agentNotFound);
          if (agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotActive);
          const written = await checkedChange(ctx, agent, change, { ...update }, issuesNewKey, verifiedUrl);
          verifiedUrl = written.verifiedUrl;
          if (!parked && agent.deliveryMode !== DeliveryMode.webhook && written.update.deliveryMode === DeliveryMode.webhook) {
            // Before the mode is written: the agent's sockets stop carrying its entries, and what
            // they were sent and the agent confirmed is recorded, so the webhook does not repeat it.
            parked = true;
            const confirmedSn = await deps.live.parkAgentFeeds(agentUserId);
            if (confirmedSn > 0) await store.webhookJobs.advanceDelivered(agentUserId, confirmedSn);
          }
          const saved = await writeConfig(agent, written.update, attempt);
          if (!saved) continue;
          await announceConfig(ctx, agent, saved, written.update);
          // The inbox's switch released the parked feeds (sync.deliveryModeChanged).
          parked = false;
          return { agent: saved, secretKey: written.secretKey };
        }
      } catch (err) {
        // No switch was made, or it was not carried out: the sockets go on from what they were
        // sent, and a read of the agent's mode tells them if the webhook has their entries now.
        if (parked) void deps.live.releaseAgentFeeds(agentUserId, { toWebhook: false });
        throw err;
      }
    });
  }

  /**
   * Writes the change over `agent` if the record is still that version; answers undefined when
   * another node changed it in between (the caller checks the change again).
   */
  async function writeConfig(agent: AgentRecord, update: Partial<AgentRecord>, attempt: number): Promise<AgentRecord | undefined> {
    try {
      return await store.agents.updateAgent(agent.agentUserId, { ...update, updatedAt: clock.now() }, undefined, { ifUpdatedAt: agent.updatedAt });
    } catch (err) {
      if (!(err instanceof AgentChangeRefused)) throw err;
      if (err.current?.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotActive);
      if (attempt >= AgentPolicy.configWriteAttempts) {
        throw new ParleyError(
          Errors.unavailable,
          { reason: "agent_changed_concurrently", agentUserId: String(agent.agentUserId), attempts: String(attempt) },
          "the agent's configuration kept changing while this change was applied; try again",
        );
      }
      return undefined;
    }
  }

  /**
   * The record fields a configuration change writes over `agent`, checked against it: `update`
   * holds what needs no record (validated already); a webhook URL is tested here unless it is the
   * one `verifiedUrl` already passed (a retry over a newer record). `secretKey` is the new key when
   * the change issues one, empty otherwise.
   */
  async function checkedChange(
    ctx: Context,
    agent: AgentRecord,
    change: AgentConfigChange,
    update: Partial<AgentRecord>,
    issuesNewKey: boolean,
    verifiedUrl: string | undefined,
  ): Promise<{ update: Partial<AgentRecord>; secretKey: string; verifiedUrl: string | undefined }> {
    const mode = change.deliveryMode ?? agent.deliveryMode;
    if (mode === DeliveryMode.webhook && (change.deliveryMode !== undefined || change.webhookUrl !== undefined)) {
      const url = change.webhookUrl ?? agent.webhookUrl;
      if (!url) throw new ParleyError(Errors.webhookUrlRequired, { field: "webhook_url" });
      if (verifiedUrl !== url) {
        const check = await callEngine(ctx, "webhooks.verifyEndpoint", { url, secretKey: agent.secretKey });
        if (!check.ok) {
          const reason = check.reason ?? "the test request failed";
          throw new ParleyError(check.invalidUrl ? Errors.invalidWebhookUrl : Errors.webhookUnreachable, { reason, url }, check.invalidUrl ? reason : `the webhook URL failed the test request: ${reason}`);
        }
        verifiedUrl = url;
      }
      Object.assign(update, { deliveryMode: DeliveryMode.webhook, webhookUrl: url });
    } else if (mode === DeliveryMode.websocket) {
      if (change.webhookUrl) throw new ParleyError(Errors.invalidAgentConfig, { field: "webhook_url" }, "a webhook URL needs deliveryMode WEBHOOK");
      if (change.deliveryMode !== undefined) Object.assign(update, { deliveryMode: DeliveryMode.websocket, webhookUrl: "" });
    }
    const secretKey = issuesNewKey ? newToken(TokenPrefix.secretKey) : "";
    if (secretKey) update.secretKey = secretKey;
    return { update, secretKey, verifiedUrl };
  }

  /** What follows a configuration change written over `before`: caches forgotten, the change announced, delivery switched. */
  async function announceConfig(ctx: Context, before: AgentRecord, saved: AgentRecord, update: Partial<AgentRecord>): Promise<void> {
    const agentUserId = saved.agentUserId;
    const whitelistChanged = update.ipWhitelist !== undefined && update.ipWhitelist.join("\n") !== before.ipWhitelist.join("\n");
    // Identities cached with the old list are forgotten before anyone hears of the new one.
    if (whitelistChanged) await forgetIdentities(ctx.broker, { userId: agentUserId });
    announceChange(ctx, agentUserId);
    // The switch takes effect in the agent's inbox (queue handed over or taken back) before the
    // caller hears of it; see event-routing.ts.
    if (update.deliveryMode !== undefined || update.webhookUrl !== undefined) {
      await callEngine(ctx, "sync.deliveryModeChanged", { userId: agentUserId });
    }
    if (whitelistChanged) {
      void ctx.broadcast(BusEvents.agentWhitelistChanged, { agentUserId, ipWhitelist: saved.ipWhitelist } satisfies AgentWhitelistChangedEvent);
    }
  }

  /** Takes the agent out of every group it is in, each group telling its members the agent left. */
  async function leaveAllGroups(ctx: Context, agentUserId: number): Promise<void> {
    const asAgent: Caller = { kind: "agent", userId: agentUserId, deviceId: "" };
    for (const groupId of await store.groups.groupIdsOf(agentUserId)) {
      try {
        await callEngine(ctx, "groups.leaveGroup", { caller: asAgent, request: { groupId } });
      } catch (err) {
        // A group dissolved or left meanwhile has nothing left to undo.
        const name = parleyErrorParts(err)?.entry.errorName;
        if (name !== Errors.groupDissolved.errorName && name !== Errors.memberNotFound.errorName && name !== Errors.groupNotFound.errorName) throw err;
      }
    }
  }

  let stopping = false;
  /** Pending retries of completeDeletion, cancelled when the service stops. */
  const retries = new Set<NodeJS.Timeout>();
  /** Finishing, at start, the deletions a crash cut short. */
  let cutShortDeletions: BackgroundRetry | undefined;

  /**
   * What follows a deletion: the agent leaves its groups, then everyone who added it is told (the
   * event was recorded with the deletion, so it reaches them even if this never completes: the
   * sweep or the next start delivers it). A failure (a busy stream, a store error) is retried in
   * the background with growing pauses, so the caller's answer does not depend on it. Leaving is
   * naturally resumable: only the groups the agent is still in are left.
   */
  async function completeDeletion(ctx: Context, agentUserId: number, told: EventBatch, attempt = 1): Promise<void> {
    const steps = async () => {
      await leaveAllGroups(ctx, agentUserId);
      await told.deliver(ctx);
    };
    try {
      await steps();
    } catch (err) {
      backgroundFailed("agent_deletion", err, ctx.broker.logger, `agent ${agentUserId}: finishing the deletion (attempt ${attempt})`);
      if (attempt >= AgentPolicy.deletionAttempts) {
        ctx.broker.logger.error(`agent ${agentUserId}: deletion left unfinished after ${attempt} attempts`, err);
        return;
      }
      // Stopping abandons the retry: the next start makes the agent leave its groups (started()).
      if (stopping) return;
      const retry = setTimeout(() => {
        retries.delete(retry);
        void completeDeletion(ctx, agentUserId, told, attempt + 1);
      }, 1000 * 2 ** attempt);
      retry.unref();
      retries.add(retry);
    }
  }

  /** Whether the user may see and launch the agent: it is public, theirs, or already their contact. */
  async function hasAccess(userId: number, agent: AgentRecord): Promise<boolean> {
    if (agent.visibility === AgentVisibility.public || agent.creatorId === userId) return true;
    return (await store.contacts.getContact(userId, agent.agentUserId)) !== undefined;
  }

  /** PERMISSION_DENIED unless the conversation is the user's PRIVATE one with the agent or a group both are in. */
  async function requireLaunchConversation(userId: number, agentUserId: number, conversationId: bigint): Promise<void> {
    const access = await requireParticipant(store, conversationId, userId).catch(() => undefined);
    if (!access?.participants.includes(agentUserId)) throw new ParleyError(Errors.launchConversationMismatch, { conversationId: String(conversationId) });
  }

  return {
    name: "agents",
    started() {
      // A deletion cut short by a crash left the agent in groups: finish that part once the
      // services it goes through are up. (Whether its contacts were told cannot be known; they see
      // the agent's status on their next read.)
      const broker = this.broker;
      stopping = false;
      // Tried again with growing pauses until every such agent left its groups.
      const finish = async () => {
        await broker.waitForServices(["groups", "messages", "sync"], 30_000);
        if (stopping) return;
        const ctx = moleculer.Context.create(broker);
        let failure: unknown;
        for (const agentUserId of await store.agents.listDeletedInGroups(1000)) {
          if (stopping) return;
          await leaveAllGroups(ctx, agentUserId).catch((err: unknown) => (failure = err));
        }
        if (failure !== undefined && !stopping) throw failure;
      };
      cutShortDeletions = retryInBackground("agent_deletion", finish, broker.logger, "finishing cut-short agent deletions");
    },
    stopped() {
      stopping = true;
      // Not awaited: a try under way may wait for services that are stopping; it sees `stopping`.
      void cutShortDeletions?.stop();
      for (const retry of retries) clearTimeout(retry);
      retries.clear();
    },
    actions: {
      createAgent: rpcAction(CreateAgentRequestSchema, CreateAgentResponseSchema, async ({ request, caller, ctx }) => {
        const creator = requireUser(caller);
        const problem = usernameProblem(request.username);
        if (problem) throw new ParleyError(Errors.invalidUsername, {}, problem);
        if (request.name.trim().length === 0) throw new ParleyError(Errors.invalidArgument, { field: "name" }, "name cannot be blank");
        if (await store.users.findByUsername(request.username)) throw new ParleyError(Errors.agentUsernameTaken);
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
              miniApp: { ...noMiniApp },
              createdAt: now,
              updatedAt: now,
            },
          );
        } catch (err) {
          // Another request took the username between the check and the insert.
          if ((err as { code?: string }).code === "SQLITE_CONSTRAINT_UNIQUE") throw new ParleyError(Errors.agentUsernameTaken);
          throw err;
        }
        const { user, agent } = created;
        const events = await deps.fanOuts.batch();
        await store.contacts.connect(creator.userId, user.userId, privateConversationId(creator.userId, user.userId), now, () => [
          events.add(accountScope(creator.userId), [creator.userId], { case: "contactAdded", value: { $typeName: "shared.v1.ContactAddedEvent", peerUserId: user.userId } }, [userInfoView(user)]),
        ]);
        await events.deliver(ctx);
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
      listFeaturedAgents: rpcAction(ListFeaturedAgentsRequestSchema, ListFeaturedAgentsResponseSchema, async ({ request, caller }) => {
        requireCaller(caller);
        const agents = await store.agents.sampleFeatured(request.limit || AgentPolicy.featuredDefault);
        const users = new Map((await store.users.getUsers([...new Set(agents.flatMap((a) => [a.agentUserId, a.creatorId]))])).map((u) => [u.userId, u]));
        return {
          agents: agents.filter((a) => users.has(a.agentUserId)).map((a) => agentInfoView(a, users.get(a.agentUserId)!, users.get(a.creatorId))),
        };
      }),
      setAgentConfig: rpcAction(SetAgentConfigRequestSchema, SetAgentConfigResponseSchema, async ({ request, caller, ctx }) => {
        const { user } = await ownedAgent(requireUser(caller).userId, request.agentUserId);
        const { agent, secretKey } = await applyConfig(
          ctx,
          request.agentUserId,
          {
            visibility: request.visibility,
            // A repeated field has no presence: the list given (possibly empty) is the new list.
            ipWhitelist: request.ipWhitelist,
            commands: request.commands?.items,
            deliveryMode: request.deliveryMode,
            webhookUrl: request.webhookUrl,
          },
          true,
        );
        return { secretKey, profile: agentProfileView(agent, user) };
      }),
      updateAgentSelfConfig: rpcAction(UpdateAgentSelfConfigRequestSchema, UpdateAgentSelfConfigResponseSchema, async ({ request, caller, ctx }) => {
        if (!caller || caller.kind !== "agent") throw new ParleyError(Errors.agentOnly);
        // applyConfig answers NOT_FOUND or FAILED_PRECONDITION (not active) from inside the agent's mailbox.
        await applyConfig(ctx, caller.userId, { commands: request.commands?.items, deliveryMode: request.deliveryMode, webhookUrl: request.webhookUrl }, false);
        return {};
      }),
      deleteMyAgent: rpcAction(DeleteMyAgentRequestSchema, DeleteMyAgentResponseSchema, async ({ request, caller, ctx }) => {
        const creatorId = requireUser(caller).userId;
        const { agent, user } = await ownedAgent(creatorId, request.agentUserId);
        // Written only while the agent is still active, checked by the store with the write, so of
        // two deletes at once (on any nodes) exactly one writes, records the contacts' event and goes
        // on to announce it; the other answers as for an agent deleted before. The status is what
        // authentication checks: from this write on, every call made with the token answers AGENT_NOT_ACTIVE.
        const told = await deps.fanOuts.batch();
        const agentUserId = agent.agentUserId;
        const contactOwners = await store.contacts.listContactOwners(agentUserId);
        const statusChanged = { case: "agentStatusChanged", value: { $typeName: "shared.v1.AgentStatusChangedEvent", agentUserId, newStatus: AgentStatusEnum.DELETED } } as const;
        await mailboxes.run(agentUserId, () =>
          writeWhileActive(agentUserId, { status: AgentStatus.deleted }, () => [told.add(accountScope(agentUserId), contactOwners, statusChanged, [userInfoView(user)])]),
        );
        await forgetIdentities(ctx.broker, { userId: agentUserId });
        // Its conversations turn read-only on the very next message (actors hold its status).
        await tellConversationActors(ctx, { userIds: [agentUserId] });
        announceChange(ctx, agentUserId, true);
        // The deletion stands once written; what follows from it is retried until it is done.
        await completeDeletion(ctx, agentUserId, told);
        return {};
      }),
      regenerateAgentToken: rpcAction(RegenerateAgentTokenRequestSchema, RegenerateAgentTokenResponseSchema, async ({ request, caller, ctx }) => {
        const { agent } = await ownedAgent(requireUser(caller).userId, request.agentUserId);
        const token = newToken(TokenPrefix.agent);
        await updateAgent(ctx, agent.agentUserId, { tokenHash: hashToken(token), tokenPrefix: token.slice(0, visiblePrefixLength) }, true);
        return { token };
      }),
      regenerateAgentSecretKey: rpcAction(RegenerateAgentSecretKeyRequestSchema, RegenerateAgentSecretKeyResponseSchema, async ({ request, caller, ctx }) => {
        const { agent } = await ownedAgent(requireUser(caller).userId, request.agentUserId);
        const secretKey = newToken(TokenPrefix.secretKey);
        await updateAgent(ctx, agent.agentUserId, { secretKey });
        return { secretKey };
      }),
      setAgentMiniApp: rpcAction(SetAgentMiniAppRequestSchema, SetAgentMiniAppResponseSchema, async ({ request, caller, ctx }) => {
        const { agent } = await ownedAgent(requireUser(caller).userId, request.agentUserId);
        // A disabled Mini App may keep no URL; any URL given must be valid either way.
        if (request.enabled || request.url !== "") {
          const problem = httpsUrlProblem(request.url, "Mini App URL");
          if (problem) throw new ParleyError(Errors.invalidMiniAppUrl, { field: "url" }, problem);
        }
        if (request.allowedOrigins.length > AgentPolicy.maxAllowedOrigins) {
          throw new ParleyError(Errors.invalidMiniAppOrigin, { max: String(AgentPolicy.maxAllowedOrigins) }, `at most ${AgentPolicy.maxAllowedOrigins} allowed origins`);
        }
        const badOrigin = request.allowedOrigins.find((origin) => !isOrigin(origin));
        if (badOrigin !== undefined) throw new ParleyError(Errors.invalidMiniAppOrigin, { origin: badOrigin });
        if (request.permissions < 0 || (request.permissions & ~allMiniAppPermissions) !== 0) {
          throw new ParleyError(Errors.invalidMiniAppPermissions, { permissions: String(request.permissions), defined: String(allMiniAppPermissions) });
        }
        await updateAgent(ctx, agent.agentUserId, {
          miniApp: { enabled: request.enabled, url: request.url, allowedOrigins: [...new Set(request.allowedOrigins)], permissions: request.permissions },
        });
        return {};
      }),
      getMiniAppLaunchData: rpcAction(GetMiniAppLaunchDataRequestSchema, GetMiniAppLaunchDataResponseSchema, async ({ request, caller }) => {
        const viewer = requireUser(caller);
        const agent = await store.agents.getAgent(request.agentUserId);
        if (!agent || agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotFound);
        if (!(await hasAccess(viewer.userId, agent))) throw new ParleyError(Errors.noAgentAccess);
        if (!agent.miniApp.enabled) throw new ParleyError(Errors.miniAppNotEnabled);
        if (request.conversationId !== 0n) await requireLaunchConversation(viewer.userId, agent.agentUserId, request.conversationId);
        const platform = request.platform.trim().toLowerCase();
        if (!/^[a-z0-9_-]{0,32}$/.test(platform)) throw new ParleyError(Errors.invalidArgument, { field: "platform" }, "platform is a short name such as ios, android or desktop");
        if (request.startParam.length > AgentPolicy.maxStartParamLength) {
          throw new ParleyError(Errors.invalidArgument, { field: "start_param" }, `startParam has at most ${AgentPolicy.maxStartParamLength} characters`);
        }
        // Control characters (line breaks above all) would make the signed data-check string ambiguous.
        if (/\p{Cc}/u.test(request.startParam)) {
          throw new ParleyError(Errors.invalidArgument, { field: "start_param" }, "startParam cannot contain control characters");
        }
        const user = await store.users.getUser(viewer.userId);
        if (!user) throw new ParleyError(Errors.userNotFound);
        const profile = (agent.miniApp.permissions & MiniAppPermission.readProfile) !== 0 ? userInfoView(user) : create(UserInfoSchema, { userId: user.userId });
        const initData = signInitData(agent.secretKey, {
          agentUserId: agent.agentUserId,
          authDate: Math.floor(clock.now() / 1000),
          conversationId: request.conversationId,
          platform,
          startParam: request.startParam,
          userJson: toJsonString(UserInfoSchema, profile),
        });
        return { initData, miniAppUrl: agent.miniApp.url };
      }),
      /** Internal (no RPC): points an agent's webhook at a URL exactly as SetAgentConfig would. */
      configureWebhook: {
        handler: async (ctx: Context<ConfigureWebhookParams>) => {
          const { secretKey } = await applyConfig(ctx, ctx.params.agentUserId, { deliveryMode: DeliveryMode.webhook, webhookUrl: ctx.params.url }, true);
          return { secretKey };
        },
      },
    } satisfies ActionsOf<EngineActions, "agents">,
  };
}

