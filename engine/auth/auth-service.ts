// Accounts: identities, sign-in by code or password, device sessions and their tokens, password
// setup, change and reset. Owns every credential the platform issues to users.
import { create } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import {
  ChangePasswordRequestSchema,
  ChangePasswordResponseSchema,
  GetClientConfigRequestSchema,
  GetClientConfigResponseSchema,
  LoginPasswordRequestSchema,
  LoginPasswordResponseSchema,
  LogoutAllRequestSchema,
  LogoutAllResponseSchema,
  LogoutRequestSchema,
  LogoutResponseSchema,
  RefreshTokenRequestSchema,
  RefreshTokenResponseSchema,
  RequestVerifyCodeRequestSchema,
  RequestVerifyCodeResponseSchema,
  ResetPasswordConfirmRequestSchema,
  ResetPasswordConfirmResponseSchema,
  ResetPasswordRequestRequestSchema,
  ResetPasswordRequestResponseSchema,
  ResetPasswordVerifyRequestSchema,
  ResetPasswordVerifyResponseSchema,
  SetupPasswordRequestSchema,
  SetupPasswordResponseSchema,
  VerifyCodeRequestSchema,
  VerifyCodeResponseSchema,
} from "../../shared/gen/api/v1/auth_pb.js";
import { IdentityType, type DeviceInput } from "../../shared/gen/api/v1/common_pb.js";
import {
  ListDevicesRequestSchema,
  ListDevicesResponseSchema,
  RemoveDeviceRequestSchema,
  RemoveDeviceResponseSchema,
} from "../../shared/gen/api/v1/user_pb.js";
import type { Caller } from "../../shared/caller.js";
import { BusEvents, type SessionsRevokedEvent } from "../../shared/bus.js";
import type { ResolveTokenParams, TokenIdentity } from "../../shared/identity.js";
import { requestAuthority } from "../../shared/public-url.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import { AbuseLimits } from "./abuse-limits.js";
import type { EngineDeps } from "../deps.js";
import {
  TokenPrefix,
  equalHashes,
  hashCode,
  hashPassword,
  hashToken,
  isWellFormedToken,
  newToken,
  newVerificationCode,
  passwordWeakness,
  verifyPassword,
} from "./credentials.js";
import { forgetIdentities, reachesIdentityCache } from "./identity-revocation.js";
import { requireUser, rpcAction } from "../rpc-action.js";
import { AccountType, AgentStatus, type UserRecord } from "../../ports/store/store.js";
import { deviceView, selfView } from "../views.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

export const AuthPolicy = {
  accessTokenTtlSeconds: 2 * 60 * 60,
  refreshTokenTtlSeconds: 30 * 24 * 60 * 60,
  verificationTtlSeconds: 5 * 60,
  codeIntervalSeconds: 60,
  maxFailedCodeAttempts: 5,
  resetTokenTtlSeconds: 10 * 60,
  maxFailedLogins: 10,
  lockoutSeconds: 15 * 60,
  /** Activity is recorded at most this often per session, to keep reads from becoming writes. */
  touchIntervalMs: 60_000,
} as const;

type Purpose = "login" | "reset";
type IdentityName = "IDENTITY_TYPE_EMAIL" | "IDENTITY_TYPE_PHONE";

interface VerificationSession {
  purpose: Purpose;
  identityType: IdentityName;
  identityValue: string;
  codeHash: string;
  expiresAt: number;
}

interface Identity {
  type: IdentityName;
  value: string;
}

const emailPattern = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const phonePattern = /^\+?[1-9][0-9]{5,14}$/;

/** Canonical form of an identity: emails lowercased, phones without separators. */
export function normalizeIdentity(type: IdentityType, raw: string): Identity {
  const value = raw.trim();
  if (type === IdentityType.EMAIL) {
    const email = value.toLowerCase();
    if (emailPattern.test(email)) return { type: "IDENTITY_TYPE_EMAIL", value: email };
    throw new ParleyError(Errors.invalidEmail);
  } else if (type === IdentityType.PHONE) {
    const phone = value.replace(/[\s\-().]/g, "");
    if (phonePattern.test(phone)) return { type: "IDENTITY_TYPE_PHONE", value: phone };
    throw new ParleyError(Errors.invalidPhone);
  }
  throw new ParleyError(Errors.invalidIdentity);
}

/** Password attempts since the last successful login; above the maximum the account is locked. */
const loginAttemptsKey = (userId: number) => `login-attempts:${userId}`;

/**
 * How a credential change reaches the processes that serve clients. Each resolves once every
 * process caching identities has forgotten the tokens concerned (shared/identity.ts), so the
 * change holds from the next request on; callers await it before answering.
 */
export interface CredentialChanges {
  /** These device sessions ended: their tokens stop working and their sockets close. */
  sessionsRevoked(userId: number, deviceIds: string[]): Promise<void>;
  /** These device sessions got new tokens (refresh, signing in again): the previous access tokens stop working. */
  tokensReplaced(userId: number, deviceIds: string[]): Promise<void>;
}

export class Accounts {
  private readonly limits: AbuseLimits;

  constructor(
    private readonly deps: EngineDeps,
    private readonly changes: CredentialChanges,
  ) {
    this.limits = new AbuseLimits(deps.ephemeral, deps.config.abuseLimits);
  }

  private get now(): number {
    return this.deps.clock.now();
  }

  async findByIdentity(identity: Identity): Promise<UserRecord | undefined> {
    const users = this.deps.store.users;
    return identity.type === "IDENTITY_TYPE_EMAIL" ? users.findByEmail(identity.value) : users.findByPhone(identity.value);
  }

  /**
   * Starts a verification session and sends its code: one code per identity per interval, and
   * per minute a bounded number per client address and for the whole server.
   */
  async requestCode(identityType: IdentityType, rawValue: string, purpose: Purpose, clientIp: string): Promise<{ verifyToken: string; expiresIn: number }> {
    const identity = normalizeIdentity(identityType, rawValue);
    if (!this.deps.codeSender.supports(identity.type)) throw new ParleyError(Errors.identityDisabled);
    // Counted before the account lookup, so probing which identities have accounts is limited too.
    await this.limits.codeRequestedFrom(clientIp);
    if (purpose === "reset" && !(await this.findByIdentity(identity))) throw new ParleyError(Errors.accountNotFound);

    const rateKey = `code-rate:${identity.type}:${identity.value}`;
    const intervalMs = AuthPolicy.codeIntervalSeconds * 1000;
    const nextAllowedAt = this.now + intervalMs;
    if (!(await this.deps.ephemeral.setIfAbsent(rateKey, String(nextAllowedAt), intervalMs))) {
      const allowedAt = Number(await this.deps.ephemeral.get(rateKey)) || nextAllowedAt;
      const retryAfterSeconds = Math.max(1, Math.ceil((allowedAt - this.now) / 1000));
      throw new ParleyError(Errors.codeRateLimited, { retryAfterSeconds: String(retryAfterSeconds) });
    }
    // The server-wide budget counts only codes that will be sent; a refusal here sent nothing, so
    // the identity may ask again as soon as the budget allows.
    try {
      await this.limits.codeAboutToBeSent();
    } catch (err) {
      await this.deps.ephemeral.deleteIfEquals(rateKey, String(nextAllowedAt));
      throw err;
    }

    const verifyToken = newToken(TokenPrefix.verify);
    const sessionKey = `verify:${hashToken(verifyToken)}`;
    const code = newVerificationCode();
    const ttlMs = AuthPolicy.verificationTtlSeconds * 1000;
    const session: VerificationSession = {
      purpose,
      identityType: identity.type,
      identityValue: identity.value,
      codeHash: hashCode(sessionKey, code),
      expiresAt: this.now + ttlMs,
    };
    await this.deps.ephemeral.set(sessionKey, JSON.stringify(session), ttlMs);
    try {
      await this.deps.codeSender.send({ identityType: identity.type, identityValue: identity.value, code, purpose, at: this.now });
    } catch {
      await this.deps.ephemeral.delete(sessionKey);
      await this.deps.ephemeral.delete(rateKey);
      throw new ParleyError(Errors.codeDeliveryFailed);
    }
    return { verifyToken, expiresIn: AuthPolicy.verificationTtlSeconds };
  }

  /**
   * Checks a code against its session and consumes the session on success. Each attempt reserves
   * its number in one atomic increment before the code is compared, so concurrent guesses are
   * counted one by one: after the maximum the session answers RESOURCE_EXHAUSTED even to the
   * right code, and no two wrong answers report the same remainingAttempts.
   */
  async consumeCode(verifyToken: string, code: string, purpose: Purpose, clientIp: string): Promise<Identity> {
    if (!isWellFormedToken(verifyToken, TokenPrefix.verify)) throw new ParleyError(Errors.malformedVerifyToken);
    await this.limits.secretCheckedFrom(clientIp);
    const tokenHash = hashToken(verifyToken);
    const sessionKey = `verify:${tokenHash}`;
    const raw = await this.deps.ephemeral.get(sessionKey);
    const session = raw ? (JSON.parse(raw) as VerificationSession) : undefined;
    // A login session cannot serve a reset, nor the reverse: to the caller it does not exist.
    if (!session || session.purpose !== purpose) throw new ParleyError(Errors.verifySessionNotFound);
    // The count outlives a consumed session until the session would have expired, so a straggler
    // that read the session before it was consumed still gets a number of its own.
    const attemptsKey = `verify-attempts:${tokenHash}`;
    const { count: attempt } = await this.deps.ephemeral.increment(attemptsKey, Math.max(1, session.expiresAt - this.now));
    if (attempt > AuthPolicy.maxFailedCodeAttempts) throw new ParleyError(Errors.tooManyCodeAttempts);
    if (!equalHashes(session.codeHash, hashCode(sessionKey, code))) {
      throw new ParleyError(Errors.wrongCode, { remainingAttempts: String(AuthPolicy.maxFailedCodeAttempts - attempt) });
    }
    if ((await this.deps.ephemeral.take(sessionKey)) === undefined) throw new ParleyError(Errors.verifySessionNotFound);
    return { type: session.identityType, value: session.identityValue };
  }

  private async createSession(user: UserRecord, device: DeviceInput, clientIp: string) {
    const accessToken = newToken(TokenPrefix.userAccess);
    const refreshToken = newToken(TokenPrefix.refresh);
    const now = this.now;
    await this.deps.store.sessions.upsertSession({
      userId: user.userId,
      deviceId: device.deviceId,
      deviceType: device.deviceType,
      deviceName: device.deviceName,
      deviceModel: device.deviceModel,
      osVersion: device.osVersion,
      appVersion: device.appVersion,
      loginIp: clientIp,
      loginAt: now,
      lastActiveAt: now,
      accessTokenHash: hashToken(accessToken),
      accessExpiresAt: now + AuthPolicy.accessTokenTtlSeconds * 1000,
      refreshTokenHash: hashToken(refreshToken),
      refreshExpiresAt: now + AuthPolicy.refreshTokenTtlSeconds * 1000,
    });
    // Signing in again on a device replaces its session's tokens.
    await this.changes.tokensReplaced(user.userId, [device.deviceId]);
    if (device.pushToken) {
      await this.deps.store.pushTokens.upsertPushToken({
        userId: user.userId,
        deviceId: device.deviceId,
        token: device.pushToken.token,
        platform: device.pushToken.platform,
        isSandbox: device.pushToken.isSandbox,
        updatedAt: now,
      });
    }
    return { userId: user.userId, deviceId: device.deviceId, accessToken, refreshToken, expiresIn: AuthPolicy.accessTokenTtlSeconds };
  }

  async signInWithCode(verifyToken: string, code: string, device: DeviceInput, clientIp: string) {
    const identity = await this.consumeCode(verifyToken, code, "login", clientIp);
    let user = await this.findByIdentity(identity);
    const isNewUser = !user;
    if (!user) {
      const nickname = identity.type === "IDENTITY_TYPE_EMAIL" ? identity.value.split("@")[0].slice(0, 64) : `User ${identity.value.slice(-4)}`;
      user = await this.deps.store.users.createUser({
        accountType: AccountType.user,
        email: identity.type === "IDENTITY_TYPE_EMAIL" ? identity.value : null,
        phone: identity.type === "IDENTITY_TYPE_PHONE" ? identity.value : null,
        nickname,
        createdAt: this.now,
      });
    }
    const session = await this.createSession(user, device, clientIp);
    return { ...session, isNewUser, user: isNewUser ? selfView(user) : undefined };
  }

  async signInWithPassword(identityType: IdentityType, rawValue: string, password: string, device: DeviceInput, clientIp: string) {
    const identity = normalizeIdentity(identityType, rawValue);
    await this.limits.secretCheckedFrom(clientIp);
    const user = await this.findByIdentity(identity);
    if (!user || user.accountType !== AccountType.user) throw new ParleyError(Errors.accountNotFound);
    // The attempt is reserved before the password is checked, so a burst of concurrent guesses
    // cannot all pass a lock check that none of them has yet tripped.
    const attemptsKey = loginAttemptsKey(user.userId);
    const lockoutMs = AuthPolicy.lockoutSeconds * 1000;
    const attempt = await this.deps.ephemeral.increment(attemptsKey, lockoutMs);
    if (attempt.count > AuthPolicy.maxFailedLogins) {
      throw new ParleyError(Errors.accountLocked, { retryAfterSeconds: String(Math.ceil(attempt.ttlMs / 1000)) });
    }
    if (!user.passwordHash || !(await verifyPassword(password, user.passwordHash))) {
      // The last allowed failure starts the lockout: the counter now lives a full lockout from here.
      if (attempt.count === AuthPolicy.maxFailedLogins) await this.deps.ephemeral.expire(attemptsKey, lockoutMs);
      throw new ParleyError(Errors.wrongPassword, { remainingAttempts: String(AuthPolicy.maxFailedLogins - attempt.count) });
    }
    // Success clears the count, unless attempts were reserved since this one: those may be a
    // burst of guesses, and the count must keep refusing them.
    await this.deps.ephemeral.deleteIfEquals(attemptsKey, String(attempt.count));
    const session = await this.createSession(user, device, clientIp);
    return { ...session, user: selfView(user) };
  }

  async refresh(refreshToken: string) {
    if (!isWellFormedToken(refreshToken, TokenPrefix.refresh)) throw new ParleyError(Errors.invalidRefreshToken);
    const expectedHash = hashToken(refreshToken);
    const session = await this.deps.store.sessions.findByRefreshHash(expectedHash);
    if (!session || session.refreshExpiresAt <= this.now) throw new ParleyError(Errors.invalidRefreshToken);
    const accessToken = newToken(TokenPrefix.userAccess);
    const nextRefresh = newToken(TokenPrefix.refresh);
    const now = this.now;
    const rotated = await this.deps.store.sessions.rotateTokens(session.userId, session.deviceId, expectedHash, {
      accessTokenHash: hashToken(accessToken),
      accessExpiresAt: now + AuthPolicy.accessTokenTtlSeconds * 1000,
      refreshTokenHash: hashToken(nextRefresh),
      refreshExpiresAt: now + AuthPolicy.refreshTokenTtlSeconds * 1000,
      lastActiveAt: now,
    });
    if (!rotated) throw new ParleyError(Errors.invalidRefreshToken);
    await this.changes.tokensReplaced(session.userId, [session.deviceId]);
    return { accessToken, refreshToken: nextRefresh, expiresIn: AuthPolicy.accessTokenTtlSeconds };
  }

  /**
   * The facts of a bearer token that client processes decide requests with (and cache);
   * UNAUTHENTICATED for a token that names nothing, TOKEN_EXPIRED for an expired access token. A
   * deleted agent's token still names it (inactive), so that every call it makes (RPC or /ws)
   * learns why it is refused: FAILED_PRECONDITION AGENT_NOT_ACTIVE, as the spec's state table
   * asks of UpdateAgentSelfConfig. Answering for a session records its activity, at most once a
   * minute.
   */
  async resolveToken(token: string): Promise<Omit<TokenIdentity, "cacheable">> {
    if (isWellFormedToken(token, TokenPrefix.userAccess)) {
      const session = await this.deps.store.sessions.findByAccessHash(hashToken(token));
      if (!session) throw new ParleyError(Errors.unauthenticated);
      if (session.accessExpiresAt <= this.now) throw new ParleyError(Errors.tokenExpired);
      if (this.now - session.lastActiveAt > AuthPolicy.touchIntervalMs) {
        await this.deps.store.sessions.touchSession(session.userId, session.deviceId, this.now);
      }
      return { kind: "user", userId: session.userId, deviceId: session.deviceId, expiresAt: session.accessExpiresAt, active: true, ipWhitelist: [] };
    }
    if (isWellFormedToken(token, TokenPrefix.agent)) {
      const agent = await this.deps.store.agents.findByTokenHash(hashToken(token));
      if (!agent) throw new ParleyError(Errors.unauthenticated);
      return { kind: "agent", userId: agent.agentUserId, deviceId: "", expiresAt: 0, active: agent.status === AgentStatus.active, ipWhitelist: agent.ipWhitelist };
    }
    throw new ParleyError(Errors.unauthenticated);
  }

  async revokeDevices(userId: number, deviceIds: string[]): Promise<void> {
    if (deviceIds.length > 0) await this.changes.sessionsRevoked(userId, deviceIds);
  }

  async logout(caller: Caller): Promise<void> {
    await this.deps.store.sessions.deleteSession(caller.userId, caller.deviceId);
    await this.revokeDevices(caller.userId, [caller.deviceId]);
  }

  async logoutAll(caller: Caller): Promise<void> {
    const removed = await this.deps.store.sessions.deleteSessionsExcept(caller.userId, null);
    await this.revokeDevices(caller.userId, removed);
  }

  async removeDevice(caller: Caller, deviceId: string): Promise<void> {
    if (deviceId === caller.deviceId) throw new ParleyError(Errors.cannotRemoveCurrentDevice);
    if (!(await this.deps.store.sessions.deleteSession(caller.userId, deviceId))) throw new ParleyError(Errors.deviceNotFound);
    await this.revokeDevices(caller.userId, [deviceId]);
  }

  private static checkStrength(password: string): void {
    const weakness = passwordWeakness(password);
    if (weakness) throw new ParleyError(Errors.weakPassword, {}, weakness);
  }

  async setupPassword(caller: Caller, newPassword: string): Promise<void> {
    const user = await this.requireUser(caller.userId);
    if (user.passwordHash) throw new ParleyError(Errors.passwordAlreadySet);
    Accounts.checkStrength(newPassword);
    // Stored only while there is still no password: of first passwords set at once (from two
    // nodes, or two calls in one), one is kept and the others answer as if they came second.
    const stored = await this.deps.store.users.setPasswordHash(user.userId, await hashPassword(newPassword), { ifPasswordHash: null });
    if (!stored) throw new ParleyError(Errors.passwordAlreadySet);
  }

  async changePassword(caller: Caller, oldPassword: string, newPassword: string, clientIp: string): Promise<void> {
    const user = await this.requireUser(caller.userId);
    if (!user.passwordHash) throw new ParleyError(Errors.passwordNotSet);
    await this.limits.secretCheckedFrom(clientIp);
    if (!(await verifyPassword(oldPassword, user.passwordHash))) throw new ParleyError(Errors.wrongOldPassword);
    Accounts.checkStrength(newPassword);
    const newHash = await hashPassword(newPassword);
    // Stored only while the hash just verified is still the account's. When another change or a
    // reset got in first, the old password is checked again against what that one stored, so the
    // answer is the one this call would have had coming second: WRONG_OLD_PASSWORD, unless the
    // other writer happened to set this very old password (then this change applies after it).
    // Each refusal means another write applied, so the loop ends.
    for (let verified = user.passwordHash; !(await this.deps.store.users.setPasswordHash(user.userId, newHash, { ifPasswordHash: verified })); ) {
      const current = await this.requireUser(caller.userId);
      if (!current.passwordHash) throw new ParleyError(Errors.passwordNotSet);
      if (!(await verifyPassword(oldPassword, current.passwordHash))) throw new ParleyError(Errors.wrongOldPassword);
      verified = current.passwordHash;
    }
    const removed = await this.deps.store.sessions.deleteSessionsExcept(user.userId, caller.deviceId);
    await this.revokeDevices(user.userId, removed);
  }

  async issueResetToken(verifyToken: string, code: string, clientIp: string): Promise<{ resetToken: string; expiresIn: number }> {
    const identity = await this.consumeCode(verifyToken, code, "reset", clientIp);
    const user = await this.findByIdentity(identity);
    if (!user) throw new ParleyError(Errors.accountNotFound);
    const resetToken = newToken(TokenPrefix.reset);
    await this.deps.ephemeral.set(`reset:${hashToken(resetToken)}`, String(user.userId), AuthPolicy.resetTokenTtlSeconds * 1000);
    return { resetToken, expiresIn: AuthPolicy.resetTokenTtlSeconds };
  }

  async confirmReset(resetToken: string, newPassword: string): Promise<void> {
    if (!isWellFormedToken(resetToken, TokenPrefix.reset)) throw new ParleyError(Errors.resetTokenNotFound);
    const key = `reset:${hashToken(resetToken)}`;
    if (!(await this.deps.ephemeral.get(key))) throw new ParleyError(Errors.resetTokenNotFound);
    // A weak password leaves the token usable for another try; only success consumes it.
    Accounts.checkStrength(newPassword);
    const userId = Number(await this.deps.ephemeral.take(key));
    if (!userId) throw new ParleyError(Errors.resetTokenNotFound);
    // Unconditional: the token proves control of the account's email or phone, not knowledge of
    // the current password, so the reset replaces whatever is stored. A change racing it is
    // ordered before it (and then replaced) or after it (and then refused: its old password no
    // longer verifies); a condition here would let such a change defeat the owner's reset.
    await this.deps.store.users.setPasswordHash(userId, await hashPassword(newPassword));
    await this.deps.ephemeral.delete(loginAttemptsKey(userId));
    const removed = await this.deps.store.sessions.deleteSessionsExcept(userId, null);
    await this.revokeDevices(userId, removed);
  }

  private async requireUser(userId: number): Promise<UserRecord> {
    const user = await this.deps.store.users.getUser(userId);
    if (!user) throw new ParleyError(Errors.userNotFound);
    return user;
  }

  clientConfig(requestHost: string) {
    const { config, codeSender } = this.deps;
    const wsUrl = config.publicWsUrl ?? `ws://${requestAuthority(requestHost) ?? `localhost:${config.port}`}/ws`;
    return {
      gateway: { wsUrl },
      login: { emailEnabled: codeSender.supports("IDENTITY_TYPE_EMAIL"), phoneEnabled: codeSender.supports("IDENTITY_TYPE_PHONE") },
    };
  }
}

export function authService(deps: EngineDeps): ServiceSchema {
  let accounts: Accounts;
  return {
    name: "auth",
    created() {
      const broker = this.broker;
      accounts = new Accounts(deps, {
        sessionsRevoked: async (userId, deviceIds) => {
          await forgetIdentities(broker, { userId, deviceIds });
          void broker.broadcast(BusEvents.sessionsRevoked, { userId, deviceIds } satisfies SessionsRevokedEvent);
        },
        tokensReplaced: (userId, deviceIds) => forgetIdentities(broker, { userId, deviceIds }),
      });
    },
    actions: {
      resolveToken: {
        handler: async (ctx: Context<ResolveTokenParams>): Promise<TokenIdentity> => ({
          ...(await accounts.resolveToken(ctx.params.token)),
          // The asking process may keep the answer only if a revocation can make it forget it.
          cacheable: reachesIdentityCache(ctx.broker, ctx.nodeID!),
        }),
      },
      requestVerifyCode: rpcAction(RequestVerifyCodeRequestSchema, RequestVerifyCodeResponseSchema, ({ request, clientIp }) =>
        accounts.requestCode(request.identityType, request.identityValue, "login", clientIp),
      ),
      verifyCode: rpcAction(VerifyCodeRequestSchema, VerifyCodeResponseSchema, async ({ request, clientIp }) =>
        accounts.signInWithCode(request.verifyToken, request.code, request.deviceInfo!, clientIp),
      ),
      loginPassword: rpcAction(LoginPasswordRequestSchema, LoginPasswordResponseSchema, ({ request, clientIp }) =>
        accounts.signInWithPassword(request.identityType, request.identityValue, request.password, request.deviceInfo!, clientIp),
      ),
      refreshToken: rpcAction(RefreshTokenRequestSchema, RefreshTokenResponseSchema, ({ request }) => accounts.refresh(request.refreshToken)),
      logout: rpcAction(LogoutRequestSchema, LogoutResponseSchema, async ({ caller }) => {
        await accounts.logout(requireUser(caller));
        return {};
      }),
      logoutAll: rpcAction(LogoutAllRequestSchema, LogoutAllResponseSchema, async ({ caller }) => {
        await accounts.logoutAll(requireUser(caller));
        return {};
      }),
      setupPassword: rpcAction(SetupPasswordRequestSchema, SetupPasswordResponseSchema, async ({ request, caller }) => {
        await accounts.setupPassword(requireUser(caller), request.newPassword);
        return {};
      }),
      changePassword: rpcAction(ChangePasswordRequestSchema, ChangePasswordResponseSchema, async ({ request, caller, clientIp }) => {
        await accounts.changePassword(requireUser(caller), request.oldPassword, request.newPassword, clientIp);
        return {};
      }),
      resetPasswordRequest: rpcAction(ResetPasswordRequestRequestSchema, ResetPasswordRequestResponseSchema, ({ request, clientIp }) =>
        accounts.requestCode(request.identityType, request.identityValue, "reset", clientIp),
      ),
      resetPasswordVerify: rpcAction(ResetPasswordVerifyRequestSchema, ResetPasswordVerifyResponseSchema, ({ request, clientIp }) =>
        accounts.issueResetToken(request.verifyToken, request.code, clientIp),
      ),
      resetPasswordConfirm: rpcAction(ResetPasswordConfirmRequestSchema, ResetPasswordConfirmResponseSchema, async ({ request }) => {
        await accounts.confirmReset(request.resetToken, request.newPassword);
        return {};
      }),
      getClientConfig: rpcAction(GetClientConfigRequestSchema, GetClientConfigResponseSchema, async ({ host }) =>
        create(GetClientConfigResponseSchema, accounts.clientConfig(host)),
      ),
      listDevices: rpcAction(ListDevicesRequestSchema, ListDevicesResponseSchema, async ({ caller }) => {
        const user = requireUser(caller);
        const sessions = await deps.store.sessions.listSessions(user.userId);
        return { devices: sessions.map((session) => deviceView(session, user.deviceId)) };
      }),
      removeDevice: rpcAction(RemoveDeviceRequestSchema, RemoveDeviceResponseSchema, async ({ request, caller }) => {
        await accounts.removeDevice(requireUser(caller), request.deviceId);
        return {};
      }),
    } satisfies ActionsOf<EngineActions, "auth">,
  };
}
