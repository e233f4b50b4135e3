// Users and agents of the SDK's black-box tests, signed in and related through the SDK itself.
import { randomUUID } from "node:crypto";
import type { Interceptor } from "@connectrpc/connect";
import { DeviceType, IdentityType, MessageType, createParleyClient, nextClientMessageId, type ParleyClient, type ParleyClientOptions, type SessionTokens } from "../../src/index.js";
import { privateConversationId } from "../../../shared/ids.js";
import { freshEmail, lastCode, type TestServer } from "../../../test/support/harness.js";

export interface Person {
  client: ParleyClient;
  userId: number;
  email: string;
  /** Every value passed to onTokens, in order. */
  saved: (SessionTokens | undefined)[];
  ended: unknown[];
  /** Procedures as sent, every attempt (RefreshToken included). */
  sent: string[];
}

/** Signs a new user in through the SDK (VerifyCode with the code the test server wrote down). */
export async function signIn(server: TestServer, options: Partial<ParleyClientOptions> = {}): Promise<Person> {
  const saved: (SessionTokens | undefined)[] = [];
  const ended: unknown[] = [];
  const sent: string[] = [];
  const recorder: Interceptor = (next) => (req) => {
    sent.push(req.method.name);
    return next(req);
  };
  const client = createParleyClient({
    baseUrl: server.url,
    onTokens: (tokens) => {
      saved.push(tokens);
    },
    onSessionEnded: (cause) => ended.push(cause),
    interceptors: [recorder],
    ...options,
  });
  const email = freshEmail("sdk");
  const { verifyToken } = await client.auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
  const signed = await client.auth.verifyCode({
    verifyToken,
    code: lastCode(server, email),
    deviceInfo: { deviceId: randomUUID(), deviceType: DeviceType.CLI, deviceName: "sdk test", deviceModel: "node", osVersion: process.version, appVersion: "1.0.0" },
  });
  return { client, userId: signed.userId, email, saved, ended, sent };
}

/** Makes two users contacts; answers their PRIVATE conversation id. */
export async function befriend(a: Person, b: Person): Promise<bigint> {
  const { requestId } = await a.client.contact.sendFriendRequest({ targetUserId: b.userId, message: "hi" });
  await b.client.contact.acceptFriendRequest({ requestId });
  return privateConversationId(a.userId, b.userId);
}

export async function sendText(from: Person, conversationId: bigint, text: string): Promise<bigint> {
  const sent = await from.client.message.sendMessage({
    clientMessageId: nextClientMessageId(),
    conversationId,
    body: { type: MessageType.TEXT, content: { case: "text", value: { text } } },
  });
  return sent.messageId;
}

/** Waits until the condition holds (deliveries are asynchronous). */
export async function eventually(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
