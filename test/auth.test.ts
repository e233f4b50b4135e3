import { randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { hashToken } from "../engine/auth/credentials.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { device, signInAnotherDevice, signInWithCode } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, freshEmail, lastCode, startTestServer, wireModes, type TestServer } from "./support/harness.js";
import { createAgent } from "./support/social.js";

const minutes = (n: number) => n * 60_000;

for (const mode of wireModes) {
  describe(`AuthService (${mode})`, () => {
    let server: TestServer;
    let auth: ReturnType<typeof client<typeof AuthService>>;
    before(async () => {
      server = await startTestServer();
      auth = client(server, AuthService, mode);
    });
    after(async () => server.dispose());

    const profileOf = (token: string) => client(server, UserService, mode, token).getProfile({});

    async function withPassword(password = "correct horse 1") {
      const user = await signInWithCode(server, mode);
      await client(server, AuthService, mode, user.accessToken).setupPassword({ newPassword: password });
      return { ...user, password };
    }

    describe("GetClientConfig", () => {
      it("answers the gateway address derived from the request host and the enabled identity types", async () => {
        const config = await auth.getClientConfig({});
        expect(config.gateway?.wsUrl).to.equal(`ws://127.0.0.1:${server.port}/ws`);
        expect(config.login?.emailEnabled).to.equal(true);
        expect(config.login?.phoneEnabled).to.equal(true);
      });
    });

    describe("RequestVerifyCode", () => {
      it("sends a code and answers a verify token with its lifetime", async () => {
        const email = freshEmail();
        const answer = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        expect(answer.verifyToken).to.match(/^nxv_/);
        expect(answer.expiresIn).to.equal(300);
        expect(lastCode(server, email)).to.match(/^\d{6}$/);
      });

      it("answers INVALID_ARGUMENT for a malformed email or phone", async () => {
        await expectError(auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: "not-an-email" }), Errors.invalidEmail);
        await expectError(auth.requestVerifyCode({ identityType: IdentityType.PHONE, identityValue: "12" }), Errors.invalidPhone);
      });

      it("answers INVALID_ARGUMENT for an unspecified identity type", async () => {
        const detail = await expectError(auth.requestVerifyCode({ identityType: IdentityType.UNSPECIFIED, identityValue: "a@b.co" }), Errors.invalidArgument);
        expect(detail.metadata.field).to.equal("identity_type");
      });

      it("allows one code per identity per 60 seconds, with a retry delay", async () => {
        const email = freshEmail();
        await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        const detail = await expectError(auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email.toUpperCase() }), Errors.codeRateLimited);
        expect(Number(detail.metadata.retryAfterSeconds)).to.be.within(1, 60);
        server.clock.advance(61_000);
        await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      });

      it("accepts phone identities and normalises separators", async () => {
        const phone = `+1555${String(Date.now()).slice(-7)}`;
        await auth.requestVerifyCode({ identityType: IdentityType.PHONE, identityValue: `${phone.slice(0, 5)} ${phone.slice(5)}` });
        expect(lastCode(server, phone)).to.match(/^\d{6}$/);
      });
    });

    describe("VerifyCode", () => {
      it("creates the account for a new identity and signs in", async () => {
        const email = freshEmail();
        const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        const signed = await auth.verifyCode({ verifyToken, code: lastCode(server, email), deviceInfo: device("device-a") });
        expect(signed.isNewUser).to.equal(true);
        expect(signed.userId).to.be.greaterThan(10000);
        expect(signed.deviceId).to.equal("device-a");
        expect(signed.accessToken).to.match(/^nxs_/);
        expect(signed.refreshToken).to.match(/^nxr_/);
        expect(signed.expiresIn).to.equal(7200);
        expect(signed.user?.email).to.equal(email);
        expect(signed.user?.username).to.equal(`u_${signed.userId}`);
        expect(signed.user?.canChangeUsername).to.equal(true);
        expect(signed.user?.hasPassword).to.equal(false);
        const profile = await profileOf(signed.accessToken);
        expect(profile.profile?.userId).to.equal(signed.userId);
      });

      it("signs an existing identity in without creating a second account", async () => {
        const first = await signInWithCode(server, mode);
        server.clock.advance(61_000);
        const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: first.email });
        const again = await auth.verifyCode({ verifyToken, code: lastCode(server, first.email), deviceInfo: device() });
        expect(again.isNewUser).to.equal(false);
        expect(again.userId).to.equal(first.userId);
        expect(again.user).to.equal(undefined);
      });

      it("answers INVALID_ARGUMENT for a wrong code with the attempts left, and RESOURCE_EXHAUSTED after 5 failures", async () => {
        const email = freshEmail();
        const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        const code = lastCode(server, email);
        const wrong = code === "000000" ? "111111" : "000000";
        for (let attempt = 1; attempt <= 5; attempt++) {
          const detail = await expectError(auth.verifyCode({ verifyToken, code: wrong, deviceInfo: device() }), Errors.wrongCode);
          expect(detail.metadata.remainingAttempts).to.equal(String(5 - attempt));
        }
        await expectError(auth.verifyCode({ verifyToken, code, deviceInfo: device() }), Errors.tooManyCodeAttempts);
      });

      it("consumes the session: a second use answers NOT_FOUND", async () => {
        const email = freshEmail();
        const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        const code = lastCode(server, email);
        await auth.verifyCode({ verifyToken, code, deviceInfo: device() });
        await expectError(auth.verifyCode({ verifyToken, code, deviceInfo: device() }), Errors.verifySessionNotFound);
      });

      it("answers NOT_FOUND once the session expired", async () => {
        const email = freshEmail();
        const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
        server.clock.advance(minutes(5) + 1000);
        await expectError(auth.verifyCode({ verifyToken, code: lastCode(server, email), deviceInfo: device() }), Errors.verifySessionNotFound);
      });

      it("answers INVALID_ARGUMENT for a malformed verify token and for a missing device", async () => {
        await expectError(auth.verifyCode({ verifyToken: "garbage", code: "123456", deviceInfo: device() }), Errors.malformedVerifyToken);
        const detail = await expectError(auth.verifyCode({ verifyToken: "nxv_x", code: "123456" }), Errors.invalidArgument);
        expect(detail.metadata.field).to.equal("device_info");
      });

      it("answers INVALID_ARGUMENT for a code longer than 10 characters and a device id over 128", async () => {
        await expectError(auth.verifyCode({ verifyToken: "nxv_x", code: "12345678901", deviceInfo: device() }), Errors.invalidArgument);
        await expectError(auth.verifyCode({ verifyToken: "nxv_x", code: "1", deviceInfo: device("d".repeat(129)) }), Errors.invalidArgument);
      });

      it("does not accept a reset session", async () => {
        const user = await withPassword();
        server.clock.advance(61_000);
        const { verifyToken } = await auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email });
        await expectError(
          auth.verifyCode({ verifyToken, code: lastCode(server, user.email, "reset"), deviceInfo: device() }),
          Errors.verifySessionNotFound,
        );
      });
    });

    describe("LoginPassword", () => {
      it("signs in with the password and creates a device session", async () => {
        const user = await withPassword();
        const login = await auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: user.password, deviceInfo: device("laptop") });
        expect(login.userId).to.equal(user.userId);
        expect(login.deviceId).to.equal("laptop");
        expect(login.user?.hasPassword).to.equal(true);
        const devices = await client(server, UserService, mode, login.accessToken).listDevices({});
        expect(devices.devices.map((d) => d.deviceId)).to.include.members(["laptop", user.deviceId]);
      });

      it("answers NOT_FOUND for an unknown account and UNAUTHENTICATED for a wrong password", async () => {
        await expectError(auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: freshEmail(), password: "whatever123", deviceInfo: device() }), Errors.accountNotFound);
        const user = await withPassword();
        const detail = await expectError(
          auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "wrong password 1", deviceInfo: device() }),
          Errors.wrongPassword,
        );
        expect(detail.metadata.remainingAttempts).to.equal("9");
      });

      it("answers INVALID_ARGUMENT for a password shorter than 8", async () => {
        await expectError(auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: freshEmail(), password: "short", deviceInfo: device() }), Errors.invalidArgument);
      });

      it("locks the account after 10 consecutive failures, even for the right password, until the lock expires", async () => {
        const user = await withPassword();
        const attempt = (password: string) => auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password, deviceInfo: device() });
        for (let i = 0; i < 10; i++) await expectError(attempt("wrong password 1"), Errors.wrongPassword);
        const detail = await expectError(attempt(user.password), Errors.accountLocked);
        expect(Number(detail.metadata.retryAfterSeconds)).to.be.within(1, 15 * 60);
        server.clock.advance(minutes(15) + 1000);
        const login = await attempt(user.password);
        expect(login.userId).to.equal(user.userId);
      });

      it("counts only consecutive failures: a success resets the count", async () => {
        const user = await withPassword();
        const attempt = (password: string) => auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password, deviceInfo: device() });
        for (let i = 0; i < 9; i++) await expectError(attempt("wrong password 1"), Errors.wrongPassword);
        await attempt(user.password);
        const detail = await expectError(attempt("wrong password 1"), Errors.wrongPassword);
        expect(detail.metadata.remainingAttempts).to.equal("9");
      });
    });

    describe("RefreshToken", () => {
      it("rotates: the new tokens work and the previous refresh token stops working", async () => {
        const user = await signInWithCode(server, mode);
        const renewed = await auth.refreshToken({ refreshToken: user.refreshToken });
        expect(renewed.expiresIn).to.equal(7200);
        expect(renewed.refreshToken).to.not.equal(user.refreshToken);
        expect((await profileOf(renewed.accessToken)).profile?.userId).to.equal(user.userId);
        await expectError(auth.refreshToken({ refreshToken: user.refreshToken }), Errors.invalidRefreshToken);
        await auth.refreshToken({ refreshToken: renewed.refreshToken });
      });

      it("answers UNAUTHENTICATED for garbage, and for a refresh token of a logged-out device", async () => {
        await expectError(auth.refreshToken({ refreshToken: "garbage" }), Errors.invalidRefreshToken);
        const user = await signInWithCode(server, mode);
        await client(server, AuthService, mode, user.accessToken).logout({});
        await expectError(auth.refreshToken({ refreshToken: user.refreshToken }), Errors.invalidRefreshToken);
      });

      it("renews an expired access token", async () => {
        const user = await signInWithCode(server, mode);
        server.clock.advance(2 * 60 * 60_000 + 1000);
        await expectError(profileOf(user.accessToken), Errors.tokenExpired);
        const renewed = await auth.refreshToken({ refreshToken: user.refreshToken });
        expect((await profileOf(renewed.accessToken)).profile?.userId).to.equal(user.userId);
      });
    });

    describe("Logout and LogoutAll", () => {
      it("Logout revokes the current device only", async () => {
        const first = await signInWithCode(server, mode);
        const second = await signInAnotherDevice(server, first.email);
        await client(server, AuthService, mode, first.accessToken).logout({});
        await expectError(profileOf(first.accessToken), Errors.unauthenticated);
        expect((await profileOf(second.accessToken)).profile?.userId).to.equal(first.userId);
      });

      it("LogoutAll revokes every device", async () => {
        const first = await signInWithCode(server, mode);
        const second = await signInAnotherDevice(server, first.email);
        await client(server, AuthService, mode, second.accessToken).logoutAll({});
        await expectError(profileOf(first.accessToken), Errors.unauthenticated);
        await expectError(profileOf(second.accessToken), Errors.unauthenticated);
        await expectError(auth.refreshToken({ refreshToken: first.refreshToken }), Errors.invalidRefreshToken);
      });

      it("answer UNAUTHENTICATED without a token", async () => {
        await expectError(auth.logout({}), Errors.unauthenticated);
        await expectError(auth.logoutAll({}), Errors.unauthenticated);
      });
    });

    describe("SetupPassword", () => {
      it("enables password login once; a second call answers FAILED_PRECONDITION", async () => {
        const user = await withPassword("first password 1");
        const signedIn = client(server, AuthService, mode, user.accessToken);
        await expectError(signedIn.setupPassword({ newPassword: "second password 2" }), Errors.passwordAlreadySet);
        expect((await profileOf(user.accessToken)).profile?.hasPassword).to.equal(true);
      });

      it("answers INVALID_ARGUMENT for a weak or out-of-bounds password", async () => {
        const user = await signInWithCode(server, mode);
        const signedIn = client(server, AuthService, mode, user.accessToken);
        await expectError(signedIn.setupPassword({ newPassword: "onlyletters" }), Errors.weakPassword);
        await expectError(signedIn.setupPassword({ newPassword: "12345678" }), Errors.weakPassword);
        await expectError(signedIn.setupPassword({ newPassword: "a1" }), Errors.invalidArgument);
        await expectError(signedIn.setupPassword({ newPassword: "a1".repeat(65) }), Errors.invalidArgument);
      });
    });

    describe("ChangePassword", () => {
      it("changes the password and revokes every other device, keeping the current one", async () => {
        const user = await withPassword("old password 1");
        const other = await signInAnotherDevice(server, user.email);
        await client(server, AuthService, mode, user.accessToken).changePassword({ oldPassword: "old password 1", newPassword: "new password 2" });
        await expectError(profileOf(other.accessToken), Errors.unauthenticated);
        expect((await profileOf(user.accessToken)).profile?.userId).to.equal(user.userId);
        await expectError(
          auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "old password 1", deviceInfo: device() }),
          Errors.wrongPassword,
        );
        await auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "new password 2", deviceInfo: device() });
      });

      it("answers UNAUTHENTICATED for a wrong old password, FAILED_PRECONDITION without a password, INVALID_ARGUMENT for a weak one", async () => {
        const user = await withPassword("old password 1");
        const signedIn = client(server, AuthService, mode, user.accessToken);
        await expectError(signedIn.changePassword({ oldPassword: "not the one 1", newPassword: "new password 2" }), Errors.wrongOldPassword);
        await expectError(signedIn.changePassword({ oldPassword: "old password 1", newPassword: "weakpassword" }), Errors.weakPassword);
        const noPassword = await signInWithCode(server, mode);
        await expectError(
          client(server, AuthService, mode, noPassword.accessToken).changePassword({ oldPassword: "whatever 1", newPassword: "new password 2" }),
          Errors.passwordNotSet,
        );
      });
    });

    describe("password reset", () => {
      async function resetToken(email: string) {
        server.clock.advance(61_000);
        const { verifyToken, expiresIn } = await auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: email });
        expect(expiresIn).to.equal(300);
        const answer = await auth.resetPasswordVerify({ verifyToken, code: lastCode(server, email, "reset") });
        expect(answer.expiresIn).to.equal(600);
        return answer.resetToken;
      }

      it("resets the password in three steps and revokes every device session", async () => {
        const user = await withPassword("old password 1");
        const other = await signInAnotherDevice(server, user.email);
        const token = await resetToken(user.email);
        await auth.resetPasswordConfirm({ resetToken: token, newPassword: "reset password 3" });
        await expectError(profileOf(user.accessToken), Errors.unauthenticated);
        await expectError(profileOf(other.accessToken), Errors.unauthenticated);
        await auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "reset password 3", deviceInfo: device() });
      });

      it("sets a first password for an account that had none", async () => {
        const user = await signInWithCode(server, mode);
        await auth.resetPasswordConfirm({ resetToken: await resetToken(user.email), newPassword: "first password 1" });
        await auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: "first password 1", deviceInfo: device() });
      });

      it("uses a reset token once", async () => {
        const user = await withPassword();
        const token = await resetToken(user.email);
        await auth.resetPasswordConfirm({ resetToken: token, newPassword: "reset password 3" });
        await expectError(auth.resetPasswordConfirm({ resetToken: token, newPassword: "reset password 4" }), Errors.resetTokenNotFound);
      });

      it("keeps the token usable after a weak password is refused", async () => {
        const user = await withPassword();
        const token = await resetToken(user.email);
        await expectError(auth.resetPasswordConfirm({ resetToken: token, newPassword: "weakpassword" }), Errors.weakPassword);
        await auth.resetPasswordConfirm({ resetToken: token, newPassword: "strong password 5" });
      });

      it("expires the reset token after 10 minutes", async () => {
        const user = await withPassword();
        const token = await resetToken(user.email);
        server.clock.advance(minutes(10) + 1000);
        await expectError(auth.resetPasswordConfirm({ resetToken: token, newPassword: "reset password 3" }), Errors.resetTokenNotFound);
      });

      it("answers NOT_FOUND for an unknown account, shares the code rate limit with sign-in, and refuses login sessions", async () => {
        await expectError(auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: freshEmail() }), Errors.accountNotFound);
        const user = await withPassword();
        server.clock.advance(61_000);
        const { verifyToken: loginToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: user.email });
        await expectError(auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email }), Errors.codeRateLimited);
        await expectError(auth.resetPasswordVerify({ verifyToken: loginToken, code: lastCode(server, user.email) }), Errors.verifySessionNotFound);
      });

      it("counts wrong reset codes: INVALID_ARGUMENT five times, then RESOURCE_EXHAUSTED", async () => {
        const user = await withPassword();
        server.clock.advance(61_000);
        const { verifyToken } = await auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email });
        const code = lastCode(server, user.email, "reset");
        const wrong = code === "999999" ? "888888" : "999999";
        for (let i = 0; i < 5; i++) await expectError(auth.resetPasswordVerify({ verifyToken, code: wrong }), Errors.wrongCode);
        await expectError(auth.resetPasswordVerify({ verifyToken, code }), Errors.tooManyCodeAttempts);
      });

      it("answers NOT_FOUND for an unknown reset token", async () => {
        await expectError(auth.resetPasswordConfirm({ resetToken: "nxp_unknown", newPassword: "reset password 3" }), Errors.resetTokenNotFound);
        await expectError(auth.resetPasswordVerify({ verifyToken: `nxv_${"A".repeat(43)}`, code: "123456" }), Errors.verifySessionNotFound);
      });
    });

    describe("access labels", () => {
      it("answers UNAUTHENTICATED for a missing, malformed or unknown bearer token", async () => {
        await expectError(client(server, UserService, mode).getProfile({}), Errors.unauthenticated);
        await expectError(client(server, UserService, mode, "garbage").getProfile({}), Errors.unauthenticated);
        await expectError(client(server, UserService, mode, `nxs_${"A".repeat(43)}`).getProfile({}), Errors.unauthenticated);
        await expectError(client(server, UserService, mode, `nxa_${"A".repeat(43)}`).getProfile({}), Code.Unauthenticated);
      });

      it("still accepts tokens issued with the earlier ply_ prefixes, each for its own kind only", async () => {
        const legacy = (prefix: string) => prefix + randomBytes(32).toString("base64url");
        const user = await signInWithCode(server, mode);
        const agent = await createAgent(server, user, mode);
        const access = legacy("ply_u_");
        const refresh = legacy("ply_r_");
        const agentToken = legacy("ply_a_");
        const agentTokenAsUser = legacy("ply_u_");
        // Stored as such a server stored them: hashes of the whole token.
        const store = await openServerStore(server);
        try {
          const now = server.clock.now();
          const swapped = await store.sessions.rotateTokens(user.userId, user.deviceId, hashToken(user.refreshToken), {
            accessTokenHash: hashToken(access),
            accessExpiresAt: now + minutes(60),
            refreshTokenHash: hashToken(refresh),
            refreshExpiresAt: now + minutes(60),
            lastActiveAt: now,
          });
          expect(swapped).to.equal(true);
          await store.agents.updateAgent(agent.userId, { tokenHash: hashToken(agentToken) });
        } finally {
          await store.close();
        }
        expect((await profileOf(access)).profile?.userId).to.equal(user.userId);
        expect((await profileOf(agentToken)).profile?.userId).to.equal(agent.userId);
        const renewed = await auth.refreshToken({ refreshToken: refresh });
        expect(renewed.accessToken).to.match(/^nxs_/);
        expect(renewed.refreshToken).to.match(/^nxr_/);
        expect((await profileOf(renewed.accessToken)).profile?.userId).to.equal(user.userId);
        // A prefix still names the kind: an agent's token hash presented as a user token finds nothing.
        const store2 = await openServerStore(server);
        try {
          await store2.agents.updateAgent(agent.userId, { tokenHash: hashToken(agentTokenAsUser) });
        } finally {
          await store2.close();
        }
        await expectError(profileOf(agentTokenAsUser), Errors.unauthenticated);
      });
    });
  });
}
