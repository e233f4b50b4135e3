// The fake push providers, checked with a bare node:http2 client: a driver test passing against a
// fake that accepts anything would prove nothing, so each contract rule here must visibly bite.
import { expect } from "chai";
import { generateKeyPairSync, randomBytes, randomUUID, sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, type ClientHttp2Session, type IncomingHttpHeaders } from "node:http2";
import { request as http1Request } from "node:https";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import {
  generateServiceAccountKeys,
  makeApnsCredentials,
  makeFcmServiceAccount,
  startFakeApns,
  startFakeFcm,
  type ApnsCredentials,
  type FakeApns,
  type FakeFcm,
  type FcmServiceAccount,
} from "./fake-push-providers.js";

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

function send(session: ClientHttp2Session, method: string, path: string, headers: Record<string, string>, body = ""): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": method, ":path": path, ...headers });
    let responseHeaders: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (received) => (responseHeaders = received));
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", () => resolve({ status: Number(responseHeaders[":status"]), headers: responseHeaders, body: Buffer.concat(chunks).toString("utf8") }));
    stream.on("error", reject);
    // node:http2 ends a GET's stream itself: it has no body to write.
    if (!stream.writableEnded) stream.end(body);
  });
}

function openSession(url: string): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = connect(url);
    session.once("connect", () => resolve(session));
    session.once("error", reject);
  });
}

function base64urlJson(value: object): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

function signJwt(alg: "ES256" | "RS256", header: object, claims: object, privateKeyPem: string): string {
  const input = `${base64urlJson({ alg, ...header })}.${base64urlJson(claims)}`;
  const signature = alg === "ES256" ? sign("sha256", Buffer.from(input), { key: privateKeyPem, dsaEncoding: "ieee-p1363" }) : sign("sha256", Buffer.from(input), privateKeyPem);
  return `${input}.${signature.toString("base64url")}`;
}

const nowSeconds = () => Math.floor(Date.now() / 1000);
const TOPIC = "com.example.parley";

describe("fake push providers", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "parley-fake-push-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  describe("fake APNs", () => {
    let credentials: ApnsCredentials;
    let apns: FakeApns;
    let client: ClientHttp2Session;
    let providerToken: string;
    const deviceToken = randomBytes(32).toString("hex");
    const alert = JSON.stringify({ aps: { alert: { title: "Ada", body: "hello" }, sound: "default" }, conversationId: "c1" });
    const alertHeaders = (overrides: Record<string, string> = {}) => ({
      authorization: `bearer ${providerToken}`,
      "apns-topic": TOPIC,
      "apns-push-type": "alert",
      "apns-priority": "10",
      ...overrides,
    });
    const push = (token: string, headers: Record<string, string>, body = alert) => send(client, "POST", `/3/device/${token}`, headers, body);
    const reasonOf = (reply: Reply) => (JSON.parse(reply.body) as { reason: string }).reason;

    before(async () => {
      credentials = makeApnsCredentials(dir);
      apns = await startFakeApns({ ...credentials, topic: TOPIC });
      client = await openSession(apns.url);
      providerToken = signJwt("ES256", { kid: credentials.keyId }, { iss: credentials.teamId, iat: nowSeconds() }, credentials.keyPem);
    });
    afterEach(() => {
      apns.clearAnswers();
      apns.release();
    });
    after(async () => {
      client.close();
      await apns.close();
    });

    it("makes an Apple-shaped .p8 key with a 10-character key ID and team ID", () => {
      expect(basename(credentials.keyFile)).to.equal(`AuthKey_${credentials.keyId}.p8`);
      expect(readFileSync(credentials.keyFile, "utf8")).to.equal(credentials.keyPem).and.match(/^-----BEGIN PRIVATE KEY-----\n/);
      expect(credentials.keyId).to.match(/^[A-Z0-9]{10}$/);
      expect(credentials.teamId).to.match(/^[A-Z0-9]{10}$/);
    });

    it("accepts a valid request and records it, with the session it came on", async () => {
      const apnsId = randomUUID();
      const reply = await push(deviceToken, alertHeaders({ "apns-id": apnsId, "apns-collapse-id": "c1", "apns-expiration": "0" }));
      expect(reply.status).to.equal(200);
      expect(reply.headers["apns-id"]).to.equal(apnsId);
      expect(reply.body).to.equal("");
      const [arrival] = await apns.waitForAccepted(1, 1000);
      expect(arrival).to.include({ deviceToken, status: 200, apnsId, delivered: true });
      expect(arrival.headers).to.include({ "apns-topic": TOPIC, "apns-push-type": "alert", "apns-collapse-id": "c1" });
      expect(arrival.payload).to.deep.equal(JSON.parse(alert));
      expect(apns.jwtsSeen).to.deep.equal(new Set([providerToken]));

      const again = await push(deviceToken, alertHeaders());
      expect(again.status).to.equal(200);
      expect(again.headers["apns-id"], "a fresh apns-id when the request had none").to.match(/^[0-9a-f-]{36}$/).and.not.equal(apnsId);
      expect(apns.received.at(-1)!.sessionId, "same connection, same session").to.equal(arrival.sessionId);
      const other = await openSession(apns.url);
      try {
        expect((await push(deviceToken, alertHeaders())).status).to.equal(200);
        expect((await send(other, "POST", `/3/device/${deviceToken}`, alertHeaders(), alert)).status).to.equal(200);
        expect(apns.received.at(-1)!.sessionId).to.not.equal(arrival.sessionId);
        expect(apns.sessionsOpened).to.equal(2);
      } finally {
        other.close();
      }
    });

    it("rejects a provider token signed by another key, and one with another key ID or team", async () => {
      const stranger = generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey.export({ type: "pkcs8", format: "pem" }).toString();
      const acceptedBefore = apns.accepted.length;
      const forged = signJwt("ES256", { kid: credentials.keyId }, { iss: credentials.teamId, iat: nowSeconds() }, stranger);
      const reply = await push(deviceToken, alertHeaders({ authorization: `bearer ${forged}` }));
      expect(reply.status).to.equal(403);
      expect(reasonOf(reply)).to.equal("InvalidProviderToken");
      expect(reply.headers["apns-id"]).to.match(/^[0-9a-f-]{36}$/);
      const otherKid = signJwt("ES256", { kid: "ABCDEFGHIJ" }, { iss: credentials.teamId, iat: nowSeconds() }, credentials.keyPem);
      expect(reasonOf(await push(deviceToken, alertHeaders({ authorization: `bearer ${otherKid}` })))).to.equal("InvalidProviderToken");
      const otherTeam = signJwt("ES256", { kid: credentials.keyId }, { iss: "ZZZZZZZZZZ", iat: nowSeconds() }, credentials.keyPem);
      expect(reasonOf(await push(deviceToken, alertHeaders({ authorization: `bearer ${otherTeam}` })))).to.equal("InvalidProviderToken");
      const iatInMilliseconds = signJwt("ES256", { kid: credentials.keyId }, { iss: credentials.teamId, iat: Date.now() }, credentials.keyPem);
      expect(reasonOf(await push(deviceToken, alertHeaders({ authorization: `bearer ${iatInMilliseconds}` })))).to.equal("InvalidProviderToken");
      expect(apns.accepted).to.have.length(acceptedBefore);
      expect(apns.received.at(-1)).to.include({ status: 403, reason: "InvalidProviderToken" });
    });

    it("rejects a provider token issued over an hour ago as expired, and a missing one", async () => {
      const stale = signJwt("ES256", { kid: credentials.keyId }, { iss: credentials.teamId, iat: nowSeconds() - 3700 }, credentials.keyPem);
      const reply = await push(deviceToken, alertHeaders({ authorization: `bearer ${stale}` }));
      expect(reply.status).to.equal(403);
      expect(reasonOf(reply)).to.equal("ExpiredProviderToken");
      const { authorization: _authorization, ...unauthenticated } = alertHeaders();
      const missing = await push(deviceToken, unauthenticated);
      expect([missing.status, reasonOf(missing)]).to.deep.equal([403, "MissingProviderToken"]);
    });

    it("holds requests to the path, method and headers Apple documents", async () => {
      const { "apns-topic": _topic, ...topicless } = alertHeaders();
      const missingTopic = await push(deviceToken, topicless);
      expect([missingTopic.status, reasonOf(missingTopic)]).to.deep.equal([400, "MissingTopic"]);
      const cases: [() => Promise<Reply>, number, string][] = [
        [() => push(deviceToken, alertHeaders({ "apns-topic": "com.example.other" })), 400, "TopicDisallowed"],
        [() => push(deviceToken, alertHeaders({ "apns-push-type": "loud" })), 400, "InvalidPushType"],
        [() => push(deviceToken, alertHeaders({ "apns-priority": "7" })), 400, "BadPriority"],
        [() => push(deviceToken, alertHeaders({ "apns-expiration": "tomorrow" })), 400, "BadExpirationDate"],
        [() => push(deviceToken, alertHeaders({ "apns-collapse-id": "x".repeat(65) })), 400, "BadCollapseId"],
        [() => push(deviceToken, alertHeaders({ "apns-id": "not-a-uuid" })), 400, "BadMessageId"],
        [() => push("not-hex", alertHeaders()), 400, "BadDeviceToken"],
        [() => push(deviceToken, alertHeaders(), ""), 400, "PayloadEmpty"],
        [() => push(deviceToken, alertHeaders(), JSON.stringify({ alert: "no aps" })), 400, "BadPayload"],
        [() => push(deviceToken, alertHeaders(), JSON.stringify({ aps: { alert: "x".repeat(4100) } })), 413, "PayloadTooLarge"],
        [() => send(client, "GET", `/3/device/${deviceToken}`, alertHeaders()), 405, "MethodNotAllowed"],
        [() => send(client, "POST", `/3/devices/${deviceToken}`, alertHeaders(), alert), 404, "BadPath"],
      ];
      for (const [reply, status, reason] of cases) {
        const answered = await reply();
        expect([answered.status, reasonOf(answered)], reason).to.deep.equal([status, reason]);
      }
      const voip = await push(deviceToken, alertHeaders({ "apns-push-type": "voip", "apns-topic": `${TOPIC}.voip` }));
      expect(voip.status, "a VoIP push goes to the .voip topic").to.equal(200);
    });

    it("accepts a background push only at priority 5, with content-available and nothing to show", async () => {
      const silent = JSON.stringify({ aps: { "content-available": 1 }, sync: true });
      const background = (priority: string, body = silent) => push(deviceToken, alertHeaders({ "apns-push-type": "background", "apns-priority": priority }), body);
      const urgent = await background("10");
      expect([urgent.status, reasonOf(urgent)]).to.deep.equal([400, "BadPriority"]);
      const { "apns-priority": _priority, ...defaultPriority } = alertHeaders({ "apns-push-type": "background" });
      expect(reasonOf(await push(deviceToken, defaultPriority, silent)), "no apns-priority means 10").to.equal("BadPriority");
      expect(reasonOf(await background("5", JSON.stringify({ aps: { "content-available": 1, alert: "hi" } })))).to.equal("BadPayload");
      expect(reasonOf(await background("5", JSON.stringify({ aps: {} })))).to.equal("BadPayload");
      expect((await background("5")).status).to.equal(200);
    });

    it("answerNext gives the next valid requests the scripted answer, then answers normally", async () => {
      apns.answerNext(1, { status: 410, reason: "Unregistered" });
      const invalid = await push(deviceToken, alertHeaders({ "apns-topic": "com.example.other" }));
      expect(reasonOf(invalid), "an invalid request does not use up the scripted answer").to.equal("TopicDisallowed");
      const before = Date.now();
      const gone = await push(deviceToken, alertHeaders());
      expect(gone.status).to.equal(410);
      const body = JSON.parse(gone.body) as { reason: string; timestamp: number };
      expect(body.reason).to.equal("Unregistered");
      expect(body.timestamp).to.be.a("number").within(before - 1000, Date.now() + 1000);
      expect(apns.received.at(-1)).to.include({ status: 410, reason: "Unregistered" });
      expect((await push(deviceToken, alertHeaders())).status).to.equal(200);

      apns.answerNext(2, { status: 429, retryAfterSeconds: 3 });
      const throttled = [await push(deviceToken, alertHeaders()), await push(deviceToken, alertHeaders())];
      expect(throttled.map((reply) => [reply.status, reasonOf(reply), reply.headers["retry-after"]])).to.deep.equal([
        [429, "TooManyRequests", "3"],
        [429, "TooManyRequests", "3"],
      ]);
      expect((await push(deviceToken, alertHeaders())).status).to.equal(200);
    });

    it("answerFor answers every request for one device token so, until clearAnswers", async () => {
      const badToken = randomBytes(32).toString("hex");
      apns.answerFor(badToken, { status: 400, reason: "BadDeviceToken" });
      for (let i = 0; i < 2; i++) {
        const reply = await push(badToken, alertHeaders());
        expect([reply.status, reasonOf(reply)]).to.deep.equal([400, "BadDeviceToken"]);
      }
      expect((await push(deviceToken, alertHeaders())).status, "other tokens are unaffected").to.equal(200);
      apns.clearAnswers();
      expect((await push(badToken, alertHeaders())).status).to.equal(200);
    });

    it("holds answers until released, and reports a timeout with what arrived", async () => {
      apns.hold();
      const pending = push(deviceToken, alertHeaders());
      let settled = false;
      void pending.then(() => (settled = true));
      const abandoned = client.request({ ":method": "POST", ":path": `/3/device/${deviceToken}`, ...alertHeaders() });
      abandoned.on("error", () => {});
      abandoned.end(alert);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(settled).to.equal(false);
      expect(apns.inFlight).to.equal(2);
      const acceptedSoFar = apns.accepted.length;
      let timeout: unknown;
      await apns.waitForAccepted(acceptedSoFar + 1, 50).catch((error: unknown) => (timeout = error));
      expect(String(timeout)).to.match(new RegExp(`expected ${acceptedSoFar + 1} accepted notifications within 50 ms, got ${acceptedSoFar}.*2 still unanswered`));
      // A client that gave up before the answer: recorded, but not as accepted.
      abandoned.close();
      await new Promise((resolve) => abandoned.once("close", resolve));
      // A PING's answer comes after the server has read the stream's reset, which went before it.
      await new Promise((resolve) => client.ping(resolve));
      const receivedSoFar = apns.received.length;
      apns.release();
      expect((await pending).status).to.equal(200);
      while (apns.received.length < receivedSoFar + 2) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(apns.received.slice(receivedSoFar).map((arrival) => arrival.delivered)).to.have.members([true, false]);
      expect(apns.accepted).to.have.length(acceptedSoFar + 1);
      expect(apns.inFlight).to.equal(0);
    });
  });

  describe("fake FCM", () => {
    let fcm: FakeFcm;
    let account: FcmServiceAccount;
    let client: ClientHttp2Session;
    let accessToken: string;

    const assertion = (claims: Record<string, unknown> = {}, privateKeyPem = account.json.private_key) => {
      const iat = nowSeconds();
      return signJwt(
        "RS256",
        { typ: "JWT", kid: account.json.private_key_id },
        { iss: account.clientEmail, scope: "https://www.googleapis.com/auth/firebase.messaging", aud: fcm.tokenUri, iat, exp: iat + 3600, ...claims },
        privateKeyPem,
      );
    };
    const exchange = (jwt: string, grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer") =>
      send(client, "POST", "/token", { "content-type": "application/x-www-form-urlencoded" }, new URLSearchParams({ grant_type: grantType, assertion: jwt }).toString());
    const sendMessage = (message: Record<string, unknown>, bearer = accessToken, projectId = account.projectId) =>
      send(client, "POST", `/v1/projects/${projectId}/messages:send`, { authorization: `Bearer ${bearer}`, "content-type": "application/json" }, JSON.stringify({ message }));
    const jsonOf = (reply: Reply) => JSON.parse(reply.body) as Record<string, unknown>;
    const googleErrorOf = (reply: Reply) => (JSON.parse(reply.body) as { error: { code: number; status: string; message: string; details?: Record<string, unknown>[] } }).error;

    before(async () => {
      const keys = generateServiceAccountKeys();
      fcm = await startFakeFcm(keys);
      account = makeFcmServiceAccount(dir, fcm.tokenUri, keys);
      client = await openSession(fcm.url);
    });
    afterEach(() => fcm.clearAnswers());
    after(async () => {
      client.close();
      await fcm.close();
    });

    it("writes a service account file shaped like Google's, naming the fake's token endpoint", () => {
      const written = JSON.parse(readFileSync(account.file, "utf8")) as Record<string, string>;
      expect(written).to.deep.equal(account.json);
      expect(Object.keys(written)).to.have.members([
        "type",
        "project_id",
        "private_key_id",
        "private_key",
        "client_email",
        "client_id",
        "auth_uri",
        "token_uri",
        "auth_provider_x509_cert_url",
        "client_x509_cert_url",
        "universe_domain",
      ]);
      expect(written).to.include({ type: "service_account", project_id: account.projectId, client_email: account.clientEmail, token_uri: `${fcm.url}/token`, universe_domain: "googleapis.com" });
      expect(written.private_key).to.match(/^-----BEGIN PRIVATE KEY-----\n/);
      expect(written.client_email).to.match(new RegExp(`^[a-z0-9-]+@${account.projectId}\\.iam\\.gserviceaccount\\.com$`));
    });

    it("exchanges a signed assertion for an access token, then accepts a message sent with it", async () => {
      const requestsBefore = fcm.tokenRequests;
      const granted = await exchange(assertion());
      expect(granted.status).to.equal(200);
      const grant = jsonOf(granted);
      expect(grant).to.include({ expires_in: 3600, token_type: "Bearer" });
      expect(grant.access_token).to.be.a("string").with.length.above(20);
      accessToken = grant.access_token as string;
      expect(fcm.tokenRequests).to.equal(requestsBefore + 1);
      expect(fcm.issuedTokens.map((issued) => issued.token)).to.include(accessToken);

      const message = { token: "device-token-1", notification: { title: "Ada", body: "hello" }, data: { conversationId: "c1" }, android: { priority: "high", ttl: "3600s" }, apns: { headers: { "apns-priority": "10" }, payload: { aps: { sound: "default" } } } };
      const sent = await sendMessage(message);
      expect(sent.status).to.equal(200);
      expect(jsonOf(sent).name).to.match(new RegExp(`^projects/${account.projectId}/messages/.+`));
      const [arrival] = await fcm.waitForAccepted(1, 1000);
      expect(arrival).to.include({ token: "device-token-1", status: 200, validateOnly: false, name: jsonOf(sent).name });
      expect(arrival.message).to.deep.equal(message);
      expect(arrival.headers.authorization).to.equal(`Bearer ${accessToken}`);
    });

    it("serves the token endpoint over HTTP/1.1 too", async () => {
      const body = new URLSearchParams({ grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion: assertion() }).toString();
      const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = http1Request(fcm.tokenUri, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, agent: false }, (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
        });
        request.on("error", reject);
        request.end(body);
      });
      expect(reply.status).to.equal(200);
      expect(JSON.parse(reply.body)).to.include({ token_type: "Bearer" });
    });

    it("refuses an assertion with a bad signature or bad claims as invalid_grant, and other grants", async () => {
      const stranger = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs8", format: "pem" }).toString();
      const refusals = [
        await exchange(assertion({}, stranger)),
        await exchange(assertion({ iss: "someone@else.iam.gserviceaccount.com" })),
        await exchange(assertion({ aud: "https://oauth2.googleapis.com/token" })),
        await exchange(assertion({ scope: "https://www.googleapis.com/auth/userinfo.email" })),
        await exchange(assertion({ exp: nowSeconds() + 7200 })),
        await exchange(assertion({ iat: nowSeconds() - 4000, exp: nowSeconds() - 400 })),
      ];
      for (const reply of refusals) {
        expect(reply.status).to.equal(400);
        expect(jsonOf(reply).error).to.equal("invalid_grant");
      }
      expect(jsonOf(refusals[0]).error_description).to.equal("Invalid JWT Signature.");
      const otherGrant = await exchange(assertion(), "client_credentials");
      expect([otherGrant.status, jsonOf(otherGrant).error]).to.deep.equal([400, "unsupported_grant_type"]);
    });

    it("answers 401 UNAUTHENTICATED to an access token it never issued, or one expired", async () => {
      const unknown = await sendMessage({ token: "device-token-1" }, "ya29.made-up");
      expect(unknown.status).to.equal(401);
      expect(googleErrorOf(unknown)).to.include({ code: 401, status: "UNAUTHENTICATED" });
      expect(fcm.received.at(-1)).to.include({ status: 401 });

      const shortLived = jsonOf(await exchange(assertion())).access_token as string;
      expect((await sendMessage({ token: "device-token-1" }, shortLived)).status).to.equal(200);
      fcm.expireAccessTokens();
      expect((await sendMessage({ token: "device-token-1" }, shortLived)).status).to.equal(401);
      accessToken = jsonOf(await exchange(assertion())).access_token as string;
      expect((await sendMessage({ token: "device-token-1" })).status).to.equal(200);
    });

    it("answers 403 PERMISSION_DENIED for another project", async () => {
      const reply = await sendMessage({ token: "device-token-1" }, accessToken, "someone-elses-project");
      expect(reply.status).to.equal(403);
      expect(googleErrorOf(reply).status).to.equal("PERMISSION_DENIED");
    });

    it("scripts an UNREGISTERED answer in Google's documented shape", async () => {
      fcm.answerNext(1, { status: 404, fcmError: "UNREGISTERED" });
      const reply = await sendMessage({ token: "device-token-gone" });
      expect(reply.status).to.equal(404);
      expect(JSON.parse(reply.body)).to.deep.equal({
        error: {
          code: 404,
          message: "Requested entity was not found.",
          status: "NOT_FOUND",
          details: [{ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode: "UNREGISTERED" }],
        },
      });
      expect(fcm.received.at(-1)).to.include({ token: "device-token-gone", status: 404, fcmError: "UNREGISTERED" });
      expect((await sendMessage({ token: "device-token-gone" })).status).to.equal(200);

      fcm.answerFor("device-token-quota", { status: 429, retryAfterSeconds: 5 });
      const throttled = await sendMessage({ token: "device-token-quota" });
      expect([throttled.status, throttled.headers["retry-after"], googleErrorOf(throttled).status, googleErrorOf(throttled).details?.[0].errorCode]).to.deep.equal([
        429,
        "5",
        "RESOURCE_EXHAUSTED",
        "QUOTA_EXCEEDED",
      ]);
      fcm.answerFor("device-token-bad", { status: 400, fcmError: "INVALID_ARGUMENT", tokenField: true });
      const bad = await sendMessage({ token: "device-token-bad" });
      expect(googleErrorOf(bad).details).to.deep.include({ "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [{ field: "message.token", description: "Invalid registration token" }] });
    });

    it("refuses an invalid message with 400 INVALID_ARGUMENT", async () => {
      const acceptedBefore = fcm.accepted.length;
      const nonString = await sendMessage({ token: "device-token-1", data: { conversationId: "c1", unread: 3 } });
      expect(nonString.status).to.equal(400);
      const error = googleErrorOf(nonString);
      expect(error).to.include({ code: 400, status: "INVALID_ARGUMENT" });
      expect(error.details).to.deep.include({ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode: "INVALID_ARGUMENT" });
      expect(fcm.received.at(-1)).to.include({ status: 400, fcmError: "INVALID_ARGUMENT" });

      const emptyToken = await sendMessage({ token: "" });
      expect(googleErrorOf(emptyToken).details).to.deep.include({ "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [{ field: "message.token", description: "Invalid registration token" }] });
      const invalid = [
        { topic: "news" },
        { token: "device-token-1", topic: "news" },
        { token: "device-token-1", android: { priority: "urgent" } },
        { token: "device-token-1", android: { ttl: 3600 } },
        { token: "device-token-1", apns: { headers: { "apns-priority": 10 } } },
        { token: "device-token-1", apns: { payload: { alert: "no aps" } } },
        { token: "device-token-1", data: { from: "me" } },
        { token: "device-token-1", notifcation: { title: "typo" } },
        { token: "device-token-1", data: { blob: "x".repeat(4100) } },
      ];
      for (const message of invalid) {
        const reply = await sendMessage(message);
        expect([reply.status, googleErrorOf(reply).status], JSON.stringify(message).slice(0, 80)).to.deep.equal([400, "INVALID_ARGUMENT"]);
      }
      expect(fcm.accepted).to.have.length(acceptedBefore);
    });
  });
});
