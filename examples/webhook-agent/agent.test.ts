// The example agent's signature check, with the headers as Parley sends them and as the upstream
// SDKs name them.
import { expect } from "chai";
import { createHmac } from "node:crypto";
import { signatureOf, verifySignature } from "./agent.js";

const secretKey = "sk_example_secret";
const body = '{"sn":"7"}';
const now = 1_763_800_000;
const signed = (timestamp: number, raw = body) => "sha256=" + createHmac("sha256", secretKey).update(`${timestamp}.${raw}`).digest("hex");
const accepts = (headers: Record<string, string>) => {
  const { timestamp, signature } = signatureOf(headers);
  return verifySignature(secretKey, timestamp, signature, body, now);
};

describe("example webhook agent: signature headers", () => {
  it("accepts a request signed under X-Service-* only", () => {
    expect(accepts({ "x-service-timestamp": String(now), "x-service-signature": signed(now) })).to.equal(true);
  });

  it("accepts a request signed under X-Nexus-* only", () => {
    expect(accepts({ "x-nexus-timestamp": String(now), "x-nexus-signature": signed(now) })).to.equal(true);
  });

  it("refuses a wrong signature under either header set", () => {
    const wrong = signed(now, body + " ");
    expect(accepts({ "x-service-timestamp": String(now), "x-service-signature": wrong })).to.equal(false);
    expect(accepts({ "x-nexus-timestamp": String(now), "x-nexus-signature": wrong })).to.equal(false);
  });

  it("never pairs one set's timestamp with the other set's signature", () => {
    expect(signatureOf({ "x-service-timestamp": String(now), "x-nexus-signature": signed(now) })).to.deep.equal({ timestamp: "", signature: "" });
    expect(accepts({ "x-nexus-timestamp": String(now), "x-service-signature": signed(now) })).to.equal(false);
  });

  it("refuses a timestamp more than 5 minutes from its clock", () => {
    const stale = now - 301;
    expect(accepts({ "x-nexus-timestamp": String(stale), "x-nexus-signature": signed(stale) })).to.equal(false);
  });
});
