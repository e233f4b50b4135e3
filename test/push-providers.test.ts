// Offline push end to end through the real APNs and FCM drivers, against local servers that hold
// them to the providers' documented contract (support/fake-push-providers.ts): what a phone would
// get, provider answers acted on (dead tokens removed, passing trouble retried), credentials
// checked at start-up. Runs in one process and on the cluster's shape (two engines).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { ConversationActionType } from "../shared/gen/shared/v1/conversation_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { loadConfig } from "../shared/config.js";
import { pushFailed, pushRemovedTokens, pushRetries } from "../shared/metrics.js";
import { openPushNotifier } from "../ports/push-notifier/open-push-notifier.js";
import type { Store } from "../ports/store/store.js";
import { signInAnotherDevice, signInWithCode, type SignedIn } from "./support/accounts.js";
import { testTopology } from "./support/cluster-topology.js";
import { generateServiceAccountKeys, makeFcmServiceAccount, startPushProviders, type FakeApns, type FakeFcm, type PushProviders } from "./support/fake-push-providers.js";
import { client, openServerStore, startTestServer, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, textBody } from "./support/messaging.js";
import { befriend } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

const topic = "io.parley.test";
/** Each engine node has its own connections and credentials' tokens. */
const engineNodes = testTopology === "cluster" ? 2 : 1;
const apnsToken = () => randomBytes(32).toString("hex");
const fcmToken = () => `fcm-${randomBytes(24).toString("base64url")}`;

describe("offline push through the APNs and FCM drivers", function () {
  this.timeout(30_000);
  let dir: string;
  let production: FakeApns;
  let sandbox: FakeApns;
  let fcm: FakeFcm;
  let providers: PushProviders;
  let env: Record<string, string>;
  let server: TestServer;
  let store: Store;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-push-"));
    providers = await startPushProviders(dir, topic);
    ({ production, sandbox, fcm } = providers);
    env = { ...providers.env, PUSH_RETRY_WINDOW_MS: "4000" };
    server = await startTestServer({ env });
    store = await openServerStore(server);
  });
  afterEach(() => {
    for (const fake of [production, sandbox, fcm]) {
      fake.clearAnswers();
      fake.release();
    }
  });
  after(async () => {
    await store?.close();
    await server?.dispose();
    await providers?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const register = (user: SignedIn, token: string, platform: PushPlatform, isSandbox = false) =>
    client(server, PushService, "json", user.accessToken).registerToken({ deviceId: user.deviceId, token, platform, isSandbox });
  const send = async (from: SignedIn, conversationId: bigint, text = "hello") => {
    const { messageId } = await client(server, MessageService, "json", from.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    return messageId;
  };
  const apnsArrivals = (fake: FakeApns, token: string) => fake.received.filter((arrival) => arrival.deviceToken === token);
  const fcmArrivals = (token: string) => fcm.received.filter((arrival) => arrival.token === token);
  const nicknameOf = async (user: SignedIn) => (await store.users.getUser(user.userId))!.nickname;
  const tokensOf = async (user: SignedIn) => (await store.pushTokens.listPushTokens(user.userId)).map((token) => token.token);

  it("alerts an offline iPhone through the sandbox host and an Android phone through FCM, as each provider documents", async () => {
    const alice = await signInWithCode(server);
    const bob = await signInWithCode(server);
    const carol = await signInWithCode(server);
    const [iphone, android] = [apnsToken(), fcmToken()];
    await register(bob, iphone, PushPlatform.APNS, true);
    await register(carol, android, PushPlatform.FCM);
    const withBob = await befriend(server, alice, bob);
    const withCarol = await befriend(server, alice, carol);
    const before = Date.now();
    const toBob = await send(alice, withBob, "lunch at noon?");
    const toCarol = await send(alice, withCarol, "see you there");
    const [atApple] = await sandbox.waitForAccepted(1);
    await fcm.waitForAccepted(1);
    const nickname = await nicknameOf(alice);

    expect(apnsArrivals(production, iphone)).to.deep.equal([]);
    expect(atApple.deviceToken).to.equal(iphone);
    expect(atApple.headers).to.include({ "apns-topic": topic, "apns-push-type": "alert", "apns-priority": "10", "apns-collapse-id": `conversation-${withBob}` });
    const expiration = Number(atApple.headers["apns-expiration"]);
    expect(expiration).to.be.within(Math.floor(before / 1000) + 86_400 - 5, Math.floor(Date.now() / 1000) + 86_400 + 5);
    expect(atApple.payload).to.deep.equal({
      aps: { alert: { title: nickname, body: "lunch at noon?" }, badge: 1, sound: "default", "thread-id": String(withBob) },
      conversationId: String(withBob),
      messageId: String(toBob),
      senderId: String(alice.userId),
    });

    const [atGoogle] = fcmArrivals(android);
    expect(atGoogle.status).to.equal(200);
    const message = atGoogle.message as Record<string, Record<string, unknown>>;
    expect(message.notification).to.deep.equal({ title: nickname, body: "see you there" });
    expect(message.data).to.deep.equal({ conversationId: String(withCarol), messageId: String(toCarol), senderId: String(alice.userId), badge: "1" });
    expect(message.android).to.deep.include({ priority: "high", ttl: "86400s", collapse_key: `conversation-${withCarol}` });
    expect(message.android.notification).to.deep.equal({ tag: `conversation-${withCarol}`, notification_count: 1 });
    expect((message.apns as { headers: Record<string, string> }).headers).to.include({ "apns-push-type": "alert", "apns-priority": "10", "apns-collapse-id": `conversation-${withCarol}` });
  });

  it("reuses its connections, its APNs provider token and its FCM access token across notifications", async () => {
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const android = fcmToken();
    const iphone = apnsToken();
    await register(bob, iphone, PushPlatform.APNS);
    const bobTablet = await signInAnotherDevice(server, bob.email);
    await register(bobTablet, android, PushPlatform.FCM);
    const conversationId = await befriend(server, alice, bob);
    for (let i = 0; i < 6; i++) await send(alice, conversationId, `message ${i}`);
    await eventually(() => apnsArrivals(production, iphone).length === 6 && fcmArrivals(android).length === 6, "six notifications on each platform", 10_000);
    // Everything so far in this file went over at most one connection per host and engine, signed once.
    expect(production.sessionsOpened).to.be.at.most(engineNodes);
    expect(production.jwtsSeen.size).to.be.at.most(engineNodes);
    expect(fcm.tokenRequests).to.be.at.most(engineNodes);
    expect(new Set(fcmArrivals(android).map((arrival) => arrival.sessionId)).size).to.be.at.most(engineNodes);
    // Badges count up with bob's unread messages.
    expect(fcmArrivals(android).map((arrival) => (arrival.message as { data: { badge: string } }).data.badge)).to.have.members(["1", "2", "3", "4", "5", "6"]);
  });

  it("ClearBadge sends the iPhone a badge-0 push without alert or sound, and Android nothing", async () => {
    const bob = await signInWithCode(server);
    const iphone = apnsToken();
    await register(bob, iphone, PushPlatform.APNS);
    const bobAndroid = await signInAnotherDevice(server, bob.email);
    const android = fcmToken();
    await register(bobAndroid, android, PushPlatform.FCM);
    await client(server, PushService, "json", bob.accessToken).clearBadge({});
    await eventually(() => apnsArrivals(production, iphone).some((arrival) => arrival.status === 200), "the badge push");
    const [arrival] = apnsArrivals(production, iphone);
    expect(arrival.payload).to.deep.equal({ aps: { badge: 0 } });
    expect(arrival.headers).to.include({ "apns-push-type": "alert", "apns-priority": "5" });
    expect(arrival.headers).not.to.have.property("apns-collapse-id");
    expect(fcmArrivals(android)).to.deep.equal([]);
  });

  it("removes the tokens a provider calls unregistered or invalid, and keeps those it refused for another reason", async () => {
    const alice = await signInWithCode(server);
    const people = await Promise.all([0, 1, 2, 3].map(() => signInWithCode(server)));
    const [gone, invalid, unregistered, kept] = people;
    const tokens = { gone: apnsToken(), invalid: fcmToken(), unregistered: fcmToken(), kept: apnsToken() };
    await register(gone, tokens.gone, PushPlatform.APNS);
    await register(invalid, tokens.invalid, PushPlatform.FCM);
    await register(unregistered, tokens.unregistered, PushPlatform.FCM);
    await register(kept, tokens.kept, PushPlatform.APNS);
    production.answerFor(tokens.gone, { status: 410, reason: "Unregistered" });
    fcm.answerFor(tokens.invalid, { status: 400, fcmError: "INVALID_ARGUMENT", tokenField: true });
    fcm.answerFor(tokens.unregistered, { status: 404, fcmError: "UNREGISTERED" });
    production.answerFor(tokens.kept, { status: 400, reason: "BadTopic" });
    const removedBefore = pushRemovedTokens.bind({ provider: "apns" }).value + pushRemovedTokens.bind({ provider: "fcm" }).value;
    const groupId = BigInt((await client(server, GroupService, "json", alice.accessToken).createGroup({ name: "crew", memberIds: people.map((p) => p.userId) })).group!.groupId);
    await send(alice, groupId, "roll call");

    await eventually(
      () => apnsArrivals(production, tokens.gone).length + fcmArrivals(tokens.invalid).length + fcmArrivals(tokens.unregistered).length + apnsArrivals(production, tokens.kept).length === 4,
      "one request per device",
      10_000,
    );
    for (const user of [gone, invalid, unregistered]) {
      const deadline = Date.now() + 5000;
      while ((await tokensOf(user)).length > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await tokensOf(user), `user ${user.userId}`).to.deep.equal([]);
    }
    expect(await tokensOf(kept)).to.deep.equal([tokens.kept]);
    expect(pushRemovedTokens.bind({ provider: "apns" }).value + pushRemovedTokens.bind({ provider: "fcm" }).value - removedBefore).to.equal(3);
    // A refusal that is not the token's is not retried either.
    expect(apnsArrivals(production, tokens.kept)).to.have.length(1);
  });

  it("a refusal of Parley's own credentials is counted as auth, not retried, and keeps the device's token", async () => {
    const alice = await signInWithCode(server);
    const [withIphone, withAndroid] = [await signInWithCode(server), await signInWithCode(server)];
    const [iphone, android] = [apnsToken(), fcmToken()];
    await register(withIphone, iphone, PushPlatform.APNS);
    await register(withAndroid, android, PushPlatform.FCM);
    production.answerFor(iphone, { status: 403, reason: "InvalidProviderToken" });
    fcm.answerFor(android, { status: 403, fcmError: "SENDER_ID_MISMATCH" });
    const authFailures = () => pushFailed.bind({ provider: "apns", reason: "auth" }).value + pushFailed.bind({ provider: "fcm", reason: "auth" }).value;
    const before = authFailures();
    await send(alice, await befriend(server, alice, withIphone));
    await send(alice, await befriend(server, alice, withAndroid));
    await eventually(() => authFailures() - before === 2, "both refusals counted");
    expect(apnsArrivals(production, iphone).map((arrival) => arrival.status)).to.deep.equal([403]);
    expect(fcmArrivals(android).map((arrival) => arrival.status)).to.deep.equal([403]);
    expect(await tokensOf(withIphone)).to.deep.equal([iphone]);
    expect(await tokensOf(withAndroid)).to.deep.equal([android]);
  });

  it("retries 429 and 5xx answers after the provider's Retry-After, until the notification is accepted", async () => {
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const iphone = apnsToken();
    await register(bob, iphone, PushPlatform.APNS);
    const conversationId = await befriend(server, alice, bob);
    production.answerFor(iphone, { status: 429, reason: "TooManyRequests", retryAfterSeconds: 1 });
    const retriedBefore = pushRetries.bind({ provider: "apns", reason: "rate_limited" }).value;
    await send(alice, conversationId);
    await eventually(() => apnsArrivals(production, iphone).length === 1, "the first attempt");
    production.clearAnswers();
    production.answerNext(1, { status: 503, reason: "ServiceUnavailable" });
    await eventually(() => apnsArrivals(production, iphone).some((arrival) => arrival.status === 200), "the notification, accepted after retries", 10_000);
    const statuses = apnsArrivals(production, iphone).map((arrival) => arrival.status);
    expect(statuses).to.deep.equal([429, 503, 200]);
    const [first, second] = apnsArrivals(production, iphone);
    expect(second.at - first.at).to.be.at.least(990);
    expect(pushRetries.bind({ provider: "apns", reason: "rate_limited" }).value - retriedBefore).to.equal(1);
  });

  it("a provider that does not answer neither slows nor fails SendMessage, and the message is there to read", async () => {
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const android = fcmToken();
    await register(bob, android, PushPlatform.FCM);
    const conversationId = await befriend(server, alice, bob);
    fcm.hold();
    const messageId = await send(alice, conversationId, "while FCM is down");
    // The send was answered while its notification is still held at the provider.
    await eventually(() => fcm.inFlight > 0, "the notification held at the provider");
    expect(fcmArrivals(android).filter((arrival) => arrival.delivered)).to.deep.equal([]);
    const history = await client(server, MessageService, "json", bob.accessToken).getMessageHistory({ conversationId, limit: 5 });
    expect(history.messages.map((m) => m.messageId)).to.include(messageId);
    fcm.release();
    await eventually(() => fcmArrivals(android).some((arrival) => arrival.status === 200), "the notification once FCM answers", 10_000);
  });

  it("renews the FCM access token when Google stops taking it", async () => {
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const android = fcmToken();
    await register(bob, android, PushPlatform.FCM);
    const conversationId = await befriend(server, alice, bob);
    await send(alice, conversationId);
    await eventually(() => fcmArrivals(android).some((arrival) => arrival.status === 200), "the first notification");
    const exchanges = fcm.tokenRequests;
    fcm.expireAccessTokens();
    await send(alice, conversationId);
    await eventually(() => fcmArrivals(android).filter((arrival) => arrival.status === 200).length === 2, "the second notification", 10_000);
    expect(fcmArrivals(android).map((arrival) => arrival.status)).to.deep.equal([200, 401, 200]);
    expect(fcm.tokenRequests).to.be.greaterThan(exchanges);
  });

  it("alerts no device of a user who is online, or who muted the group", async () => {
    const alice = await signInWithCode(server);
    const [online, muted, offline] = await Promise.all([0, 1, 2].map(() => signInWithCode(server)));
    const tokens = [apnsToken(), apnsToken(), apnsToken()];
    await Promise.all([online, muted, offline].map((user, i) => register(user, tokens[i], PushPlatform.APNS)));
    const groupId = BigInt((await client(server, GroupService, "json", alice.accessToken).createGroup({ name: "quiet", memberIds: [online, muted, offline].map((p) => p.userId) })).group!.groupId);
    await client(server, ConversationService, "json", muted.accessToken).updateConversationAction({ conversationId: groupId, action: ConversationActionType.MUTE });
    const socket = await GatewayClient.connect(server.url, "json");
    try {
      await socket.authenticate(online.accessToken);
      await send(alice, groupId, "first");
      await send(alice, groupId, "second");
      await eventually(() => apnsArrivals(production, tokens[2]).length === 2, "both alerts of the offline member");
      expect(apnsArrivals(production, tokens[0])).to.deep.equal([]);
      expect(apnsArrivals(production, tokens[1])).to.deep.equal([]);
      expect(apnsArrivals(production, tokens[2]).map((arrival) => (arrival.payload as { aps: { alert: unknown } }).aps.alert)).to.deep.equal([
        { title: "quiet", body: `${await nicknameOf(alice)}: first` },
        { title: "quiet", body: `${await nicknameOf(alice)}: second` },
      ]);
    } finally {
      socket.close();
    }
  });

  it("on the cluster's shape, each notification leaves once, and they keep leaving once an engine stops", async function () {
    if (testTopology !== "cluster") this.skip();
    const { nodes } = server as TestServer & { nodes: Record<string, { stop(): Promise<void> }> };
    const alice = await signInWithCode(server);
    const people = await Promise.all(Array.from({ length: 8 }, () => signInWithCode(server)));
    const tokens = people.map(() => apnsToken());
    await Promise.all(people.map((person, i) => register(person, tokens[i], PushPlatform.APNS)));
    // Eight conversations land on both engines' shards.
    const conversations = await Promise.all(people.map((person) => befriend(server, alice, person)));
    const accepted = (token: string) => apnsArrivals(production, token).filter((arrival) => arrival.status === 200).length;
    /** Sends one message to each, retrying one a stopping engine could not take (the same client id: at most one message). */
    const round = async (text: string) => {
      await Promise.all(
        conversations.map(async (conversationId) => {
          const clientMessageId = nextClientMessageId();
          const deadline = Date.now() + 15_000;
          for (;;) {
            try {
              return await client(server, MessageService, "json", alice.accessToken).sendMessage({ conversationId, clientMessageId, body: textBody(text) });
            } catch (err) {
              if (Date.now() > deadline) throw err;
              await new Promise((resolve) => setTimeout(resolve, 100));
            }
          }
        }),
      );
    };
    await round("first");
    await eventually(() => tokens.every((token) => accepted(token) === 1), "one notification per device", 10_000);
    await nodes.engine1.stop();
    await round("second");
    await eventually(() => tokens.every((token) => accepted(token) >= 2), "the second notification of each device, with one engine left", 20_000);
    // The first round's alerts were all in before the second began: none was sent twice. A
    // moment more lets a late duplicate of the second round show.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(tokens.map(accepted)).to.deep.equal(tokens.map(() => 2));
  });

  describe("credentials, checked when the server starts", () => {
    const configWith = (changes: Record<string, string | undefined>) => {
      const merged: Record<string, string> = { ...env };
      for (const [name, value] of Object.entries(changes)) {
        if (value === undefined) delete merged[name];
        else merged[name] = value;
      }
      return loadConfig(merged).push;
    };
    const opening = (changes: Record<string, string | undefined>) => () => openPushNotifier(configWith(changes), { info: () => undefined, warn: () => undefined });

    it("stops a start with a missing setting, naming it", () => {
      expect(opening({ APNS_KEY_ID: undefined })).to.throw("PUSH_NOTIFIER names apns: APNS_KEY_ID is not set");
      expect(opening({ APNS_KEY_FILE: undefined })).to.throw("PUSH_NOTIFIER names apns: set APNS_KEY_FILE (a file) or APNS_KEY (its text)");
      expect(opening({ FCM_SERVICE_ACCOUNT_FILE: undefined })).to.throw(/set FCM_SERVICE_ACCOUNT_FILE/);
      expect(opening({ APNS_PRODUCTION_URL: "http://localhost:1" })).to.throw(/APNS_PRODUCTION_URL must be an https:\/\/ origin/);
    });

    it("stops a start with a key file that is missing, not a key, or the wrong kind of key", () => {
      const rsaAsApns = join(dir, "rsa.p8");
      writeFileSync(rsaAsApns, generateServiceAccountKeys().privateKeyPem);
      const garbage = join(dir, "garbage.p8");
      writeFileSync(garbage, "not a key");
      expect(opening({ APNS_KEY_FILE: join(dir, "absent.p8") })).to.throw(/APNS_KEY_FILE .*absent\.p8 cannot be read/);
      expect(opening({ APNS_KEY_FILE: garbage })).to.throw(/APNS_KEY_FILE .*garbage\.p8 is not a PEM private key/);
      expect(opening({ APNS_KEY_FILE: rsaAsApns })).to.throw(/must be the P-256 signing key \(\.p8\) Apple issued; it is a rsa key/);
    });

    it("stops a start with a service account that is not JSON, lacks a field, or is another kind of account", () => {
      const write = (name: string, text: string) => {
        const file = join(dir, name);
        writeFileSync(file, text);
        return file;
      };
      const valid = makeFcmServiceAccount(dir, fcm.tokenUri).json;
      const { private_key: _key, ...withoutKey } = valid;
      expect(opening({ FCM_SERVICE_ACCOUNT_FILE: write("broken.json", "{") })).to.throw(/broken\.json is not JSON/);
      expect(opening({ FCM_SERVICE_ACCOUNT_FILE: write("keyless.json", JSON.stringify(withoutKey)) })).to.throw(/keyless\.json has no private_key/);
      expect(opening({ FCM_SERVICE_ACCOUNT_FILE: write("user.json", JSON.stringify({ ...valid, type: "authorized_user" })) })).to.throw(/is of type "authorized_user", not service_account/);
      // The same account given as the variable's own text works too.
      expect(opening({ FCM_SERVICE_ACCOUNT_FILE: undefined, FCM_SERVICE_ACCOUNT: JSON.stringify(valid) })).not.to.throw();
    });

    it("a server given a bad credential does not start", async () => {
      let started: TestServer | undefined;
      try {
        started = await startTestServer({ topology: "single", env: { ...env, APNS_KEY_FILE: join(dir, "absent.p8") } });
      } catch (err) {
        expect(String(err)).to.match(/APNS_KEY_FILE .*absent\.p8 cannot be read/);
      }
      if (started) {
        await started.dispose();
        expect.fail("the server started");
      }
    });
  });
});
