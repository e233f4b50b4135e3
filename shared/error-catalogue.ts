// The error catalogue: every business error the platform can answer, in one place. It imports
// nothing but Connect's codes, so the SDK builds its error codes from it too.
//
// errorCode follows the upstream protocol's catalogue (nexus-proto v0.0.12, errors/*.go) and its
// domain blocks: 1xxx authentication, verification, passwords and the connection; 2xxx users and
// devices; 3xxx contacts; 4xxx groups; 5xxx conversations; 6xxx messages, streams and cards;
// 7xxx agents and Mini Apps; 8xxx media; 9xxx push and sync. Where upstream has a code for the
// same condition, the entry carries that code and name (7003 is also fixed by the spec); a
// condition upstream has no code for takes X901 upward in its block (request-level errors 1901
// upward), so no Parley code ever means something else to an upstream client. The Connect code
// is the one the spec gives the condition. Codes are never reused: clients branch on them.
// docs/errors.md lists the catalogue (test/error-catalogue.test.ts keeps the two equal).
import { Code } from "@connectrpc/connect";

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
  // Request shape and generic conditions (no upstream codes)
  invalidArgument: entry(Code.InvalidArgument, 1901, "INVALID_ARGUMENT", "the request is invalid"),
  malformedRequest: entry(Code.InvalidArgument, 1902, "MALFORMED_REQUEST", "the request body could not be decoded"),
  requestTooLarge: entry(Code.ResourceExhausted, 1903, "REQUEST_TOO_LARGE", "the request body is too large"),
  unimplemented: entry(Code.Unimplemented, 1904, "UNIMPLEMENTED", "this operation is not available yet"),
  internal: entry(Code.Internal, 1905, "INTERNAL", "internal error"),
  unavailable: entry(Code.Unavailable, 1906, "UNAVAILABLE", "the service is temporarily unavailable"),
  notFound: entry(Code.NotFound, 1907, "NOT_FOUND", "not found"),
  unsupportedMediaType: entry(Code.InvalidArgument, 1908, "UNSUPPORTED_MEDIA_TYPE", "unsupported content type"),
  deadlineExceeded: entry(Code.DeadlineExceeded, 1909, "DEADLINE_EXCEEDED", "the request took too long"),
  invalidHost: entry(Code.InvalidArgument, 1910, "INVALID_HOST", "the Host header is not a valid host name or address"),

  // 1xxx: authentication, verification, passwords
  unauthenticated: entry(Code.Unauthenticated, 1001, "INVALID_TOKEN", "missing or invalid credentials"),
  tokenExpired: entry(Code.Unauthenticated, 1002, "TOKEN_EXPIRED", "the access token has expired"),
  invalidRefreshToken: entry(Code.Unauthenticated, 1003, "REFRESH_TOKEN_INVALID", "the refresh token is invalid, expired or revoked"),
  codeRateLimited: entry(Code.ResourceExhausted, 1101, "VERIFY_CODE_RATE_LIMITED", "a code was sent to this identity recently"),
  codeDeliveryFailed: entry(Code.Unavailable, 1103, "VERIFY_CODE_SEND_FAILED", "the verification code could not be delivered"),
  verifySessionNotFound: entry(Code.NotFound, 1104, "VERIFY_TOKEN_EXPIRED", "the verification session is missing or expired"),
  wrongCode: entry(Code.InvalidArgument, 1105, "VERIFY_CODE_INVALID", "the verification code is wrong"),
  tooManyCodeAttempts: entry(Code.ResourceExhausted, 1106, "VERIFY_CODE_TOO_MANY_ATTEMPTS", "too many failed attempts on this verification session"),
  wrongPassword: entry(Code.Unauthenticated, 1201, "INVALID_PASSWORD", "the password is wrong"),
  accountLocked: entry(Code.ResourceExhausted, 1202, "ACCOUNT_LOCKED", "the account is temporarily locked after repeated failed logins"),
  weakPassword: entry(Code.InvalidArgument, 1203, "PASSWORD_TOO_WEAK", "the password does not meet the complexity rules"),
  resetTokenNotFound: entry(Code.NotFound, 1204, "RESET_TOKEN_INVALID", "the reset token is missing, expired or used"),
  passwordNotSet: entry(Code.FailedPrecondition, 1205, "PASSWORD_NOT_SET", "no password is set"),
  passwordAlreadySet: entry(Code.FailedPrecondition, 1207, "PASSWORD_ALREADY_SET", "a password is already set"),
  invalidEmail: entry(Code.InvalidArgument, 1301, "INVALID_EMAIL", "the email address is invalid"),
  invalidPhone: entry(Code.InvalidArgument, 1302, "INVALID_PHONE", "the phone number is invalid"),
  identityDisabled: entry(Code.InvalidArgument, 1401, "LOGIN_METHOD_NOT_ALLOWED", "sign-in with this identity type is not enabled"),
  userOnly: entry(Code.PermissionDenied, 1911, "USER_ONLY", "this operation requires a user token"),
  agentOnly: entry(Code.PermissionDenied, 1912, "AGENT_ONLY", "this operation requires an agent token"),
  invalidIdentity: entry(Code.InvalidArgument, 1913, "INVALID_IDENTITY", "the identity type is invalid"),
  malformedVerifyToken: entry(Code.InvalidArgument, 1914, "MALFORMED_VERIFY_TOKEN", "the verify token is malformed"),
  accountNotFound: entry(Code.NotFound, 1915, "ACCOUNT_NOT_FOUND", "no account has this identity"),
  wrongOldPassword: entry(Code.Unauthenticated, 1916, "WRONG_OLD_PASSWORD", "the old password is wrong"),
  sessionRevoked: entry(Code.Unauthenticated, 1917, "SESSION_REVOKED", "the session was revoked"),
  codeAddressRateLimited: entry(Code.ResourceExhausted, 1918, "CODE_ADDRESS_RATE_LIMITED", "too many verification codes were requested from this address"),
  codeGlobalRateLimited: entry(Code.ResourceExhausted, 1919, "CODE_GLOBAL_RATE_LIMITED", "the server is sending too many verification codes"),
  signInRateLimited: entry(Code.ResourceExhausted, 1920, "SIGN_IN_RATE_LIMITED", "too many sign-in attempts from this address"),

  // 1xxx: the WebSocket connection
  gatewayBadFrame: entry(Code.InvalidArgument, 1007, "INVALID_FRAME", "the frame could not be decoded"),
  gatewayAuthRequired: entry(Code.Unauthenticated, 1921, "GATEWAY_AUTH_REQUIRED", "the first frame must be an authentication request"),
  gatewayAuthTimeout: entry(Code.DeadlineExceeded, 1922, "GATEWAY_AUTH_TIMEOUT", "no authentication frame arrived in time"),
  gatewaySlowConsumer: entry(Code.ResourceExhausted, 1923, "GATEWAY_SLOW_CONSUMER", "the connection fell too far behind; reconnect and call GetDifference"),
  gatewayIdleTimeout: entry(Code.DeadlineExceeded, 1924, "GATEWAY_IDLE_TIMEOUT", "no frame arrived within the heartbeat timeout"),
  gatewayShuttingDown: entry(Code.Unavailable, 1925, "GATEWAY_SHUTTING_DOWN", "the server is restarting; reconnect"),
  requestHeadersTooLarge: entry(Code.ResourceExhausted, 1926, "REQUEST_HEADERS_TOO_LARGE", "the request line and headers are too large"),

  // 2xxx: users, profiles and devices
  userNotFound: entry(Code.NotFound, 2001, "USER_NOT_FOUND", "user not found"),
  usernameTaken: entry(Code.AlreadyExists, 2002, "USERNAME_TAKEN", "the username is taken"),
  usernameAlreadySet: entry(Code.FailedPrecondition, 2003, "USERNAME_ALREADY_CHANGED", "a custom username is already set"),
  invalidUsername: entry(Code.InvalidArgument, 2004, "INVALID_USERNAME_FORMAT", "a username has 5 to 32 lowercase letters, digits or underscores"),
  deviceNotFound: entry(Code.NotFound, 2009, "DEVICE_NOT_FOUND", "no such device session"),
  cannotRemoveCurrentDevice: entry(Code.InvalidArgument, 2010, "CANNOT_REMOVE_CURRENT_DEVICE", "this is the current device; use Logout"),
  invalidUserIds: entry(Code.InvalidArgument, 2901, "INVALID_USER_IDS", "between 1 and 200 user ids are required"),

  // 3xxx: contacts, friend requests, blocks
  alreadyContacts: entry(Code.FailedPrecondition, 3001, "ALREADY_CONTACTS", "you are already contacts"),
  friendRequestPending: entry(Code.AlreadyExists, 3002, "FRIEND_REQUEST_EXISTS", "a friend request between you is already pending"),
  friendRequestNotFound: entry(Code.NotFound, 3003, "FRIEND_REQUEST_NOT_FOUND", "no such friend request"),
  friendRequestHandled: entry(Code.FailedPrecondition, 3004, "FRIEND_REQUEST_HANDLED", "the friend request was already handled"),
  cannotTargetSelf: entry(Code.InvalidArgument, 3005, "CANNOT_ADD_SELF", "you cannot add yourself"),
  blocked: entry(Code.PermissionDenied, 3006, "USER_BLOCKED", "one of you has blocked the other"),
  contactRemoved: entry(Code.FailedPrecondition, 3007, "NOT_CONTACTS", "you are not contacts (any more); become contacts again to send"),
  alreadyBlocked: entry(Code.AlreadyExists, 3008, "ALREADY_BLOCKED", "already blocked"),
  notBlocked: entry(Code.NotFound, 3009, "NOT_BLOCKED", "not in your blocklist"),
  privateAgent: entry(Code.PermissionDenied, 3010, "AGENT_PRIVATE", "only the creator can add a private agent"),
  targetIsRegularUser: entry(Code.FailedPrecondition, 3011, "USE_SEND_FRIEND_REQUEST", "regular users are added with SendFriendRequest"),
  contactAlreadyExists: entry(Code.AlreadyExists, 3901, "CONTACT_ALREADY_EXISTS", "already in your contacts"),
  contactNotFound: entry(Code.NotFound, 3902, "CONTACT_NOT_FOUND", "not in your contacts"),
  cannotBlockSelf: entry(Code.InvalidArgument, 3903, "CANNOT_BLOCK_SELF", "you cannot block yourself"),

  // 4xxx: groups
  groupNotFound: entry(Code.NotFound, 4001, "GROUP_NOT_FOUND", "no such group"),
  groupDissolved: entry(Code.FailedPrecondition, 4002, "GROUP_DISSOLVED", "the group was dissolved"),
  notGroupMember: entry(Code.PermissionDenied, 4003, "NOT_GROUP_MEMBER", "you are not a member of this group"),
  notGroupOwner: entry(Code.PermissionDenied, 4004, "NOT_GROUP_OWNER", "only the group owner can do this"),
  groupTooLarge: entry(Code.ResourceExhausted, 4006, "GROUP_MEMBER_LIMIT", "a group has at most 200 members including the owner"),
  tooManyAgents: entry(Code.ResourceExhausted, 4007, "GROUP_AGENT_LIMIT", "a group has at most 20 agents"),
  cannotRemoveOwner: entry(Code.InvalidArgument, 4008, "CANNOT_KICK_OWNER", "the owner cannot be removed"),
  ownerCannotLeave: entry(Code.PermissionDenied, 4012, "OWNER_CANNOT_LEAVE", "the owner cannot leave; dissolve the group instead"),
  groupTooSmall: entry(Code.FailedPrecondition, 4013, "GROUP_TOO_FEW_MEMBERS", "a group needs at least 3 members including the creator"),
  memberNotFound: entry(Code.NotFound, 4901, "MEMBER_NOT_FOUND", "not a member of this group"),

  // 5xxx: conversations
  conversationNotFound: entry(Code.NotFound, 5001, "CONVERSATION_NOT_FOUND", "no such conversation"),
  notMember: entry(Code.PermissionDenied, 5002, "NOT_CONVERSATION_MEMBER", "you are not a member of this conversation"),
  conversationReadOnly: entry(Code.FailedPrecondition, 5003, "CONVERSATION_READONLY", "the conversation is read-only"),
  readPositionBackwards: entry(Code.InvalidArgument, 5901, "READ_POSITION_BACKWARDS", "the read position cannot move backwards"),

  // 6xxx: messages, streams and cards
  messageNotFound: entry(Code.NotFound, 6001, "MESSAGE_NOT_FOUND", "no such message"),
  notSender: entry(Code.PermissionDenied, 6002, "NOT_MESSAGE_SENDER", "only the sender can do this"),
  recallWindowClosed: entry(Code.FailedPrecondition, 6003, "RECALL_TIMEOUT", "messages can be recalled only within 24 hours of sending"),
  messageRecalled: entry(Code.FailedPrecondition, 6004, "MESSAGE_ALREADY_RECALLED", "the message was recalled"),
  streamNotFound: entry(Code.NotFound, 6009, "STREAM_NOT_FOUND", "no such stream message"),
  streamSequenceGap: entry(Code.InvalidArgument, 6010, "STREAM_SEQ_INVALID", "a delta is missing before this seq"),
  cardActionNotFound: entry(Code.NotFound, 6011, "CARD_ACTION_EXPIRED", "the card action is missing or expired"),
  streamFinished: entry(Code.FailedPrecondition, 6012, "STREAM_ALREADY_ENDED", "the stream already ended or failed"),
  bodyTypeChanged: entry(Code.InvalidArgument, 6013, "MESSAGE_TYPE_MISMATCH", "the new body must have the same type as the original"),
  notACard: entry(Code.FailedPrecondition, 6014, "NOT_CARD_MESSAGE", "the message is not a card"),
  invalidBody: entry(Code.InvalidArgument, 6901, "INVALID_BODY", "the message body is invalid"),
  replyTargetNotFound: entry(Code.InvalidArgument, 6902, "REPLY_TARGET_NOT_FOUND", "the message replied to does not exist"),
  editWindowClosed: entry(Code.FailedPrecondition, 6903, "EDIT_WINDOW_CLOSED", "messages can be edited only within 24 hours of sending"),

  // 7xxx: agents and Mini Apps
  agentNotFound: entry(Code.NotFound, 7001, "AGENT_NOT_FOUND", "no such agent"),
  agentNotActive: entry(Code.FailedPrecondition, 7003, "AGENT_DELETED", "the agent is not active: it was deleted"),
  agentUsernameTaken: entry(Code.AlreadyExists, 7004, "AGENT_USERNAME_TAKEN", "the username is taken"),
  notAgentCreator: entry(Code.PermissionDenied, 7005, "NOT_AGENT_CREATOR", "only the agent's creator can do this"),
  webhookUnreachable: entry(Code.InvalidArgument, 7006, "WEBHOOK_VERIFICATION_FAILED", "the webhook URL did not answer the test request with 2xx within 5 seconds"),
  webhookUrlRequired: entry(Code.InvalidArgument, 7007, "WEBHOOK_NOT_CONFIGURED", "WEBHOOK delivery needs a webhook URL"),
  ipNotAllowed: entry(Code.PermissionDenied, 7008, "IP_NOT_ALLOWED", "this address is not in the agent's IP whitelist"),
  miniAppNotEnabled: entry(Code.FailedPrecondition, 7013, "MINI_APP_NOT_ENABLED", "the agent has not enabled its Mini App"),
  invalidMiniAppUrl: entry(Code.InvalidArgument, 7014, "INVALID_MINI_APP_URL", "the Mini App URL must be an absolute https URL"),
  noAgentAccess: entry(Code.PermissionDenied, 7015, "MINI_APP_ACCESS_DENIED", "you have no access to this agent"),
  invalidIpWhitelist: entry(Code.InvalidArgument, 7901, "INVALID_IP_WHITELIST", "every IP whitelist entry must be an IP address or a CIDR block"),
  invalidWebhookUrl: entry(Code.InvalidArgument, 7902, "INVALID_WEBHOOK_URL", "the webhook URL must be an absolute https URL"),
  invalidAgentConfig: entry(Code.InvalidArgument, 7903, "INVALID_AGENT_CONFIG", "the agent configuration is invalid"),
  agentTokenRevoked: entry(Code.Unauthenticated, 7904, "AGENT_TOKEN_REVOKED", "the agent token was regenerated or the agent deleted"),
  invalidMiniAppOrigin: entry(Code.InvalidArgument, 7905, "INVALID_MINI_APP_ORIGIN", "allowed origins must be origins such as https://app.example.com"),
  invalidMiniAppPermissions: entry(Code.InvalidArgument, 7906, "INVALID_MINI_APP_PERMISSIONS", "the permission bitmask has undefined bits"),
  launchConversationMismatch: entry(Code.PermissionDenied, 7907, "LAUNCH_CONVERSATION_MISMATCH", "the conversation is not one of yours with this agent"),

  // 8xxx: media
  fileTooLarge: entry(Code.ResourceExhausted, 8001, "FILE_TOO_LARGE", "a single-request upload carries at most 5 MB; use the chunked upload"),
  uploadSessionNotFound: entry(Code.NotFound, 8004, "UPLOAD_SESSION_NOT_FOUND", "the upload session is missing or expired"),
  uploadOffsetMismatch: entry(Code.InvalidArgument, 8005, "CHUNK_OFFSET_INVALID", "the chunk offset differs from the bytes uploaded so far"),
  uploadIncomplete: entry(Code.FailedPrecondition, 8006, "FILE_INCOMPLETE", "the uploaded bytes differ from the declared size"),
  purposeRequired: entry(Code.InvalidArgument, 8007, "INVALID_PURPOSE", "the upload purpose must be AVATAR, GROUP_AVATAR or MESSAGE"),
  mediaFileNotFound: entry(Code.NotFound, 8008, "FILE_NOT_FOUND", "no such file"),
  invalidContentType: entry(Code.InvalidArgument, 8901, "INVALID_CONTENT_TYPE", "the content type must be a MIME type such as image/png"),
  uploadTooLarge: entry(Code.ResourceExhausted, 8902, "UPLOAD_TOO_LARGE", "a chunked upload is at most 104857600 bytes"),
  chunkExceedsSize: entry(Code.ResourceExhausted, 8903, "CHUNK_EXCEEDS_SIZE", "the chunk would exceed the declared size"),
  publicUrlUnknown: entry(Code.InvalidArgument, 8904, "PUBLIC_URL_UNKNOWN", "no PUBLIC_URL is configured and the request carried no usable Host"),
  downloadLinkInvalid: entry(Code.PermissionDenied, 8905, "DOWNLOAD_LINK_INVALID", "the download link is not valid"),
  downloadLinkExpired: entry(Code.PermissionDenied, 8906, "DOWNLOAD_LINK_EXPIRED", "the download link has expired"),
  rangeNotSatisfiable: entry(Code.OutOfRange, 8907, "RANGE_NOT_SATISFIABLE", "the requested range lies outside the file"),

  // 9xxx: push and sync
  invalidPushToken: entry(Code.InvalidArgument, 9001, "INVALID_PUSH_TOKEN", "the push token or platform is invalid"),
  pushTokenNotFound: entry(Code.NotFound, 9003, "PUSH_TOKEN_NOT_FOUND", "no push token is registered for this device"),
  unknownPushDevice: entry(Code.InvalidArgument, 9901, "UNKNOWN_PUSH_DEVICE", "the device is not one of the caller's signed-in devices"),
  invalidSn: entry(Code.InvalidArgument, 9902, "INVALID_SN", "sn cannot be negative"),
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
 * How long to wait before trying a call again that was answered UNAVAILABLE, by the answer's
 * `reason`: every such answer carries it as `retryAfterMs` (decimal milliseconds), and the SDK's
 * retry honours it (sdk/src/retry.ts). A key whose owner moved or died is served again by another
 * engine within a few hundred milliseconds, so those retry soon; an engine that did not answer at
 * all, later. Whether a retry is safe is the client's to judge: only the ownership refusals and
 * NO_ENGINE say the call was never applied.
 */
export const retryAfterMsByReason: Readonly<Record<string, number>> = {
  OWNERSHIP_ELSEWHERE: 250,
  OWNERSHIP_LOST: 250,
  ENGINE_NODE_LOST: 250,
  NO_ENGINE: 250,
  UPSTREAM_FAILED: 500,
  FAN_OUT_ID_SLOT_EXPIRED: 500,
  ENGINE_TIMEOUT: 1_000,
};
const defaultRetryAfterMs = 1_000;

/** The metadata an answer of `entry` carries: an UNAVAILABLE one gains its retry delay (retryAfterMsByReason). */
export function withRetryDelay(entry: CatalogueEntry, metadata: Record<string, string>): Record<string, string> {
  if (entry.code !== Code.Unavailable || metadata.retryAfterMs !== undefined) return metadata;
  return { ...metadata, retryAfterMs: String(retryAfterMsByReason[metadata.reason ?? ""] ?? defaultRetryAfterMs) };
}
