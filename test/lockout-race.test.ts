// Attempt limits under concurrency: a burst of guesses that arrive together is counted one by one,
// so exactly the allowed number is evaluated and every later one is refused, the right secret too.
import { ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import { device, signInWithCode } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, freshEmail, lastCode, startTestServer, type TestServer } from "./support/harness.js";

interface Outcome {
  /** "OK" for a success, else the ErrorDetail's errorName. */
  name: string;
  metadata: Record<string, string>;
}

async function outcome(call: Promise<unknown>): Promise<Outcome> {
  try {
    await call;
    return { name: "OK", metadata: {} };
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    const [detail] = err.findDetails(ErrorDetailSchema);
    return { name: detail?.errorName ?? `no detail: ${err.message}`, metadata: detail?.metadata ?? {} };
  }
}

const tally = (outcomes: Outcome[]) => outcomes.reduce<Record<string, number>>((counts, o) => ({ ...counts, [o.name]: (counts[o.name] ?? 0) + 1 }), {});
const remaining = (outcomes: Outcome[], name: string) =>
  outcomes
    .filter((o) => o.name === name)
    .map((o) => Number(o.metadata.remainingAttempts))
    .sort((a, b) => b - a);

describe("Attempt limits under concurrent guesses", () => {
  let server: TestServer;
  let auth: ReturnType<typeof client<typeof AuthService>>;
  before(async () => {
    server = await startTestServer();
    auth = client(server, AuthService, "json");
  });
  after(async () => server.dispose());

  /**
   * 31 wrong guesses at once, and the right one while they are in flight but only once `limit` of
   * them were answered: it is among the attempts beyond the limit however a front spreads the
   * burst over nodes (sent merely last, it may be evaluated first on another node).
   */
  async function burst<T>(limit: number, wrong: () => Promise<T>, right: () => Promise<T>): Promise<Outcome[]> {
    let answered = 0;
    let limitReached: () => void = () => {};
    const reached = new Promise<void>((resolve) => (limitReached = resolve));
    const wrongOnes = Array.from({ length: 31 }, () =>
      outcome(wrong()).then((answer) => {
        if (++answered === limit) limitReached();
        return answer;
      }),
    );
    await reached;
    return Promise.all([...wrongOnes, outcome(right())]);
  }

  describe("AuthService.LoginPassword", () => {
    it("evaluates exactly 10 of 32 concurrent attempts, each with its own remainingAttempts, and locks the rest, the right password included", async () => {
      const user = await signInWithCode(server);
      const password = "correct horse 1";
      await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: password });
      const login = (guess: string) => auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: guess, deviceInfo: device() });

      const outcomes = await burst(10, () => login("wrong password 1"), () => login(password));
      expect(tally(outcomes)).to.deep.equal({ INVALID_PASSWORD: 10, ACCOUNT_LOCKED: 22 });
      expect(remaining(outcomes, "INVALID_PASSWORD")).to.deep.equal([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
      for (const locked of outcomes.filter((o) => o.name === "ACCOUNT_LOCKED")) {
        expect(Number(locked.metadata.retryAfterSeconds)).to.be.within(1, 15 * 60);
      }
      expect(outcomes[31].name, "the right password, sent past the limit").to.equal("ACCOUNT_LOCKED");

      const detail = await expectError(login(password), Errors.accountLocked);
      expect(Number(detail.metadata.retryAfterSeconds)).to.be.within(14 * 60, 15 * 60);
      server.clock.advance(15 * 60_000 + 1000);
      expect((await login(password)).userId).to.equal(user.userId);
    });

    it("locks for the full lockout from the 10th failure, not from the first", async () => {
      const user = await signInWithCode(server);
      await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: "correct horse 1" });
      const login = (guess: string) => auth.loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password: guess, deviceInfo: device() });
      await expectError(login("wrong password 1"), Errors.wrongPassword);
      server.clock.advance(10 * 60_000);
      for (let i = 0; i < 9; i++) await expectError(login("wrong password 1"), Errors.wrongPassword);
      server.clock.advance(10 * 60_000);
      const detail = await expectError(login("correct horse 1"), Errors.accountLocked);
      expect(Number(detail.metadata.retryAfterSeconds)).to.be.within(4 * 60, 5 * 60);
    });
  });

  describe("AuthService.VerifyCode", () => {
    it("evaluates exactly 5 of 32 concurrent codes, each with its own remainingAttempts, and refuses the rest, the right code included", async () => {
      const email = freshEmail();
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const code = lastCode(server, email);
      const wrong = code === "000000" ? "111111" : "000000";
      const verify = (guess: string) => auth.verifyCode({ verifyToken, code: guess, deviceInfo: device() });

      const outcomes = await burst(5, () => verify(wrong), () => verify(code));
      expect(tally(outcomes)).to.deep.equal({ VERIFY_CODE_INVALID: 5, VERIFY_CODE_TOO_MANY_ATTEMPTS: 27 });
      expect(remaining(outcomes, "VERIFY_CODE_INVALID")).to.deep.equal([4, 3, 2, 1, 0]);
      expect(outcomes[31].name, "the right code, sent past the limit").to.equal("VERIFY_CODE_TOO_MANY_ATTEMPTS");
      await expectError(verify(code), Errors.tooManyCodeAttempts);
    });
  });

  describe("AuthService.ResetPasswordVerify", () => {
    it("evaluates exactly 5 of 32 concurrent codes and refuses the rest, the right code included", async () => {
      const user = await signInWithCode(server);
      await client(server, AuthService, "json", user.accessToken).setupPassword({ newPassword: "correct horse 1" });
      server.clock.advance(61_000);
      const { verifyToken } = await auth.resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email });
      const code = lastCode(server, user.email, "reset");
      const wrong = code === "000000" ? "111111" : "000000";
      const verify = (guess: string) => auth.resetPasswordVerify({ verifyToken, code: guess });

      const outcomes = await burst(5, () => verify(wrong), () => verify(code));
      expect(tally(outcomes)).to.deep.equal({ VERIFY_CODE_INVALID: 5, VERIFY_CODE_TOO_MANY_ATTEMPTS: 27 });
      expect(remaining(outcomes, "VERIFY_CODE_INVALID")).to.deep.equal([4, 3, 2, 1, 0]);
      await expectError(verify(code), Errors.tooManyCodeAttempts);
    });
  });
});
