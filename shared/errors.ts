// The error catalogue: every business error the platform can answer, in one place.
//
// errorCode is domain-segmented: 1xxx request/common, 2xxx authentication and sessions,
// 3xxx users and profiles, 4xxx contacts, 5xxx conversations and messages, 6xxx groups,
// 7xxx agents, 8xxx media, 9xxx sync, push and the gateway. Codes are never reused: clients
// branch on them. The Connect code travels with the entry so a handler only names the entry.
import { Code } from "@connectrpc/connect";
import moleculer from "moleculer";

export interface CatalogueEntry {
  readonly code: Code;
  readonly errorCode: number;
  readonly errorName: string;
  readonly message: string;
}

function entry(code: Code, errorCode: number, errorName: string, message: string): CatalogueEntry {
  return { code, errorCode, errorName, message };
}

export const Errors = {
  // 1xxx: request shape and generic conditions
  invalidArgument: entry(Code.InvalidArgument, 1001, "INVALID_ARGUMENT", "the request is invalid"),
  malformedRequest: entry(Code.InvalidArgument, 1002, "MALFORMED_REQUEST", "the request body could not be decoded"),
  requestTooLarge: entry(Code.ResourceExhausted, 1003, "REQUEST_TOO_LARGE", "the request body is too large"),
  unimplemented: entry(Code.Unimplemented, 1004, "UNIMPLEMENTED", "this operation is not available yet"),
  internal: entry(Code.Internal, 1005, "INTERNAL", "internal error"),
  unavailable: entry(Code.Unavailable, 1006, "UNAVAILABLE", "the service is temporarily unavailable"),
  notFound: entry(Code.NotFound, 1007, "NOT_FOUND", "not found"),
  unsupportedMediaType: entry(Code.InvalidArgument, 1008, "UNSUPPORTED_MEDIA_TYPE", "unsupported content type"),
  deadlineExceeded: entry(Code.DeadlineExceeded, 1009, "DEADLINE_EXCEEDED", "the request took too long"),
  invalidHost: entry(Code.InvalidArgument, 1010, "INVALID_HOST", "the Host header is not a valid host name or address"),

  // 2xxx: authentication, sessions, verification, passwords
  unauthenticated: entry(Code.Unauthenticated, 2001, "UNAUTHENTICATED", "missing or invalid credentials"),
  tokenExpired: entry(Code.Unauthenticated, 2002, "TOKEN_EXPIRED", "the access token has expired"),
  userOnly: entry(Code.PermissionDenied, 2003, "USER_ONLY", "this operation requires a user token"),
  agentOnly: entry(Code.PermissionDenied, 2004, "AGENT_ONLY", "this operation requires an agent token"),
  invalidIdentity: entry(Code.InvalidArgument, 2005, "INVALID_IDENTITY", "the identity type or value is invalid"),
  codeRateLimited: entry(Code.ResourceExhausted, 2006, "CODE_RATE_LIMITED", "a code was sent to this identity recently"),
  verifySessionNotFound: entry(Code.NotFound, 2007, "VERIFY_SESSION_NOT_FOUND", "the verification session is missing or expired"),
  malformedVerifyToken: entry(Code.InvalidArgument, 2008, "MALFORMED_VERIFY_TOKEN", "the verify token is malformed"),
  wrongCode: entry(Code.InvalidArgument, 2009, "WRONG_CODE", "the verification code is wrong"),
  tooManyCodeAttempts: entry(Code.ResourceExhausted, 2010, "TOO_MANY_CODE_ATTEMPTS", "too many failed attempts on this verification session"),
  accountNotFound: entry(Code.NotFound, 2011, "ACCOUNT_NOT_FOUND", "no account has this identity"),
  wrongPassword: entry(Code.Unauthenticated, 2012, "WRONG_PASSWORD", "the password is wrong"),
  accountLocked: entry(Code.ResourceExhausted, 2013, "ACCOUNT_LOCKED", "the account is temporarily locked after repeated failed logins"),
  invalidRefreshToken: entry(Code.Unauthenticated, 2014, "INVALID_REFRESH_TOKEN", "the refresh token is invalid, expired or revoked"),
  passwordAlreadySet: entry(Code.FailedPrecondition, 2015, "PASSWORD_ALREADY_SET", "a password is already set"),
  passwordNotSet: entry(Code.FailedPrecondition, 2016, "PASSWORD_NOT_SET", "no password is set"),
  weakPassword: entry(Code.InvalidArgument, 2017, "WEAK_PASSWORD", "the password does not meet the complexity rules"),
  wrongOldPassword: entry(Code.Unauthenticated, 2018, "WRONG_OLD_PASSWORD", "the old password is wrong"),
  resetTokenNotFound: entry(Code.NotFound, 2019, "RESET_TOKEN_NOT_FOUND", "the reset token is missing, expired or used"),
  deviceNotFound: entry(Code.NotFound, 2020, "DEVICE_NOT_FOUND", "no such device session"),
  cannotRemoveCurrentDevice: entry(Code.InvalidArgument, 2021, "CANNOT_REMOVE_CURRENT_DEVICE", "this is the current device; use Logout"),
  identityDisabled: entry(Code.InvalidArgument, 2022, "IDENTITY_TYPE_DISABLED", "sign-in with this identity type is not enabled"),
  sessionRevoked: entry(Code.Unauthenticated, 2023, "SESSION_REVOKED", "the session was revoked"),
  codeDeliveryFailed: entry(Code.Unavailable, 2024, "CODE_DELIVERY_FAILED", "the verification code could not be delivered"),
  codeAddressRateLimited: entry(Code.ResourceExhausted, 2025, "CODE_ADDRESS_RATE_LIMITED", "too many verification codes were requested from this address"),
  codeGlobalRateLimited: entry(Code.ResourceExhausted, 2026, "CODE_GLOBAL_RATE_LIMITED", "the server is sending too many verification codes"),
  signInRateLimited: entry(Code.ResourceExhausted, 2027, "SIGN_IN_RATE_LIMITED", "too many sign-in attempts from this address"),

  // 3xxx: users and profiles
  userNotFound: entry(Code.NotFound, 3001, "USER_NOT_FOUND", "user not found"),
  usernameAlreadySet: entry(Code.FailedPrecondition, 3002, "USERNAME_ALREADY_SET", "a custom username is already set"),
  usernameTaken: entry(Code.AlreadyExists, 3003, "USERNAME_TAKEN", "the username is taken"),
  invalidUsername: entry(Code.InvalidArgument, 3004, "INVALID_USERNAME", "a username has 5 to 32 lowercase letters, digits or underscores"),
  invalidUserIds: entry(Code.InvalidArgument, 3005, "INVALID_USER_IDS", "between 1 and 200 user ids are required"),

  // 4xxx: contacts, friend requests, blocks
  cannotTargetSelf: entry(Code.InvalidArgument, 4001, "CANNOT_TARGET_SELF", "this operation cannot target yourself"),
  friendRequestPending: entry(Code.AlreadyExists, 4002, "FRIEND_REQUEST_PENDING", "a friend request between you is already pending"),
  blocked: entry(Code.PermissionDenied, 4003, "BLOCKED", "one of you has blocked the other"),
  alreadyContacts: entry(Code.FailedPrecondition, 4004, "ALREADY_CONTACTS", "you are already contacts"),
  friendRequestNotFound: entry(Code.NotFound, 4005, "FRIEND_REQUEST_NOT_FOUND", "no such friend request"),
  friendRequestHandled: entry(Code.FailedPrecondition, 4006, "FRIEND_REQUEST_HANDLED", "the friend request was already handled"),
  contactNotFound: entry(Code.NotFound, 4007, "CONTACT_NOT_FOUND", "not in your contacts"),
  alreadyBlocked: entry(Code.AlreadyExists, 4008, "ALREADY_BLOCKED", "already blocked"),
  notBlocked: entry(Code.NotFound, 4009, "NOT_BLOCKED", "not in your blocklist"),
  contactAlreadyExists: entry(Code.AlreadyExists, 4010, "CONTACT_ALREADY_EXISTS", "already in your contacts"),
  targetIsRegularUser: entry(Code.FailedPrecondition, 4011, "TARGET_IS_REGULAR_USER", "regular users are added with SendFriendRequest"),
  privateAgent: entry(Code.PermissionDenied, 4012, "PRIVATE_AGENT", "only the creator can add a private agent"),

  // 5xxx: conversations and messages
  conversationNotFound: entry(Code.NotFound, 5001, "CONVERSATION_NOT_FOUND", "no such conversation"),
  notMember: entry(Code.PermissionDenied, 5002, "NOT_A_MEMBER", "you are not a member of this conversation"),
  contactRemoved: entry(Code.FailedPrecondition, 5003, "CONTACT_REMOVED", "the contact relationship was removed; become contacts again to send"),
  messageNotFound: entry(Code.NotFound, 5004, "MESSAGE_NOT_FOUND", "no such message"),
  notSender: entry(Code.PermissionDenied, 5005, "NOT_SENDER", "only the sender can do this"),
  messageRecalled: entry(Code.FailedPrecondition, 5006, "MESSAGE_RECALLED", "the message was recalled"),
  editWindowClosed: entry(Code.FailedPrecondition, 5007, "EDIT_WINDOW_CLOSED", "messages can be changed only within 24 hours of sending"),
  bodyTypeChanged: entry(Code.InvalidArgument, 5008, "BODY_TYPE_CHANGED", "the new body must have the same type as the original"),
  invalidBody: entry(Code.InvalidArgument, 5009, "INVALID_BODY", "the message body is invalid"),
  readPositionBackwards: entry(Code.InvalidArgument, 5010, "READ_POSITION_BACKWARDS", "the read position cannot move backwards"),
  streamNotFound: entry(Code.NotFound, 5011, "STREAM_NOT_FOUND", "no such stream message"),
  streamFinished: entry(Code.FailedPrecondition, 5012, "STREAM_FINISHED", "the stream already ended or failed"),
  notACard: entry(Code.FailedPrecondition, 5013, "NOT_A_CARD", "the message is not a card"),
  cardActionNotFound: entry(Code.NotFound, 5014, "CARD_ACTION_NOT_FOUND", "the card action is missing or expired"),
  replyTargetNotFound: entry(Code.InvalidArgument, 5015, "REPLY_TARGET_NOT_FOUND", "the message replied to does not exist"),
  conversationReadOnly: entry(Code.FailedPrecondition, 5016, "CONVERSATION_READ_ONLY", "the conversation is read-only"),
  streamSequenceGap: entry(Code.InvalidArgument, 5017, "STREAM_SEQUENCE_GAP", "a delta is missing before this seq"),

  // 6xxx: groups
  groupNotFound: entry(Code.NotFound, 6001, "GROUP_NOT_FOUND", "no such group"),
  groupDissolved: entry(Code.FailedPrecondition, 6002, "GROUP_DISSOLVED", "the group was dissolved"),
  notGroupOwner: entry(Code.PermissionDenied, 6003, "NOT_GROUP_OWNER", "only the group owner can do this"),
  notGroupMember: entry(Code.PermissionDenied, 6004, "NOT_GROUP_MEMBER", "you are not a member of this group"),
  memberNotFound: entry(Code.NotFound, 6005, "MEMBER_NOT_FOUND", "not a member of this group"),
  cannotRemoveOwner: entry(Code.InvalidArgument, 6006, "CANNOT_REMOVE_OWNER", "the owner cannot be removed"),
  ownerCannotLeave: entry(Code.PermissionDenied, 6007, "OWNER_CANNOT_LEAVE", "the owner cannot leave; dissolve the group instead"),
  groupTooSmall: entry(Code.FailedPrecondition, 6008, "GROUP_TOO_SMALL", "a group needs at least 3 members including the creator"),
  groupTooLarge: entry(Code.ResourceExhausted, 6009, "GROUP_TOO_LARGE", "a group has at most 200 members including the owner"),
  tooManyAgents: entry(Code.ResourceExhausted, 6010, "TOO_MANY_AGENTS", "a group has at most 20 agents"),

  // 7xxx: agents
  agentNotFound: entry(Code.NotFound, 7001, "AGENT_NOT_FOUND", "no such agent"),
  notAgentCreator: entry(Code.PermissionDenied, 7002, "NOT_AGENT_CREATOR", "only the agent's creator can do this"),
  agentNotActive: entry(Code.FailedPrecondition, 7003, "AGENT_NOT_ACTIVE", "the agent is not active"),
  invalidIpWhitelist: entry(Code.InvalidArgument, 7004, "INVALID_IP_WHITELIST", "every IP whitelist entry must be an IP address or a CIDR block"),
  invalidWebhookUrl: entry(Code.InvalidArgument, 7005, "INVALID_WEBHOOK_URL", "the webhook URL must be an absolute https URL"),
  webhookUrlRequired: entry(Code.InvalidArgument, 7006, "WEBHOOK_URL_REQUIRED", "WEBHOOK delivery needs a webhook URL"),
  webhookUnreachable: entry(Code.InvalidArgument, 7007, "WEBHOOK_UNREACHABLE", "the webhook URL did not answer the test request with 2xx within 5 seconds"),
  invalidAgentConfig: entry(Code.InvalidArgument, 7008, "INVALID_AGENT_CONFIG", "the agent configuration is invalid"),
  ipNotAllowed: entry(Code.PermissionDenied, 7009, "IP_NOT_ALLOWED", "this address is not in the agent's IP whitelist"),
  agentTokenRevoked: entry(Code.Unauthenticated, 7010, "AGENT_TOKEN_REVOKED", "the agent token was regenerated or the agent deleted"),
  miniAppNotEnabled: entry(Code.FailedPrecondition, 7011, "MINI_APP_NOT_ENABLED", "the agent has not enabled its Mini App"),
  invalidMiniAppUrl: entry(Code.InvalidArgument, 7012, "INVALID_MINI_APP_URL", "the Mini App URL must be an absolute https URL"),
  invalidMiniAppOrigin: entry(Code.InvalidArgument, 7013, "INVALID_MINI_APP_ORIGIN", "allowed origins must be origins such as https://app.example.com"),
  invalidMiniAppPermissions: entry(Code.InvalidArgument, 7014, "INVALID_MINI_APP_PERMISSIONS", "the permission bitmask has undefined bits"),
  noAgentAccess: entry(Code.PermissionDenied, 7015, "NO_AGENT_ACCESS", "you have no access to this agent"),
  launchConversationMismatch: entry(Code.PermissionDenied, 7016, "LAUNCH_CONVERSATION_MISMATCH", "the conversation is not one of yours with this agent"),

  // 8xxx: media
  mediaFileNotFound: entry(Code.NotFound, 8001, "MEDIA_FILE_NOT_FOUND", "no such file"),
  purposeRequired: entry(Code.InvalidArgument, 8002, "PURPOSE_REQUIRED", "the upload purpose must be AVATAR, GROUP_AVATAR or MESSAGE"),
  invalidContentType: entry(Code.InvalidArgument, 8003, "INVALID_CONTENT_TYPE", "the content type must be a MIME type such as image/png"),
  fileTooLarge: entry(Code.ResourceExhausted, 8004, "FILE_TOO_LARGE", "a single-request upload carries at most 5 MB; use the chunked upload"),
  uploadTooLarge: entry(Code.ResourceExhausted, 8005, "UPLOAD_TOO_LARGE", "a chunked upload is at most 104857600 bytes"),
  uploadSessionNotFound: entry(Code.NotFound, 8006, "UPLOAD_SESSION_NOT_FOUND", "the upload session is missing or expired"),
  uploadOffsetMismatch: entry(Code.InvalidArgument, 8007, "UPLOAD_OFFSET_MISMATCH", "the chunk offset differs from the bytes uploaded so far"),
  chunkExceedsSize: entry(Code.ResourceExhausted, 8008, "CHUNK_EXCEEDS_SIZE", "the chunk would exceed the declared size"),
  uploadIncomplete: entry(Code.FailedPrecondition, 8009, "UPLOAD_INCOMPLETE", "the uploaded bytes differ from the declared size"),
  publicUrlUnknown: entry(Code.InvalidArgument, 8010, "PUBLIC_URL_UNKNOWN", "no PUBLIC_URL is configured and the request carried no usable Host"),
  downloadLinkInvalid: entry(Code.PermissionDenied, 8011, "DOWNLOAD_LINK_INVALID", "the download link is not valid"),
  downloadLinkExpired: entry(Code.PermissionDenied, 8012, "DOWNLOAD_LINK_EXPIRED", "the download link has expired"),
  rangeNotSatisfiable: entry(Code.OutOfRange, 8013, "RANGE_NOT_SATISFIABLE", "the requested range lies outside the file"),

  // 9xxx: sync, push and the gateway
  pushTokenNotFound: entry(Code.NotFound, 9001, "PUSH_TOKEN_NOT_FOUND", "no push token is registered for this device"),
  invalidPushToken: entry(Code.InvalidArgument, 9002, "INVALID_PUSH_TOKEN", "the push token or platform is invalid"),
  unknownPushDevice: entry(Code.InvalidArgument, 9004, "UNKNOWN_PUSH_DEVICE", "the device is not one of the caller's signed-in devices"),
  invalidSn: entry(Code.InvalidArgument, 9003, "INVALID_SN", "sn cannot be negative"),
  gatewayAuthRequired: entry(Code.Unauthenticated, 9101, "GATEWAY_AUTH_REQUIRED", "the first frame must be an authentication request"),
  gatewayAuthTimeout: entry(Code.DeadlineExceeded, 9102, "GATEWAY_AUTH_TIMEOUT", "no authentication frame arrived in time"),
  gatewayBadFrame: entry(Code.InvalidArgument, 9103, "GATEWAY_BAD_FRAME", "the frame could not be decoded"),
  gatewaySlowConsumer: entry(Code.ResourceExhausted, 9104, "GATEWAY_SLOW_CONSUMER", "the connection fell too far behind; reconnect and call GetDifference"),
  gatewayIdleTimeout: entry(Code.DeadlineExceeded, 9105, "GATEWAY_IDLE_TIMEOUT", "no frame arrived within the heartbeat timeout"),
  gatewayShuttingDown: entry(Code.Unavailable, 9106, "GATEWAY_SHUTTING_DOWN", "the server is restarting; reconnect"),
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorName = keyof typeof Errors;

const byErrorName = new Map<string, CatalogueEntry>(Object.values(Errors).map((e) => [e.errorName, e]));

/** Looks an entry up by its errorName, as carried across process boundaries. */
export function catalogueEntryByName(errorName: string): CatalogueEntry | undefined {
  return byErrorName.get(errorName);
}

/** The generic entry for a Connect code, used when an error arrives without a catalogue entry. */
export function catalogueEntryForCode(code: Code): CatalogueEntry {
  switch (code) {
    case Code.InvalidArgument:
      return Errors.invalidArgument;
    case Code.Unauthenticated:
      return Errors.unauthenticated;
    case Code.NotFound:
      return Errors.notFound;
    case Code.Unimplemented:
      return Errors.unimplemented;
    case Code.ResourceExhausted:
      return Errors.requestTooLarge;
    case Code.Unavailable:
      return Errors.unavailable;
    case Code.DeadlineExceeded:
      return Errors.deadlineExceeded;
    default:
      return Errors.internal;
  }
}

/**
 * A business error as engine services throw it. Moleculer carries `type` and `data` of an error
 * between nodes, so the catalogue name rides in `type` and the metadata in `data`; the API tier
 * reads those two fields whether the error was thrown locally or regenerated from a packet.
 */
export class ParleyError extends moleculer.Errors.MoleculerError {
  constructor(entry: CatalogueEntry, metadata: Record<string, string> = {}, message?: string) {
    super(message ?? entry.message, 400, entry.errorName, { metadata });
    this.name = "ParleyError";
  }
}

/** Reads the catalogue entry and metadata of an error thrown by any engine service, local or remote. */
export function parleyErrorParts(err: unknown): { entry: CatalogueEntry; metadata: Record<string, string>; message: string } | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { type, data, message } = err as { type?: unknown; data?: { metadata?: Record<string, string> }; message?: unknown };
  if (typeof type !== "string") return undefined;
  const entry = catalogueEntryByName(type);
  if (!entry) return undefined;
  return { entry, metadata: data?.metadata ?? {}, message: typeof message === "string" ? message : entry.message };
}
