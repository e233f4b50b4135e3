// Password writes racing across two engine nodes (each with its own API tier, so each call runs on
// the node it was sent to): the store applies a password write only while the hash the caller
// checked is still there, so of SetupPassword or ChangePassword calls that arrive together exactly
// one applies, and the others answer as a call made after it would.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { engineNodes } from "../engine/shard-owners.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { Errors } from "../shared/errors.js";
import type { AdjustableClock } from "../shared/clock.js";
import type { Parley } from "../server.js";
import { device, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, lastCode, startNodes, type TestServer } from "./support/harness.js";
import { eventually } from "./support/messaging.js";

/** "OK" for a success, else the ErrorDetail's errorName. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "OK";
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return err.findDetails(ErrorDetailSchema)[0]?.errorName ?? `no detail: ${err.message}`;
  }
}

describe("Password writes racing on two nodes", () => {
  let nodes: Record<"a" | "b", Parley>;
  let clock: AdjustableClock;
  let codesFile: string;
  let dataDir: string;
  // Rounds per race: one round may by chance not interleave the two calls; several make a lost
  // update (the behaviour this guards against) all but certain to show.
  const rounds = 6;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-password-race-"));
    ({ nodes, codesFile, clock } = await startNodes(dataDir, "pwrace", { a: ["api", "gateway", "engine"], b: ["api", "gateway", "engine", "webhooks"] }));
    await eventually(() => engineNodes(nodes.a.broker).length === 2 && engineNodes(nodes.b.broker).length === 2, "both nodes seeing both engines", 30_000);
  });

  after(async () => {
    await nodes?.a.stop();
    await nodes?.b.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const on = (node: "a" | "b") => ({ url: nodes[node].url, codesFile }) as TestServer;
  const auth = (node: "a" | "b", user?: SignedIn) => client(on(node), AuthService, "json", user?.accessToken);
  const login = (user: SignedIn, password: string) =>
    auth("a").loginPassword({ identityType: IdentityType.EMAIL, identityValue: user.email, password, deviceInfo: device() });
  /** Which of the candidates is the account's password now (each other one answers INVALID_PASSWORD). */
  async function workingPassword(user: SignedIn, candidates: string[]): Promise<string> {
    const working: string[] = [];
    for (const candidate of candidates) {
      if ((await outcome(login(user, candidate))) === "OK") working.push(candidate);
    }
    expect(working, "exactly one password works").to.have.length(1);
    return working[0];
  }

  describe("AuthService.SetupPassword", () => {
    it("stores exactly one of two first passwords set at once from two nodes; the other answers PASSWORD_ALREADY_SET", async function () {
      this.timeout(60_000);
      for (let round = 0; round < rounds; round++) {
        const user = await signInWithCode(on("a"));
        const passwords = [`first password a${round}`, `first password b${round}`];
        const outcomes = await Promise.all([outcome(auth("a", user).setupPassword({ newPassword: passwords[0] })), outcome(auth("b", user).setupPassword({ newPassword: passwords[1] }))]);
        expect([...outcomes].sort(), `round ${round}`).to.deep.equal(["OK", "PASSWORD_ALREADY_SET"]);
        expect(await workingPassword(user, passwords), `round ${round}: the winner's password`).to.equal(passwords[outcomes.indexOf("OK")]);
      }
    });
  });

  describe("AuthService.ChangePassword", () => {
    it("applies exactly one of two changes from the same old password at once; the other answers WRONG_OLD_PASSWORD", async function () {
      this.timeout(60_000);
      for (let round = 0; round < rounds; round++) {
        const user = await signInWithCode(on("a"));
        const old = `old password ${round}`;
        await auth("a", user).setupPassword({ newPassword: old });
        const passwords = [`changed password a${round}`, `changed password b${round}`];
        const outcomes = await Promise.all(
          (["a", "b"] as const).map((node, i) => outcome(auth(node, user).changePassword({ oldPassword: old, newPassword: passwords[i] }))),
        );
        expect([...outcomes].sort(), `round ${round}`).to.deep.equal(["OK", "WRONG_OLD_PASSWORD"]);
        // The change revoked the other devices, not the caller's own.
        expect((await client(on("b"), UserService, "json", user.accessToken).listDevices({})).devices).to.have.length(1);
        expect(await workingPassword(user, [old, ...passwords]), `round ${round}: the winner's password`).to.equal(passwords[outcomes.indexOf("OK")]);
      }
    });

    it("after a reset confirmed at the same time, leaves the reset's password in place whichever came first", async function () {
      this.timeout(60_000);
      for (let round = 0; round < rounds; round++) {
        const user = await signInWithCode(on("a"));
        const old = `old password ${round}`;
        await auth("a", user).setupPassword({ newPassword: old });
        clock.advance(61_000);
        const { verifyToken } = await auth("a").resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: user.email });
        const { resetToken } = await auth("a").resetPasswordVerify({ verifyToken, code: lastCode(on("a"), user.email, "reset") });
        const [changed, reset] = await Promise.all([
          outcome(auth("a", user).changePassword({ oldPassword: old, newPassword: `changed password ${round}` })),
          outcome(auth("b").resetPasswordConfirm({ resetToken, newPassword: `reset password ${round}` })),
        ]);
        expect(reset, `round ${round}`).to.equal("OK");
        expect(["OK", "WRONG_OLD_PASSWORD"], `round ${round}`).to.include(changed);
        expect(await workingPassword(user, [old, `changed password ${round}`, `reset password ${round}`]), `round ${round}`).to.equal(`reset password ${round}`);
      }
    });

    it("still answers WRONG_OLD_PASSWORD for a wrong old password, and PASSWORD_NOT_SET without one", async () => {
      const user = await signInWithCode(on("b"));
      await expectError(auth("b", user).changePassword({ oldPassword: "some password 1", newPassword: "new password 2" }), Errors.passwordNotSet);
      await auth("b", user).setupPassword({ newPassword: "some password 1" });
      await expectError(auth("a", user).changePassword({ oldPassword: "other password 1", newPassword: "new password 2" }), Errors.wrongOldPassword);
      await expectError(auth("a", user).setupPassword({ newPassword: "new password 2" }), Errors.passwordAlreadySet);
      expect(await workingPassword(user, ["some password 1", "new password 2"])).to.equal("some password 1");
    });
  });
});
