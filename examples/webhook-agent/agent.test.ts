// The example agent's HTTPS endpoint as Parley reaches it: what it accepts and what it refuses,
// under the headers Parley sends and the ones the upstream SDKs name. Only verified requests get
// 200, apart from the configuration-time reachability check, which carries no event. (Its replies
// and card answers are covered end to end by test/agent-e2e.test.ts.)
import { expect } from "chai";
import { readFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { signWebhook } from "@parley/sdk";
import { testTlsDir } from "../../test/support/https-receiver.js";
import { startWebhookAgent, type RunningAgent } from "./agent.js";

const secretKey = "sk_example_secret";
// An entry the agent takes no action on, so no request to a server follows.
const body = JSON.stringify({ snUpdate: { sn: 7, friendRequestSent: { requestId: "1", targetUserId: 2 } } });
const now = () => Math.floor(Date.now() / 1000);

function post(url: string, headers: Record<string, string>, payload = body): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "content-type": "application/json", ...headers } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end(payload);
  });
}

const only = (headers: Record<string, string>, prefix: "x-service-" | "x-nexus-") =>
  Object.fromEntries(Object.entries(headers).filter(([name]) => name.startsWith(prefix)));

describe("example webhook agent: its HTTPS endpoint", () => {
  let agent: RunningAgent;
  before(async () => {
    const tls = testTlsDir();
    agent = await startWebhookAgent({
      serverUrl: "http://127.0.0.1:9",
      token: "unused by these requests",
      secretKey,
      tls: { cert: readFileSync(join(tls, "cert.pem")), key: readFileSync(join(tls, "key.pem")) },
      log: () => {},
    });
  });
  after(() => agent.close());

  it("accepts a request signed under X-Service-* only, and one under X-Nexus-* only", async () => {
    const signed = signWebhook(secretKey, body, now());
    expect(await post(agent.url, only(signed, "x-service-"))).to.equal(200);
    expect(await post(agent.url, only(signed, "x-nexus-"))).to.equal(200);
  });

  it("refuses a wrong signature under either header set", async () => {
    const wrong = signWebhook(secretKey, body + " ", now());
    expect(await post(agent.url, only(wrong, "x-service-"))).to.equal(401);
    expect(await post(agent.url, only(wrong, "x-nexus-"))).to.equal(401);
    expect(await post(agent.url, signWebhook("another key", body, now()))).to.equal(401);
  });

  it("never pairs one set's timestamp with the other set's signature", async () => {
    const signed = signWebhook(secretKey, body, now());
    expect(await post(agent.url, { "x-service-timestamp": signed["x-service-timestamp"], "x-nexus-signature": signed["x-nexus-signature"] })).to.equal(401);
  });

  it("refuses a timestamp more than 5 minutes from its clock", async () => {
    expect(await post(agent.url, signWebhook(secretKey, body, now() - 301))).to.equal(401);
  });

  it("verifies with the key it was given last (a reconfigured webhook has a new one)", async () => {
    agent.setSecretKey("sk_rotated");
    try {
      expect(await post(agent.url, signWebhook(secretKey, body, now()))).to.equal(401);
      expect(await post(agent.url, signWebhook("sk_rotated", body, now()))).to.equal(200);
    } finally {
      agent.setSecretKey(secretKey);
    }
  });

  it("acknowledges the unsigned reachability check (an empty Update) but no unsigned event", async () => {
    expect(await post(agent.url, {}, "{}")).to.equal(200);
    expect(await post(agent.url, {})).to.equal(401);
  });
});
