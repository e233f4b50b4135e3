// In a cluster, pushes find their gateways without a Redis round trip per message: each engine keeps
// the presence answers it needed, and the gateways' announcements keep them true, so a user who
// connects after an engine learned them offline gets the very next push. One process has no copy
// to keep (its registry is in memory): the SQLite pass has nothing to count.
import { expect } from "chai";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { presenceLookups } from "../shared/metrics.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import type { PushNotification, PushNotifier } from "../ports/push-notifier/push-notifier.js";
import type { PushTokenRecord } from "../ports/store/store.js";
import { signInWithCode } from "./support/accounts.js";
import { client, startTestServer, testTopology, type TestServer } from "./support/harness.js";
import { eventually, nextClientMessageId, pushedEnvelopes, textBody, textOf } from "./support/messaging.js";
import { befriend } from "./support/social.js";
import { OpenSockets } from "./support/ws-client.js";

const askedRedis = presenceLookups.bind({ answered: "registry" });
const answeredFromCopy = presenceLookups.bind({ answered: "cache" });

describe("presence answers kept by the engines", () => {
  let server: TestServer;
  const sockets = new OpenSockets(() => server);
  const notified: { tokens: readonly PushTokenRecord[]; notification: PushNotification }[] = [];
  const recordingNotifier: PushNotifier = {
    async send(tokens, notification) {
      notified.push({ tokens, notification });
      return { rejected: [] };
    },
  };
  before(async function () {
    if (testTopology !== "cluster") this.skip();
    server = await startTestServer({ adapters: { pushNotifier: recordingNotifier } });
  });
  after(async () => {
    sockets.closeAll();
    await server?.dispose();
  });

  const connected = (token: string) => sockets.authenticated(token);

  it("private messages to a connected user, once warm: every push answered from the engines' copy, none from Redis", async () => {
    const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
    const conversationId = await befriend(server, alice, bob);
    const bobSocket = await connected(bob.accessToken);
    const send = (text: string) => client(server, MessageService, "binary", alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    for (const text of ["warm 1", "warm 2", "warm 3"]) await send(text);
    await eventually(() => pushedEnvelopes(bobSocket, "snUpdate").some((envelope) => textOf(envelope) === "warm 3"), "bob's push of the warm-up");
    const [redisBefore, copyBefore] = [askedRedis.value, answeredFromCopy.value];
    const count = 10;
    for (let i = 0; i < count; i++) await send(`m${i}`);
    await eventually(() => pushedEnvelopes(bobSocket, "snUpdate").some((envelope) => textOf(envelope) === `m${count - 1}`), "bob's pushes");
    expect(askedRedis.value - redisBefore, "users looked up in Redis").to.equal(0);
    // At least bob's push per message; the sender's own other devices and the offline check count too.
    expect(answeredFromCopy.value - copyBefore).to.be.at.least(count);
  });

  it("a user an engine learned offline who then connects gets the very next push, long before the copy would expire", async () => {
    const [alice, carol] = [await signInWithCode(server), await signInWithCode(server)];
    const conversationId = await befriend(server, alice, carol);
    const send = (text: string) => client(server, MessageService, "binary", alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    await send("while carol is away");
    await send("still away");
    const carolSocket = await connected(carol.accessToken);
    await send("carol is here");
    // The copy lives 10 s: only the gateway's announcement can make this push arrive in 3.
    await eventually(() => pushedEnvelopes(carolSocket, "snUpdate").some((envelope) => textOf(envelope) === "carol is here"), "carol's push", 3_000);
  });

  it("a user whose last connection closed is offline to the engines at once: the next message is pushed to the phone", async () => {
    const [alice, dave] = [await signInWithCode(server), await signInWithCode(server)];
    const conversationId = await befriend(server, alice, dave);
    await client(server, PushService, "binary", dave.accessToken).registerToken({ deviceId: dave.deviceId, token: "fcm-dave", platform: PushPlatform.FCM });
    const send = (text: string) => client(server, MessageService, "binary", alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    const toDave = () => notified.filter((sent) => sent.tokens.some((token) => token.token === "fcm-dave"));
    const daveSocket = await connected(dave.accessToken);
    await send("dave is here");
    await eventually(() => pushedEnvelopes(daveSocket, "snUpdate").some((envelope) => textOf(envelope) === "dave is here"), "dave's push");
    daveSocket.close();
    await daveSocket.closed;
    await send("dave has gone");
    // The copy lives 10 s: only the gateway's announcement of the close can make this happen in 3.
    await eventually(() => toDave().length > 0, "dave's phone notification", 3_000);
    expect(toDave()).to.have.length(1);
  });
});
