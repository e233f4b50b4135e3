// An example Parley agent in webhook mode. It verifies every webhook signature, answers a user's
// text message with a reply streamed word by word, then sends a card with two buttons and answers
// the button the user presses. Run it with `npx tsx examples/webhook-agent/main.ts` (see the
// README for the whole walk-through); tests start it in-process through `startWebhookAgent`.
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { fromJsonString } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AgentDeliveryMode } from "../../shared/gen/shared/v1/agent_pb.js";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { MessageType, StreamPhase, type MessageEnvelope } from "../../shared/gen/shared/v1/message_pb.js";
import { UpdateSchema } from "../../shared/gen/api/v1/updates_pb.js";
import { type CardActionPayload } from "../../shared/gen/shared/v1/updates_pb.js";
import { UserService } from "../../shared/gen/api/v1/user_pb.js";

export interface WebhookAgentOptions {
  /** Base URL of the Parley server, e.g. http://127.0.0.1:8080. */
  serverUrl: string;
  /** The agent token (CreateAgent or RegenerateAgentToken). */
  token: string;
  /** The agent's secret key: the one returned when the webhook was configured. */
  secretKey: string;
  /** TLS certificate and key (PEM) of the agent's HTTPS endpoint: webhooks are HTTPS only. */
  tls: { cert: string | Buffer; key: string | Buffer };
  port?: number;
  host?: string;
  /** Pause between streamed words, so a person can watch the reply being typed. */
  wordDelayMs?: number;
  log?: (line: string) => void;
}

export interface RunningAgent {
  /** The HTTPS URL to configure as the agent's webhook. */
  url: string;
  /** Lets the agent send with a new secret key (after the webhook is reconfigured). */
  setSecretKey(secretKey: string): void;
  close(): Promise<void>;
}

/** Requests older than this are refused, so a captured request cannot be replayed later. */
const maxTimestampAgeSeconds = 5 * 60;

/** The check every agent should make: HMAC-SHA256(secretKey, timestamp + "." + rawBody), constant time. */
export function verifySignature(secretKey: string, timestampHeader: string, signatureHeader: string, rawBody: string, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
  const timestamp = Number(timestampHeader);
  if (!Number.isInteger(timestamp) || Math.abs(nowSeconds - timestamp) > maxTimestampAgeSeconds) return false;
  const expected = Buffer.from("sha256=" + createHmac("sha256", secretKey).update(`${timestampHeader}.${rawBody}`).digest("hex"));
  const received = Buffer.from(signatureHeader);
  return expected.length === received.length && timingSafeEqual(expected, received);
}

/**
 * The timestamp and signature of a request: Parley sends them as X-Service-* and again as
 * X-Nexus-* (the upstream SDKs' names); either set is accepted, taken whole so the two are
 * never mixed.
 */
export function signatureOf(headers: IncomingHttpHeaders): { timestamp: string; signature: string } {
  for (const prefix of ["x-service-", "x-nexus-"]) {
    const timestamp = headers[`${prefix}timestamp`];
    const signature = headers[`${prefix}signature`];
    if (typeof timestamp === "string" && typeof signature === "string") return { timestamp, signature };
  }
  return { timestamp: "", signature: "" };
}

function isEmptyUpdate(rawBody: string): boolean {
  try {
    return fromJsonString(UpdateSchema, rawBody, { ignoreUnknownFields: true }).update.case === undefined;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const card = JSON.stringify({
  type: "AdaptiveCard",
  version: "1.5",
  body: [{ type: "TextBlock", text: "Was this answer helpful?" }],
  actions: [
    { type: "Action.Submit", title: "Yes", data: { helpful: true } },
    { type: "Action.Submit", title: "No", data: { helpful: false } },
  ],
});

function agentTransport(serverUrl: string, token: string) {
  return createConnectTransport({
    baseUrl: serverUrl,
    httpVersion: "1.1",
    interceptors: [
      (next) => (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      },
    ],
  });
}

/**
 * Points the agent's webhook at `webhookUrl` with its own token. The server first checks that the
 * URL answers, then issues a new secret key: the answer carries it, and only it signs from now on.
 */
export async function configureOwnWebhook(serverUrl: string, token: string, webhookUrl: string): Promise<string> {
  const agents = createClient(AgentService, agentTransport(serverUrl, token));
  const { secretKey } = await agents.updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl });
  return secretKey;
}

export async function startWebhookAgent(options: WebhookAgentOptions): Promise<RunningAgent> {
  const log = options.log ?? ((line: string) => console.log(line));
  const wordDelayMs = options.wordDelayMs ?? 120;
  let secretKey = options.secretKey;
  const transport = agentTransport(options.serverUrl, options.token);
  const messages: Client<typeof MessageService> = createClient(MessageService, transport);
  const { profile } = await createClient(UserService, transport).getProfile({});
  const selfId = profile!.userId;
  // Delivery is at-least-once: a retried webhook carries an sn already handled.
  const handledSn = new Set<number>();
  let clientMessageId = BigInt(Date.now()) * 1000n;

  async function replyStreamed(message: MessageEnvelope, question: string): Promise<void> {
    const started = await messages.sendMessage({
      clientMessageId: ++clientMessageId,
      conversationId: message.conversationId,
      body: { type: MessageType.STREAM, content: { case: "stream", value: { phase: StreamPhase.START, contentType: "text/plain" } } },
      replyToMessageId: message.messageId,
    });
    const words = `You said: ${question}`.split(/(?<= )/);
    try {
      for (const [index, word] of words.entries()) {
        await messages.pushStreamDelta({ conversationId: message.conversationId, messageId: started.messageId, seq: index + 1, delta: word });
        await sleep(wordDelayMs);
      }
      await messages.endStream({ conversationId: message.conversationId, messageId: started.messageId, accumulatedText: words.join("") });
    } catch (err) {
      await messages.errorStream({ conversationId: message.conversationId, messageId: started.messageId, errorMessage: "the agent failed while answering" });
      throw err;
    }
    await messages.sendMessage({
      clientMessageId: ++clientMessageId,
      conversationId: message.conversationId,
      body: { type: MessageType.CARD, content: { case: "card", value: { cardJson: card, fallbackText: "Was this answer helpful? (yes/no)" } } },
    });
  }

  async function answerAction(action: CardActionPayload): Promise<void> {
    const helpful = (JSON.parse(action.actionData) as { helpful?: boolean }).helpful === true;
    await messages.answerCardAction({
      conversationId: action.conversationId,
      messageId: action.messageId,
      actionId: action.actionId,
      text: helpful ? "Glad it helped!" : "Thanks, I will try harder.",
      showAlert: false,
    });
  }

  async function handle(rawBody: string): Promise<void> {
    const update = fromJsonString(UpdateSchema, rawBody, { ignoreUnknownFields: true });
    if (update.update.case === "nonSnUpdate" && update.update.value.update.case === "cardAction") {
      await answerAction(update.update.value.update.value);
      return;
    }
    if (update.update.case !== "snUpdate") return;
    const entry = update.update.value;
    if (handledSn.has(entry.sn)) return;
    handledSn.add(entry.sn);
    if (entry.update.case === "contactAdded") log(`user ${entry.update.value.peerUserId} added the agent`);
    if (entry.update.case !== "messageEnvelope") return;
    const message = entry.update.value;
    // Its own messages come back too (every participant's stream has them); edits and recalls
    // arrive as the same message id again and need no answer here.
    if (message.senderId === selfId || message.senderId === 0 || message.edited || message.updatedAt !== undefined) return;
    if (message.body?.content.case !== "text") return;
    await replyStreamed(message, message.body.content.value.text);
  }

  const server: Server = createServer({ cert: options.tls.cert, key: options.tls.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const rawBody = Buffer.concat(chunks).toString("utf8");
      const { timestamp, signature } = signatureOf(req.headers);
      if (req.method !== "POST" || !verifySignature(secretKey, timestamp, signature, rawBody)) {
        // The reachability check the server makes when the webhook is configured is signed with
        // the new key, which the agent learns only from that configuration call's answer; it
        // carries no event, so acknowledging it unverified reveals and changes nothing.
        res.writeHead(req.method === "POST" && isEmptyUpdate(rawBody) ? 200 : 401).end();
        return;
      }
      // Answer at once (the server waits at most 5 s), then do the work.
      res.writeHead(200).end();
      handle(rawBody).catch((err: unknown) => log(`handling a webhook failed: ${String(err)}`));
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://localhost:${port}/webhook`,
    setSecretKey(next) {
      secretKey = next;
    },
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
