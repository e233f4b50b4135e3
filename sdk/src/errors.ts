// How the SDK reads Parley's errors. Every error the server answers carries one
// shared.v1.ErrorDetail; its numeric code, not the message text, is what identifies it.
import { Code, ConnectError } from "@connectrpc/connect";
import { Errors } from "../../shared/error-catalogue.js";
import { ErrorDetailSchema, type ErrorDetail } from "../../shared/gen/shared/v1/error_pb.js";

/** The Parley error codes the SDK acts on itself, taken from the server's catalogue. */
export const ErrorCodes = {
  invalidToken: Errors.unauthenticated.errorCode,
  tokenExpired: Errors.tokenExpired.errorCode,
  refreshTokenInvalid: Errors.invalidRefreshToken.errorCode,
  sessionRevoked: Errors.sessionRevoked.errorCode,
} as const;

/** The ErrorDetail an RPC error carries (JSON or binary), or undefined for other errors. */
export function errorDetailOf(err: unknown): ErrorDetail | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  return err.findDetails(ErrorDetailSchema)[0];
}

/**
 * Whether the server refused the access token itself (expired, or unknown because it was rotated
 * by a refresh elsewhere): a refreshed token may succeed. A revoked session, a wrong password or
 * an invalid refresh token are UNAUTHENTICATED too, but refreshing cannot cure them.
 */
export function isAccessTokenRejected(err: unknown): boolean {
  if (!(err instanceof ConnectError) || err.code !== Code.Unauthenticated) return false;
  const code = errorDetailOf(err)?.errorCode;
  return code === ErrorCodes.tokenExpired || code === ErrorCodes.invalidToken;
}

/**
 * Thrown by calls once the session has ended (the refresh token was refused). It is a
 * ConnectError (UNAUTHENTICATED, carrying the refusal's ErrorDetail and the refusal as `cause`),
 * so it reaches callers as it is, and code that only looks at RPC codes treats it like any
 * refused credential.
 */
export class SessionEndedError extends ConnectError {
  constructor(options: { cause?: unknown } = {}) {
    const details = options.cause instanceof ConnectError ? options.cause.details : [];
    super("the Parley session has ended: sign in again", Code.Unauthenticated, undefined, undefined, options.cause);
    this.details = details;
    // The name stays "ConnectError": Connect recognises its errors by name, and would otherwise
    // wrap this one in a ConnectError of code "unknown".
  }

  // ConnectError's own instanceof check is inherited and would accept any ConnectError here.
  static override [Symbol.hasInstance](value: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(SessionEndedError, value);
  }
}

/** The gateway refused the connection's authentication, revoked it, or reported a connection-level error. */
export class GatewayError extends Error {
  constructor(
    message: string,
    /** The server's ErrorDetail, when it sent one. */
    readonly detail?: ErrorDetail,
    /** Whether the server closes the connection because of it. */
    readonly fatal = false,
  ) {
    super(detail ? `${message}: ${detail.errorName} (${detail.errorCode})` : message);
    this.name = "GatewayError";
  }
}
