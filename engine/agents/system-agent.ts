// The built-in system agent: a PUBLIC agent that exists on every install (created at the first
// start, under a reserved user id) and answers administrative slash commands that users send it
// in their PRIVATE conversation with it:
//   /setwebhook <agent_username> <https_url>   configures the webhook of one of the sender's agents
//                                              exactly as SetAgentConfig does, and answers the new
//                                              secret key (or why nothing changed)
//   /help, /start, anything else               answers the list of commands
// The conversation actor tells it about such messages with an event after the send completed,
// so the sender never waits for the answer (which may wait up to 5 s for a webhook test).
import { create } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import { MessageType } from "../../shared/gen/shared/v1/message_pb.js";
import { SendMessageRequestSchema } from "../../shared/gen/api/v1/message_pb.js";
import type { Caller } from "../../shared/caller.js";
import { parleyErrorParts } from "../../shared/errors.js";
import { toWire } from "../../shared/wire.js";
import { TokenPrefix, newToken } from "../auth/credentials.js";
import type { EngineDeps } from "../deps.js";
import { AccountType, AgentStatus, AgentVisibility, DeliveryMode, noMiniApp, type Store } from "../../ports/store/store.js";
import { callEngine } from "../engine-actions.js";

/** Reserved below the first ordinary user id (10001), so it is the same on every install. */
export const systemAgentUserId = 10000;
export const systemAgentUsername = "parley_system";

export const SystemAgentEvents = {
  /** A user's TEXT message in their PRIVATE conversation with the system agent (SystemAgentMessage). */
  message: "parley.system-agent.message",
} as const;

export interface SystemAgentMessage {
  conversationId: string;
  messageId: string;
  senderId: number;
  text: string;
}

const commands = [
  { command: "setwebhook", description: "Point one of your agents at a webhook: /setwebhook <agent_username> <https_url>" },
  { command: "help", description: "List the commands" },
];

const helpText = [
  "I am the Parley system agent. Commands:",
  "/setwebhook <agent_username> <https_url> - deliver one of your agents' events to an HTTPS webhook. I send it a signed test request first, then answer the agent's new secret key.",
  "/help - this list",
].join("\n");

/** Tells the system agent about a message addressed to it; the sender does not wait for the answer. */
export function tellSystemAgent(ctx: Pick<Context, "emit">, message: SystemAgentMessage): void {
  // The handler logs its own failures; a failed emit only means no answer is sent.
  void Promise.resolve(ctx.emit(SystemAgentEvents.message, message)).catch(() => undefined);
}

/** Creates the system agent unless it exists; safe to run on every start and on several nodes. */
export async function ensureSystemAgent(store: Store, now: number): Promise<void> {
  if (await store.agents.getAgent(systemAgentUserId)) return;
  // An install that let a person take the name before this agent existed keeps that person's name.
  const taken = await store.users.findByUsername(systemAgentUsername);
  const username = taken ? `${systemAgentUsername}_${systemAgentUserId}` : systemAgentUsername;
  try {
    await store.agents.createAgent(
      {
        userId: systemAgentUserId,
        accountType: AccountType.agent,
        username,
        nickname: "Parley",
        signature: "The platform's own agent. Send /setwebhook <agent_username> <https_url> to give one of your agents a webhook.",
        createdAt: now,
      },
      {
        creatorId: 0,
        status: AgentStatus.active,
        visibility: AgentVisibility.public,
        isSystem: true,
        // It never signs in: no token hashes to a value outside the hex alphabet.
        tokenHash: `unusable:${newToken("")}`,
        tokenPrefix: "",
        secretKey: newToken(TokenPrefix.secretKey),
        deliveryMode: DeliveryMode.websocket,
        webhookUrl: "",
        ipWhitelist: [],
        commands,
        miniApp: { ...noMiniApp },
        createdAt: now,
        updatedAt: now,
      },
    );
  } catch (err) {
    // Another engine node claimed the account first; on Cassandra its agent row follows the
    // account's conditional insert by one more write, so it may not be readable yet.
    for (let waited = 0; waited <= otherNodeCreationWaitMs; waited += otherNodeCreationPollMs) {
      if (await store.agents.getAgent(systemAgentUserId)) return;
      await new Promise((resolve) => setTimeout(resolve, otherNodeCreationPollMs));
    }
    throw new Error(`the system agent's account ${systemAgentUserId} exists without its agent record`, { cause: err });
  }
}

const otherNodeCreationWaitMs = 10_000;
const otherNodeCreationPollMs = 100;

export function systemAgentService(deps: EngineDeps): ServiceSchema {
  const { store } = deps;
  const asSystemAgent: Caller = { kind: "agent", userId: systemAgentUserId, deviceId: "" };

  async function setWebhook(ctx: Context, senderId: number, args: string[]): Promise<string> {
    if (args.length !== 2) return "Usage: /setwebhook <agent_username> <https_url>";
    const username = args[0].replace(/^@/, "").toLowerCase();
    const url = args[1];
    const user = await store.users.findByUsername(username);
    const agent = user?.accountType === AccountType.agent ? await store.agents.getAgent(user.userId) : undefined;
    // Someone else's agent gets the same answer as a missing one: nothing about it is disclosed.
    if (!agent || agent.status !== AgentStatus.active || agent.creatorId !== senderId) {
      return `You have no agent @${username}. /setwebhook works only for agents you created.`;
    }
    try {
      const { secretKey } = await callEngine(ctx, "agents.configureWebhook", { agentUserId: agent.agentUserId, url });
      return [
        `The webhook of @${username} is now ${url} (delivery mode WEBHOOK).`,
        `New secret key: ${secretKey}`,
        "It signs every webhook request from now on; the previous key no longer does.",
      ].join("\n");
    } catch (err) {
      const parts = parleyErrorParts(err);
      if (!parts) throw err;
      return `The webhook of @${username} was not changed: ${parts.message}`;
    }
  }

  async function answer(ctx: Context, message: SystemAgentMessage): Promise<string> {
    const [command = "", ...args] = message.text.trim().split(/\s+/);
    switch (command.toLowerCase()) {
      case "/setwebhook":
        return setWebhook(ctx, message.senderId, args);
      default:
        return helpText;
    }
  }

  return {
    name: "systemAgent",
    async started() {
      await ensureSystemAgent(store, deps.clock.now());
    },
    events: {
      [SystemAgentEvents.message]: {
        async handler(ctx: Context<SystemAgentMessage>) {
          const message = ctx.params;
          try {
            const text = await answer(ctx, message);
            const request = create(SendMessageRequestSchema, {
              // One answer per message, even if the event arrives twice.
              clientMessageId: BigInt(message.messageId),
              conversationId: BigInt(message.conversationId),
              body: { type: MessageType.TEXT, content: { case: "text", value: { text } } },
              replyToMessageId: BigInt(message.messageId),
            });
            await callEngine(ctx, "messages.sendMessage", { caller: asSystemAgent, request: toWire(SendMessageRequestSchema, request) });
          } catch (err) {
            this.logger.error(`the system agent could not answer message ${message.messageId} in ${message.conversationId}`, err);
          }
        },
      },
    },
  };
}
