// Typed clients for every Parley service over one Connect transport, with the session's token on
// every call. A call whose access token the server refuses (expired, or replaced elsewhere) is
// sent once more after a refresh; calls made while a refresh runs wait for it. Calls that need
// no credential (sign-in, password reset, client config) never refresh. A call answered UNAVAILABLE
// is sent again after the delay the answer names, when that is safe (retry.ts).
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../../shared/gen/api/v1/auth_pb.js";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../../shared/gen/api/v1/conversation_pb.js";
import { GroupService } from "../../shared/gen/api/v1/group_pb.js";
import { MediaService } from "../../shared/gen/api/v1/media_pb.js";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { PushService } from "../../shared/gen/api/v1/push_pb.js";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../../shared/gen/api/v1/user_pb.js";
import { isAccessTokenRejected } from "./errors.js";
import { defaultRetry, retryInterceptor, type RetryPolicy } from "./retry.js";
import { TokenSession, type RefreshedTokens, type SessionTokens } from "./session.js";

/** Every service of the Parley API, by the name its client has on ParleyClient. */
export const parleyServices = {
  agent: AgentService,
  auth: AuthService,
  contact: ContactService,
  conversation: ConversationService,
  group: GroupService,
  media: MediaService,
  message: MessageService,
  push: PushService,
  sync: SyncService,
  user: UserService,
} as const;

export type ParleyServices = typeof parleyServices;
export type ParleyServiceClients = { readonly [K in keyof ParleyServices]: Client<ParleyServices[K]> };

export interface ParleyClient extends ParleyServiceClients {
  readonly baseUrl: string;
  /** The tokens this client sends; also what the WebSocket client authenticates with. */
  readonly session: TokenSession;
  /** The underlying transport, for clients of services built elsewhere. */
  readonly transport: Transport;
}

export interface ParleyClientOptions {
  /** Base URL of the server (or its front), e.g. https://parley.example.com. */
  baseUrl: string;
  /**
   * A user's tokens from an earlier sign-in, or `{ accessToken: agentToken }` for an agent.
   * Without tokens, sign in through `auth`: the tokens VerifyCode and LoginPassword answer are
   * adopted (and passed to onTokens).
   */
  tokens?: SessionTokens;
  /** Persists tokens whenever they change (sign-in, refresh; undefined after Logout or a refused refresh). */
  onTokens?: (tokens: SessionTokens | undefined) => void | Promise<void>;
  /** The refresh token was refused: the user must sign in again. */
  onSessionEnded?: (cause: unknown) => void;
  /** Protobuf binary (default) or JSON on the wire. */
  wire?: "binary" | "json";
  /** Interceptors run on every call and every resend (they see the Authorization header). */
  interceptors?: Interceptor[];
  /** Default deadline of each call. */
  timeoutMs?: number;
  /** How calls answered UNAVAILABLE are sent again (retry.ts); false: never, the application sees every such answer. */
  retry?: Partial<RetryPolicy> | false;
  /** Refresh this long before the access token expires (default 60 s). */
  refreshLeewayMs?: number;
  /** The clock token expiry is judged by (milliseconds since the epoch). */
  now?: () => number;
}

const auth = AuthService.typeName;

/** Procedures the spec labels no-auth: a refused token there says nothing about the session. */
const credentialFree = new Set(
  ["RequestVerifyCode", "VerifyCode", "LoginPassword", "RefreshToken", "ResetPasswordRequest", "ResetPasswordVerify", "ResetPasswordConfirm", "GetClientConfig"].map(
    (method) => `${auth}/${method}`,
  ),
);

/** Procedures whose answer carries a new access and refresh token for this client. */
const issuingTokens = new Set(["VerifyCode", "LoginPassword", "RefreshToken"].map((method) => `${auth}/${method}`));

/** Procedures after which this client's session no longer exists on the server. */
const endingSession = new Set(["Logout", "LogoutAll", "ResetPasswordConfirm"].map((method) => `${auth}/${method}`));

function isIssued(message: object): message is RefreshedTokens {
  return "accessToken" in message && "refreshToken" in message && "expiresIn" in message;
}

function sessionInterceptor(session: TokenSession): Interceptor {
  return (next) => async (req) => {
    const procedure = `${req.service.typeName}/${req.method.name}`;
    const needsCredential = !credentialFree.has(procedure);
    const sent = needsCredential ? await session.accessToken() : session.current?.accessToken;
    if (sent !== undefined) req.header.set("authorization", `Bearer ${sent}`);
    let res;
    try {
      res = await next(req);
    } catch (err) {
      // Every Parley RPC is unary: the request message can be sent again as it is.
      if (!needsCredential || sent === undefined || req.stream || !session.canRefresh || !isAccessTokenRejected(err)) throw err;
      req.header.set("authorization", `Bearer ${await session.refresh(sent)}`);
      res = await next(req);
    }
    if (!res.stream && issuingTokens.has(procedure) && isIssued(res.message)) await session.adoptIssued(res.message);
    if (endingSession.has(procedure)) await session.clear();
    return res;
  };
}

/** A client of every Parley service, sending the session's token and renewing it as needed. */
export function createParleyClient(options: ParleyClientOptions): ParleyClient {
  const transportOf = (interceptors: Interceptor[]) =>
    createConnectTransport({
      baseUrl: options.baseUrl,
      httpVersion: "1.1",
      useBinaryFormat: (options.wire ?? "binary") === "binary",
      defaultTimeoutMs: options.timeoutMs,
      interceptors,
    });
  // RefreshToken goes out on a transport without the session, so a refresh never waits for itself.
  const refresher = createClient(AuthService, transportOf(options.interceptors ?? []));
  const session = new TokenSession({
    tokens: options.tokens,
    refresh: (refreshToken) => refresher.refreshToken({ refreshToken }),
    onTokens: options.onTokens,
    onSessionEnded: options.onSessionEnded,
    refreshLeewayMs: options.refreshLeewayMs,
    now: options.now,
  });
  // The session's interceptor is the outermost, so the application's own see the Authorization
  // header and run again when a call is sent a second time after a refresh.
  const retry = options.retry === false ? [] : [retryInterceptor({ ...defaultRetry, ...options.retry })];
  const transport = transportOf([sessionInterceptor(session), ...retry, ...(options.interceptors ?? [])]);
  const clients = Object.fromEntries(Object.entries(parleyServices).map(([name, service]) => [name, createClient(service, transport)])) as unknown as ParleyServiceClients;
  return { ...clients, baseUrl: options.baseUrl, session, transport };
}
