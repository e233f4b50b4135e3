// An example Parley agent in webhook mode, built on @parley/sdk. It verifies every webhook
// signature, answers a user's text message with a reply streamed word by word, then sends a card
// with two buttons and answers the button the user presses. Run it with
// `npx tsx examples/webhook-agent/main.ts` (see docs/sdk-and-examples.md for the whole walk-through); tests start
// it in-process through `startWebhookAgent`.
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import {
  AgentDeliveryMode,
  CardActions,
  MessageType,
  createParleyClient,
  createWebhookHandler,
  nextClientMessageId,
  streamMessage,
  type MessageEnvelope,
  type ParleyClient,
} from "@parley/sdk";

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
  /** Lets the agent verify with a new secret key (after the webhook is reconfigured). */
  setSecretKey(secretKey: string): void;
  close(): Promise<void>;
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

/** The reply, a word (with its trailing space) at a time, as a language model would produce it. */
async function* wordsOf(text: string, delayMs: number): AsyncGenerator<string> {
  for (const word of text.split(/(?<= )/)) {
    yield word;
    if (delayMs > 0) await sleep(delayMs);
  }
}

/**
 * Points the agent's webhook at `webhookUrl` with its own token. The server first sends the URL a
 * test request signed with the agent's current secret key, so the endpoint must already be
 * verifying with that key; the key does not change (only the owner's SetAgentConfig issues one).
 */
export async function configureOwnWebhook(serverUrl: string, token: string, webhookUrl: string): Promise<void> {
  const client = createParleyClient({ baseUrl: serverUrl, tokens: { accessToken: token } });
  await client.agent.updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl });
}

export async function startWebhookAgent(options: WebhookAgentOptions): Promise<RunningAgent> {
  const log = options.log ?? ((line: string) => console.log(line));
  const wordDelayMs = options.wordDelayMs ?? 120;
  let secretKey = options.secretKey;
  const client: ParleyClient = createParleyClient({ baseUrl: options.serverUrl, tokens: { accessToken: options.token } });
  let selfId: Promise<number> | undefined;
  const selfUserId = (): Promise<number> => {
    selfId ??= client.user.getProfile({}).then(
      ({ profile }) => profile!.userId,
      (err: unknown) => {
        selfId = undefined; // asked again with the next message
        throw err;
      },
    );
    return selfId;
  };

  const cards = new CardActions(client.message, { onError: (err) => log(`a card action failed: ${String(err)}`) }).on("", (_action, data) =>
    (data as { helpful?: boolean } | undefined)?.helpful === true ? "Glad it helped!" : "Thanks, I will try harder.",
  );

  async function answer(message: MessageEnvelope, question: string): Promise<void> {
    await streamMessage(client.message, { conversationId: message.conversationId, replyToMessageId: message.messageId }, wordsOf(`You said: ${question}`, wordDelayMs), {
      errorMessage: () => "the agent failed while answering",
    });
    await client.message.sendMessage({
      clientMessageId: nextClientMessageId(),
      conversationId: message.conversationId,
      body: { type: MessageType.CARD, content: { case: "card", value: { cardJson: card, fallbackText: "Was this answer helpful? (yes/no)" } } },
    });
  }

  const webhook = createWebhookHandler({
    secretKey: () => secretKey,
    async onUpdate(entry) {
      if (entry.update.case === "contactAdded") log(`user ${entry.update.value.peerUserId} added the agent`);
      if (entry.update.case !== "messageEnvelope") return;
      const message = entry.update.value;
      // Its own messages come back too (every participant's stream has them); edits and recalls
      // arrive as the same message id again and need no answer here.
      if (message.senderId === (await selfUserId()) || message.senderId === 0 || message.edited || message.updatedAt !== undefined) return;
      if (message.body?.content.case !== "text") return;
      await answer(message, message.body.content.value.text);
    },
    async onEphemeral(entry) {
      if (entry.update.case === "cardAction") await cards.dispatch(entry.update.value);
    },
    onError: (err) => log(`handling a webhook failed: ${String(err)}`),
  });

  const server: Server = createServer({ cert: options.tls.cert, key: options.tls.key }, webhook);
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
      await webhook.idle();
    },
  };
}
