// Token shapes: the prefix of each kind, the earlier prefix it still accepts, nothing across kinds.
import { expect } from "chai";
import { TokenPrefix, isWellFormedToken, newToken } from "./credentials.js";

const body = "A".repeat(43);

describe("token prefixes", () => {
  it("issues user access tokens as nxs_ and agent tokens as nxa_, the prefixes the upstream SDKs check", () => {
    expect(newToken(TokenPrefix.userAccess)).to.match(/^nxs_[A-Za-z0-9_-]{43}$/);
    expect(newToken(TokenPrefix.agent)).to.match(/^nxa_[A-Za-z0-9_-]{43}$/);
  });

  it("gives every kind its own prefix", () => {
    const prefixes = Object.values(TokenPrefix);
    expect(new Set(prefixes).size).to.equal(prefixes.length);
    for (const a of prefixes) for (const b of prefixes) if (a !== b) expect(a.startsWith(b), `${a} / ${b}`).to.equal(false);
  });

  it("accepts a kind's current and earlier prefix, and refuses another kind's", () => {
    const earlier = { userAccess: "ply_u_", agent: "ply_a_", refresh: "ply_r_", verify: "ply_v_", reset: "ply_p_" } as const;
    for (const [kind, old] of Object.entries(earlier) as [keyof typeof earlier, string][]) {
      expect(isWellFormedToken(TokenPrefix[kind] + body, TokenPrefix[kind]), kind).to.equal(true);
      expect(isWellFormedToken(old + body, TokenPrefix[kind]), `${kind} earlier`).to.equal(true);
      for (const [other, otherOld] of Object.entries(earlier) as [keyof typeof earlier, string][]) {
        if (other === kind) continue;
        expect(isWellFormedToken(TokenPrefix[other] + body, TokenPrefix[kind]), `${other} as ${kind}`).to.equal(false);
        expect(isWellFormedToken(otherOld + body, TokenPrefix[kind]), `${otherOld} as ${kind}`).to.equal(false);
      }
    }
  });

  it("refuses a wrong body length or a character outside base64url", () => {
    expect(isWellFormedToken(TokenPrefix.agent + body.slice(1), TokenPrefix.agent)).to.equal(false);
    expect(isWellFormedToken(TokenPrefix.agent + body + "A", TokenPrefix.agent)).to.equal(false);
    expect(isWellFormedToken(TokenPrefix.agent + body.slice(1) + "=", TokenPrefix.agent)).to.equal(false);
  });
});
