// The agent kit's webhook verification: the signature rule, both header sets, the timestamp limit,
// and the request listener that answers the server and hands entries over in order.
import { createHmac } from "node:crypto";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import {
  checkWebhookSignature,
  createWebhookHandler,
  signWebhook,
  verifyWebhook,
  webhookSignatureOf,
  type NonSnUpdate,
  type SnUpdate,
  type WebhookHandler,
} from "../src/index.js";

const secretKey = "sk_test_secret";
const now = 1_763_800_000;
const body = JSON.stringify({ users: [{ userId: 5 }], snUpdate: { sn: 7, contactAdded: { peerUserId: 5 } } });
/** The signature exactly as the spec defines it, computed independently of the SDK. */
const specSignature = (timestamp: string, raw: string, key = secretKey) => "sha256=" + createHmac("sha256", key).update(`${timestamp}.${raw}`).digest("hex");

describe("sdk: webhook signatures", () => {
  it("accepts the spec's signature under X-Service-* and under X-Nexus-*", () => {
    const signature = specSignature(String(now), body);
    for (const prefix of ["x-service-", "x-nexus-"]) {
      const headers = { [`${prefix}timestamp`]: String(now), [`${prefix}signature`]: signature };
      const verified = verifyWebhook(secretKey, headers, body, { nowSeconds: now });
      expect(verified.ok, prefix).to.equal(true);
      expect(verified.ok && verified.update.update.case === "snUpdate" && verified.update.update.value.sn).to.equal(7);
    }
  });

  it("signs as the server does: both header pairs, one signature", () => {
    const headers = signWebhook(secretKey, body, now);
    expect(headers["x-service-signature"]).to.equal(specSignature(String(now), body));
    expect(headers["x-nexus-signature"]).to.equal(headers["x-service-signature"]);
    expect(headers["x-nexus-timestamp"]).to.equal(String(now));
  });

  it("refuses a tampered body, another key, and a malformed signature", () => {
    const timestamp = String(now);
    expect(checkWebhookSignature(secretKey, timestamp, specSignature(timestamp, body), body + " ", { nowSeconds: now })).to.equal("bad-signature");
    expect(checkWebhookSignature(secretKey, timestamp, specSignature(timestamp, body, "other key"), body, { nowSeconds: now })).to.equal("bad-signature");
    const hex = specSignature(timestamp, body).slice("sha256=".length);
    expect(checkWebhookSignature(secretKey, timestamp, hex, body, { nowSeconds: now }), "prefix missing").to.equal("bad-signature");
    expect(checkWebhookSignature(secretKey, timestamp, "sha256=" + hex.slice(2), body, { nowSeconds: now }), "short").to.equal("bad-signature");
    expect(checkWebhookSignature(secretKey, timestamp, "sha256=" + "zz" + hex.slice(2), body, { nowSeconds: now }), "not hex").to.equal("bad-signature");
  });

  it("refuses a timestamp more than 5 minutes old or ahead, and one that is not Unix seconds", () => {
    const at = (seconds: number) => checkWebhookSignature(secretKey, String(seconds), specSignature(String(seconds), body), body, { nowSeconds: now });
    expect(at(now - 300)).to.equal(undefined);
    expect(at(now + 300)).to.equal(undefined);
    expect(at(now - 301)).to.equal("stale-timestamp");
    expect(at(now + 301)).to.equal("stale-timestamp");
    expect(checkWebhookSignature(secretKey, "17638e5", specSignature("17638e5", body), body, { nowSeconds: now })).to.equal("bad-timestamp");
    expect(checkWebhookSignature(secretKey, String(now - 3600), specSignature(String(now - 3600), body), body, { nowSeconds: now, maxAgeSeconds: 7200 })).to.equal(undefined);
  });

  it("takes each header pair whole: one pair's timestamp is never checked against the other's signature", () => {
    const signature = specSignature(String(now), body);
    expect(webhookSignatureOf({ "x-service-timestamp": String(now), "x-nexus-signature": signature })).to.equal(undefined);
    expect(verifyWebhook(secretKey, { "x-nexus-timestamp": String(now), "x-service-signature": signature }, body, { nowSeconds: now })).to.deep.equal({
      ok: false,
      reason: "missing-signature",
    });
  });

  it("checks raw bytes and Fetch API headers alike", () => {
    const headers = new Headers({ "X-Nexus-Timestamp": String(now), "X-Nexus-Signature": specSignature(String(now), body) });
    expect(verifyWebhook(secretKey, headers, new TextEncoder().encode(body), { nowSeconds: now }).ok).to.equal(true);
  });

  it("refuses a correctly signed body that is not an Update", () => {
    const raw = '{"notAnUpdate": true';
    expect(verifyWebhook(secretKey, signWebhook(secretKey, raw, now), raw, { nowSeconds: now })).to.deep.equal({ ok: false, reason: "bad-body" });
  });
});

describe("sdk: webhook request listener", () => {
  let server: Server;
  let url: string;
  let handler: WebhookHandler;
  let key = secretKey;
  const sns: number[] = [];
  const actions: string[] = [];
  const errors: unknown[] = [];

  before(async () => {
    handler = createWebhookHandler({
      secretKey: () => key,
      maxBodyBytes: 4096,
      async onUpdate(entry: SnUpdate) {
        // Slow on purpose: entries must still be handled one at a time, in order.
        await new Promise((resolve) => setTimeout(resolve, 5));
        sns.push(entry.sn);
        if (entry.sn === 30) throw new Error("handler broke");
      },
      onEphemeral(entry: NonSnUpdate) {
        if (entry.update.case === "cardAction") actions.push(entry.update.value.actionId);
      },
      onError: (err) => errors.push(err),
    });
    server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  function send(raw: string, headers: Record<string, string>, method = "POST"): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = request(url, { method, headers }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
      req.on("error", reject);
      req.end(raw);
    });
  }
  const entryBody = (sn: number) => JSON.stringify({ snUpdate: { sn, contactAdded: { peerUserId: 2 } } });
  const signed = (raw: string) => signWebhook(key, raw);

  it("answers 200 to signed requests and hands each sn over once, in order, even when retried", async () => {
    for (const sn of [10, 11, 11, 12, 10]) expect(await send(entryBody(sn), signed(entryBody(sn)))).to.equal(200);
    await handler.idle();
    expect(sns).to.deep.equal([10, 11, 12]);
    expect(handler.lastSn).to.equal(12);
  });

  it("answers 401 to a bad signature or a stale timestamp and hands nothing over", async () => {
    const raw = entryBody(20);
    expect(await send(raw, signWebhook("wrong key", raw))).to.equal(401);
    expect(await send(raw, signWebhook(key, raw, Math.floor(Date.now() / 1000) - 600))).to.equal(401);
    expect(await send(raw, { "content-type": "application/json" })).to.equal(401);
    await handler.idle();
    expect(sns).to.not.include(20);
  });

  it("acknowledges the unsigned reachability check, which carries no entry", async () => {
    expect(await send("{}", {})).to.equal(200);
  });

  it("follows a rotated secret key", async () => {
    key = "sk_rotated";
    const raw = entryBody(21);
    expect(await send(raw, signWebhook(secretKey, raw))).to.equal(401);
    expect(await send(raw, signWebhook(key, raw))).to.equal(200);
    await handler.idle();
    expect(sns.at(-1)).to.equal(21);
  });

  it("hands over card actions, and goes on after a handler fails", async () => {
    const action = JSON.stringify({ nonSnUpdate: { cardAction: { actionId: "act-1", conversationId: "5", messageId: "9", actionData: "{}" } } });
    expect(await send(action, signed(action))).to.equal(200);
    for (const sn of [30, 31]) expect(await send(entryBody(sn), signed(entryBody(sn)))).to.equal(200);
    await handler.idle();
    expect(actions).to.deep.equal(["act-1"]);
    expect(sns.slice(-2)).to.deep.equal([30, 31]);
    expect(errors.map((err) => (err as Error).message)).to.deep.equal(["handler broke"]);
  });

  it("refuses other methods and oversized bodies", async () => {
    expect(await send("", {}, "GET")).to.equal(405);
    const large = JSON.stringify({ users: [{ nickname: "x".repeat(5000) }] });
    expect(await send(large, signed(large))).to.equal(413);
  });
});
