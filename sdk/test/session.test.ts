// The token session's rules with a scripted RefreshToken: one refresh at a time, a refresh only
// for the token that was refused, and the difference between a refusal and a network failure.
import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { SessionEndedError, TokenSession, type RefreshedTokens, type SessionTokens } from "../src/index.js";

interface Scripted {
  session: TokenSession;
  calls: string[];
  saved: (SessionTokens | undefined)[];
  ended: unknown[];
  answer: (refreshToken: string) => Promise<RefreshedTokens>;
}

function sessionOf(tokens: SessionTokens | undefined, clock = { now: 1_000_000 }): Scripted {
  const scripted: Scripted = {
    calls: [],
    saved: [],
    ended: [],
    answer: async (refreshToken) => ({ accessToken: `access-after-${refreshToken}`, refreshToken: `${refreshToken}+`, expiresIn: 7200 }),
    session: undefined as unknown as TokenSession,
  };
  scripted.session = new TokenSession({
    tokens,
    refresh: (refreshToken) => {
      scripted.calls.push(refreshToken);
      return scripted.answer(refreshToken);
    },
    onTokens: (next) => {
      scripted.saved.push(next);
    },
    onSessionEnded: (cause) => scripted.ended.push(cause),
    now: () => clock.now,
  });
  return scripted;
}

describe("sdk: token session", () => {
  it("shares one refresh among every caller that saw the same token refused", async () => {
    const s = sessionOf({ accessToken: "a1", refreshToken: "r1" });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const original = s.answer;
    s.answer = async (refreshToken) => {
      await gate;
      return original(refreshToken);
    };
    const waiting = [s.session.refresh("a1"), s.session.refresh("a1"), s.session.accessToken(), s.session.refresh("a1")];
    release();
    expect(await Promise.all(waiting)).to.deep.equal(Array(4).fill("access-after-r1"));
    expect(s.calls).to.deep.equal(["r1"]);
    expect(s.saved).to.have.length(1);
    expect(s.saved[0]).to.deep.include({ accessToken: "access-after-r1", refreshToken: "r1+" });
  });

  it("does not refresh again for a token already replaced", async () => {
    const s = sessionOf({ accessToken: "a1", refreshToken: "r1" });
    await s.session.refresh("a1");
    expect(await s.session.refresh("a1")).to.equal("access-after-r1");
    expect(s.calls).to.deep.equal(["r1"]);
  });

  it("refreshes ahead of expiry by its own clock, with the rotated refresh token each time", async () => {
    const clock = { now: 1_000_000 };
    const s = sessionOf({ accessToken: "a1", refreshToken: "r1", accessExpiresAt: clock.now + 120_000 }, clock);
    expect(await s.session.accessToken()).to.equal("a1");
    clock.now += 61_000; // within the 60 s leeway
    expect(await s.session.accessToken()).to.equal("access-after-r1");
    expect(s.session.current?.accessExpiresAt).to.equal(clock.now + 7_200_000);
    clock.now += 7_200_000;
    expect(await s.session.accessToken()).to.equal("access-after-r1+");
    expect(s.calls).to.deep.equal(["r1", "r1+"]);
  });

  it("keeps the tokens when the refresh fails for a reason other than a refusal", async () => {
    const s = sessionOf({ accessToken: "a1", refreshToken: "r1" });
    s.answer = async () => {
      throw new ConnectError("connection refused", Code.Unavailable);
    };
    const failure = await s.session.refresh("a1").catch((err: unknown) => err);
    expect(failure).to.be.instanceOf(ConnectError);
    expect(s.session.current).to.deep.equal({ accessToken: "a1", refreshToken: "r1" });
    expect(s.ended).to.deep.equal([]);
    s.answer = async (refreshToken) => ({ accessToken: "a2", refreshToken: `${refreshToken}+`, expiresIn: 7200 });
    expect(await s.session.refresh("a1")).to.equal("a2");
  });

  it("ends the session when the refresh token is refused: every waiter and later caller gets SessionEndedError", async () => {
    const s = sessionOf({ accessToken: "a1", refreshToken: "r1" });
    const refusal = new ConnectError("the refresh token is invalid", Code.Unauthenticated);
    s.answer = async () => {
      throw refusal;
    };
    const outcomes = await Promise.allSettled([s.session.refresh("a1"), s.session.refresh("a1")]);
    for (const outcome of outcomes) {
      expect(outcome.status).to.equal("rejected");
      const reason = (outcome as PromiseRejectedResult).reason as SessionEndedError;
      expect(reason).to.be.instanceOf(SessionEndedError);
      expect(reason).to.be.instanceOf(ConnectError);
      expect(reason.code).to.equal(Code.Unauthenticated);
      expect(reason.cause).to.equal(refusal);
    }
    expect(s.calls).to.have.length(1);
    expect(s.ended).to.deep.equal([refusal]);
    expect(s.saved).to.deep.equal([undefined]);
    const later = await s.session.accessToken().catch((err: unknown) => err);
    expect(later).to.be.instanceOf(SessionEndedError);
    await s.session.setTokens({ accessToken: "b1", refreshToken: "q1" });
    expect(await s.session.accessToken()).to.equal("b1");
  });

  it("waits for onTokens before handing out a refreshed token", async () => {
    const order: string[] = [];
    const session = new TokenSession({
      tokens: { accessToken: "a1", refreshToken: "r1" },
      refresh: async () => ({ accessToken: "a2", refreshToken: "r2", expiresIn: 7200 }),
      onTokens: async () => {
        await new Promise((resolve) => setTimeout(resolve, 20));
        order.push("persisted");
      },
    });
    await session.refresh("a1").then(() => order.push("handed out"));
    expect(order).to.deep.equal(["persisted", "handed out"]);
  });

  it("sends an agent token as it is and cannot refresh it", async () => {
    const s = sessionOf({ accessToken: "agent-token" });
    expect(await s.session.accessToken()).to.equal("agent-token");
    expect(s.session.canRefresh).to.equal(false);
    const failure = await s.session.refresh("agent-token").catch((err: unknown) => err);
    expect(failure).to.be.instanceOf(Error);
    expect(s.calls).to.deep.equal([]);
  });
});
