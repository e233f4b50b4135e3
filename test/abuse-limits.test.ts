// Limits across identities: codes per client address and for the whole server, and secret checks
// per address. Client addresses are simulated with X-Forwarded-For behind a trusted 127.0.0.1.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { loadConfig } from "../shared/config.js";
import { Errors, type CatalogueEntry } from "../shared/errors.js";
import { addressBucket } from "../engine/auth/abuse-limits.js";
import { device, signInWithCode } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, freshEmail, lastCode, startTestServer, type TestServer } from "./support/harness.js";

const limits = {
  TRUSTED_PROXIES: "127.0.0.1",
  VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "3",
  VERIFY_CODES_PER_MINUTE: "5",
  SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "4",
};

/** Well formed, so it reaches the session lookup, but no session has it. */
const unknownVerifyToken = `nxv_${"A".repeat(43)}`;

let phoneCounter = 0;
const freshPhone = () => `+1555${String(process.pid % 1000).padStart(3, "0")}${String(++phoneCounter).padStart(4, "0")}`;

/** A RESOURCE_EXHAUSTED refusal of this entry whose retry delay lies within the bounds (seconds). */
async function expectRefused(call: Promise<unknown>, entry: CatalogueEntry, maxSeconds = 60, minSeconds = 1): Promise<number> {
  expect(entry.code).to.equal(Code.ResourceExhausted);
  const detail = await expectError(call, entry);
  const retryAfterSeconds = Number(detail.metadata.retryAfterSeconds);
  expect(retryAfterSeconds, "retryAfterSeconds").to.be.within(minSeconds, maxSeconds);
  return retryAfterSeconds;
}

describe("Limits across identities", () => {
  let server: TestServer;
  // One server for the file (a cluster-shaped start costs seconds); each test begins past every
  // window and lockout an earlier one may have left (the longest lasts 15 minutes).
  before(async () => {
    server = await startTestServer({ env: limits });
  });
  beforeEach(() => server.clock.advance(16 * 60_000));
  after(async () => server.dispose());

  /** The AuthService as a client at this address (behind the trusted proxy), optionally signed in. */
  function from(address: string, token?: string): Client<typeof AuthService> {
    const transport = createConnectTransport({
      baseUrl: server.url,
      httpVersion: "1.1",
      interceptors: [
        (next) => async (req) => {
          req.header.set("x-forwarded-for", address);
          if (token) req.header.set("authorization", `Bearer ${token}`);
          return next(req);
        },
      ],
    });
    return createClient(AuthService, transport);
  }
  const emailCode = (auth: Client<typeof AuthService>, email = freshEmail()) => auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
  const phoneCode = (auth: Client<typeof AuthService>, phone = freshPhone()) => auth.requestVerifyCode({ identityType: IdentityType.PHONE, identityValue: phone });

  describe("verification codes per client address", () => {
    it("answers RESOURCE_EXHAUSTED CODE_ADDRESS_RATE_LIMITED with a retry delay once an address asked for its minute's codes, whatever the identities", async () => {
      const attacker = from("198.51.100.7");
      await emailCode(attacker);
      await phoneCode(attacker);
      await emailCode(attacker);
      await expectRefused(emailCode(attacker), Errors.codeAddressRateLimited);
      await expectRefused(phoneCode(attacker), Errors.codeAddressRateLimited);

      server.clock.advance(20_000);
      await expectRefused(emailCode(attacker), Errors.codeAddressRateLimited, 40);
    });

    it("does not hold back another address", async () => {
      const attacker = from("198.51.100.7");
      for (let i = 0; i < 3; i++) await emailCode(attacker);
      await expectRefused(emailCode(attacker), Errors.codeAddressRateLimited);
      const neighbour = from("198.51.100.8");
      const email = freshEmail();
      await emailCode(neighbour, email);
      expect(lastCode(server, email)).to.match(/^\d{6}$/);
    });

    it("opens a new window when the minute has passed", async () => {
      const address = from("203.0.113.20");
      for (let i = 0; i < 3; i++) await emailCode(address);
      await expectRefused(emailCode(address), Errors.codeAddressRateLimited);
      server.clock.advance(60_000);
      const email = freshEmail();
      await emailCode(address, email);
      expect(lastCode(server, email)).to.match(/^\d{6}$/);
    });

    it("counts ResetPasswordRequest in the same budget, before the account lookup, so probing for accounts is limited too", async () => {
      const prober = from("198.51.100.9");
      await emailCode(prober);
      for (let i = 0; i < 2; i++) {
        await expectError(prober.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: freshEmail() }), Errors.accountNotFound);
      }
      await expectRefused(prober.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: freshEmail() }), Errors.codeAddressRateLimited);
    });

    it("buckets IPv6 clients by /64: addresses of one network share a budget, another network has its own", async () => {
      await emailCode(from("2001:db8:1:2::a"));
      await emailCode(from("2001:db8:1:2:ffff::1"));
      await emailCode(from("2001:db8:1:2:1:2:3:4"));
      await expectRefused(emailCode(from("2001:db8:1:2::b")), Errors.codeAddressRateLimited);
      await emailCode(from("2001:db8:1:3::a"));
    });
  });

  describe("verification codes for the whole server", () => {
    it("answers RESOURCE_EXHAUSTED CODE_GLOBAL_RATE_LIMITED with a retry delay once the server sent its minute's codes, from any address", async () => {
      for (let i = 1; i <= 5; i++) await emailCode(from(`192.0.2.${i}`));
      server.clock.advance(30_000);
      const late = freshEmail();
      await expectRefused(emailCode(from("192.0.2.6"), late), Errors.codeGlobalRateLimited, 30);
      await expectRefused(phoneCode(from("192.0.2.7")), Errors.codeGlobalRateLimited, 30);

      // The window opened with the first code; the refused identity sent nothing, so it is not
      // held to its own 60 seconds, which would have run until 30 s from now.
      server.clock.advance(31_000);
      await emailCode(from("192.0.2.6"), late);
      expect(lastCode(server, late)).to.match(/^\d{6}$/);
    });

    it("does not count codes an address was refused, so one address cannot use up the server's budget", async () => {
      const attacker = from("198.51.100.7");
      for (let i = 0; i < 10; i++) await emailCode(attacker).catch(() => undefined);
      await expectRefused(emailCode(attacker), Errors.codeAddressRateLimited);
      await emailCode(from("192.0.2.1"));
      await emailCode(from("192.0.2.2"));
      await expectRefused(emailCode(from("192.0.2.3")), Errors.codeGlobalRateLimited);
    });
  });

  describe("sign-in attempts per client address", () => {
    async function userWithPassword() {
      const user = await signInWithCode(server);
      const password = "correct horse 1";
      await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: password });
      return { ...user, password };
    }

    it("counts LoginPassword, VerifyCode, ResetPasswordVerify and ChangePassword together, then answers SIGN_IN_RATE_LIMITED even to the right password", async () => {
      const user = await userWithPassword();
      const guesser = from("198.51.100.7");
      const login = (auth: Client<typeof AuthService>, password: string) =>
        auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password, deviceInfo: device() });
      await expectError(login(guesser, "wrong password 1"), Errors.wrongPassword);
      await expectError(guesser.verifyCode({ verifyToken: unknownVerifyToken, code: "123456", deviceInfo: device() }), Errors.verifySessionNotFound);
      await expectError(guesser.resetPasswordVerify({ verifyToken: unknownVerifyToken, code: "123456" }), Errors.verifySessionNotFound);
      await expectError(
        from("198.51.100.7", user.accessToken).changePassword({ oldPassword: "wrong password 1", newPassword: "new password 2" }),
        Errors.wrongOldPassword,
      );
      await expectRefused(login(guesser, user.password), Errors.signInRateLimited);
      await expectRefused(guesser.verifyCode({ verifyToken: unknownVerifyToken, code: "123456", deviceInfo: device() }), Errors.signInRateLimited);

      // Another address is not held back.
      const signedIn = await login(from("198.51.100.8"), user.password);
      expect(signedIn.userId).to.equal(user.userId);
    });

    it("counts guesses across accounts, unknown ones included, and opens a new window when the minute has passed", async () => {
      const sprayer = from("203.0.113.5");
      const spray = () => sprayer.loginPassword({ identityType: IdentityType.EMAIL, identityValue: freshEmail(), password: "summer2026!", deviceInfo: device() });
      for (let i = 0; i < 4; i++) await expectError(spray(), Errors.accountNotFound);
      const retryAfterSeconds = await expectRefused(spray(), Errors.signInRateLimited);
      server.clock.advance(retryAfterSeconds * 1000);
      await expectError(spray(), Errors.accountNotFound);
    });

    it("checks the address limit before the code: a right code from a limited address does not consume the session", async () => {
      const email = freshEmail();
      const { verifyToken } = await emailCode(from("198.51.100.7"), email);
      const code = lastCode(server, email);
      const guesser = from("198.51.100.7");
      for (let i = 0; i < 4; i++) await expectError(guesser.resetPasswordVerify({ verifyToken: unknownVerifyToken, code }), Errors.verifySessionNotFound);
      await expectRefused(guesser.verifyCode({ verifyToken, code, deviceInfo: device() }), Errors.signInRateLimited);
      const signed = await from("198.51.100.8").verifyCode({ verifyToken, code, deviceInfo: device() });
      expect(signed.isNewUser).to.equal(true);
    });
  });

  describe("configuration", () => {
    it("turns a limit off with 0", async () => {
      const unlimited = await startTestServer({ env: { ...limits, VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "0", VERIFY_CODES_PER_MINUTE: "0", SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "0" } });
      try {
        const auth = client(unlimited, AuthService, "json");
        for (let i = 0; i < 12; i++) await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: freshEmail() });
        for (let i = 0; i < 12; i++) {
          await expectError(auth.verifyCode({ verifyToken: unknownVerifyToken, code: "123456", deviceInfo: device() }), Errors.verifySessionNotFound);
        }
      } finally {
        await unlimited.dispose();
      }
    });

    it("defaults to 5 codes per address and 120 for the server per minute, and 30 sign-in attempts per address", () => {
      expect(loadConfig({}).abuseLimits).to.deep.equal({ codesPerAddress: 5, codesGlobal: 120, signInAttemptsPerAddress: 30 });
    });

    it("refuses to start on a value that is not a whole number from 0 to 1000000", () => {
      for (const value of ["-1", "2.5", "many", "1000001"]) {
        expect(() => loadConfig({ VERIFY_CODES_PER_MINUTE: value }), value).to.throw(/VERIFY_CODES_PER_MINUTE/);
      }
      expect(() => loadConfig({ SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: "x" })).to.throw(/SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE/);
      expect(() => loadConfig({ VERIFY_CODES_PER_ADDRESS_PER_MINUTE: "x" })).to.throw(/VERIFY_CODES_PER_ADDRESS_PER_MINUTE/);
    });
  });
});

describe("addressBucket", () => {
  it("keeps IPv4 addresses whole, IPv4-mapped ones included", () => {
    expect(addressBucket("203.0.113.9")).to.equal("203.0.113.9");
    expect(addressBucket("::ffff:203.0.113.9")).to.equal("203.0.113.9");
  });

  it("reduces IPv6 addresses to their /64, however they are written", () => {
    expect(addressBucket("2001:db8:1:2::a")).to.equal("2001:db8:1:2::/64");
    expect(addressBucket("2001:0DB8:0001:0002:ffff:0:0:1")).to.equal("2001:db8:1:2::/64");
    expect(addressBucket("2001:db8::1")).to.equal("2001:db8:0:0::/64");
    expect(addressBucket("::1")).to.equal("0:0:0:0::/64");
    expect(addressBucket("fe80::1%eth0")).to.equal("fe80:0:0:0::/64");
    expect(addressBucket("64:ff9b::192.0.2.1")).to.equal("64:ff9b:0:0::/64");
  });

  it("puts anything that is not an address in one bucket", () => {
    expect(addressBucket("")).to.equal("unknown");
    expect(addressBucket("not an address")).to.equal("unknown");
  });
});
