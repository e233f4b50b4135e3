// The SDK's WebSocket client against a real server, with a TCP proxy standing in for the network:
// updates arrive in order and exactly once across dropped and dead connections, an expired token
// is renewed on reconnecting, and a revoked session stops the stream.
import { expect } from "chai";
import { Code, ConnectError } from "@connectrpc/connect";
import { GatewayError, SessionEndedError, UpdateStream, type SnUpdate, type UpdateStreamOptions, type UpdateStreamState } from "../src/index.js";
import { createParleyClient } from "../src/index.js";
import { startTestServer, type TestServer } from "../../test/support/harness.js";
import { befriend, eventually, sendText, signIn, type Person } from "./support/people.js";
import { TcpProxy } from "./support/tcp-proxy.js";

const accessTokenLifetimeMs = 2 * 60 * 60_000;

/** What one UpdateStream handed the application. */
class Recorder {
  readonly entries: SnUpdate[] = [];
  readonly states: UpdateStreamState[] = [];
  readonly errors: unknown[] = [];

  get sns(): number[] {
    return this.entries.map((entry) => entry.sn);
  }

  get texts(): string[] {
    return this.entries.flatMap((entry) =>
      entry.update.case === "messageEnvelope" && entry.update.value.body?.content.case === "text" ? [entry.update.value.body.content.value.text] : [],
    );
  }

  options(): Pick<UpdateStreamOptions, "onUpdate" | "onStateChange" | "onError"> {
    return {
      onUpdate: (entry) => {
        this.entries.push(entry);
      },
      onStateChange: (state) => {
        this.states.push(state);
      },
      onError: (err) => {
        this.errors.push(err);
      },
    };
  }
}

const range = (from: number, count: number) => Array.from({ length: count }, (_, index) => from + index);

describe("sdk: UpdateStream against a real server", () => {
  let server: TestServer;
  let proxy: TcpProxy;
  let streams: UpdateStream[] = [];
  let alice: Person;
  let bob: Person;
  let conversationId: bigint;

  before(async () => {
    server = await startTestServer();
    proxy = await TcpProxy.start(Number(new URL(server.url).port));
  });
  beforeEach(async () => {
    proxy.restore();
    alice = await signIn(server);
    bob = await signIn(server);
    conversationId = await befriend(alice, bob);
  });
  afterEach(async () => {
    await Promise.all(streams.map((stream) => stream.close()));
    streams = [];
  });
  after(async () => {
    await proxy.close();
    await server.dispose();
  });

  function open(options: Omit<UpdateStreamOptions, "client" | "onUpdate"> & { client?: UpdateStreamOptions["client"] }, recorder: Recorder): UpdateStream {
    const stream = new UpdateStream({ client: alice.client, backoff: { initialMs: 40, maxMs: 200 }, ...recorder.options(), ...options });
    streams.push(stream);
    return stream;
  }

  for (const wire of ["binary", "json"] as const) {
    it(`delivers live entries in order, each once (${wire} frames, the URL from GetClientConfig)`, async () => {
      const seen = new Recorder();
      const stream = open({ wire }, seen);
      await stream.ready();
      const base = stream.lastSn;
      for (const index of range(1, 5)) await sendText(bob, conversationId, `live ${index}`);
      await eventually(() => stream.lastSn === base + 5, "five entries");
      expect(seen.sns).to.deep.equal(range(base + 1, 5));
      expect(seen.texts).to.deep.equal(range(1, 5).map((index) => `live ${index}`));
      expect(stream.state).to.equal("live");
    });
  }

  it("loses and repeats nothing when the connection drops in the middle of a burst of updates", async () => {
    const seen = new Recorder();
    const stream = open({ url: proxy.url }, seen);
    await stream.ready();
    const base = stream.lastSn;
    const acceptedBefore = proxy.accepted;
    for (const index of range(1, 60)) {
      await sendText(bob, conversationId, `burst ${index}`);
      // 21..35 are stored while no connection can be made: only GetDifference can bring them;
      // 36.. race the reconnection's catch-up with live pushes.
      if (index === 20) proxy.cut({ refuse: true });
      if (index === 35) proxy.restore();
    }
    await eventually(() => stream.lastSn >= base + 60, "all sixty entries");
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(seen.sns).to.deep.equal(range(base + 1, 60));
    expect(seen.texts).to.deep.equal(range(1, 60).map((index) => `burst ${index}`));
    expect(seen.states).to.include("waiting");
    expect(proxy.accepted).to.be.greaterThan(acceptedBefore);
    // One read when the stream first connected, at least one more to recover what the drop missed.
    expect(alice.sent.filter((name) => name === "GetDifference").length).to.be.at.least(2);
    expect(stream.state).to.equal("live");
  });

  it("notices a connection that went silent by its unanswered ping, reconnects and catches up", async () => {
    const seen = new Recorder();
    const stream = open({ url: proxy.url, heartbeatIntervalMs: 100, heartbeatTimeoutMs: 300, connectTimeoutMs: 1000 }, seen);
    await stream.ready();
    const base = stream.lastSn;
    await sendText(bob, conversationId, "before");
    await eventually(() => stream.lastSn === base + 1, "the first entry");
    proxy.blackhole();
    await sendText(bob, conversationId, "while silent");
    await eventually(() => seen.errors.some((err) => /heartbeat/.test(String(err))) && stream.state !== "live", "the dead connection noticed and given up", 3000);
    proxy.restore();
    await sendText(bob, conversationId, "after");
    await eventually(() => stream.lastSn === base + 3, "the entries after the silence");
    expect(seen.texts).to.deep.equal(["before", "while silent", "after"]);
    expect(stream.state).to.equal("live");
  });

  it("resumes from a persisted sn: exactly the entries stored meanwhile", async () => {
    const first = new Recorder();
    const stream = open({}, first);
    await stream.ready();
    await sendText(bob, conversationId, "seen live");
    await eventually(() => first.texts.length === 1, "the first entry");
    await stream.close();
    const persisted = stream.lastSn;
    for (const index of range(1, 3)) await sendText(bob, conversationId, `offline ${index}`);
    const second = new Recorder();
    const resumed = open({ initialSn: persisted }, second);
    await resumed.ready();
    expect(second.sns).to.deep.equal(range(persisted + 1, 3));
    expect(second.texts).to.deep.equal(["offline 1", "offline 2", "offline 3"]);
  });

  it("renews an expired access token when reconnecting", async () => {
    const seen = new Recorder();
    const stream = open({ url: proxy.url }, seen);
    await stream.ready();
    const base = stream.lastSn;
    server.clock.advance(accessTokenLifetimeMs + 1000);
    proxy.cut();
    await sendText(bob, conversationId, "after expiry");
    await eventually(() => stream.lastSn === base + 1, "the entry after the reconnection");
    expect(seen.texts).to.deep.equal(["after expiry"]);
    expect(alice.sent.filter((name) => name === "RefreshToken")).to.have.length(1);
    expect(alice.saved).to.have.length(2);
    expect(stream.state).to.equal("live");
  });

  it("ends with SessionEndedError when the expired token can no longer be renewed", async () => {
    const stream = open({ url: proxy.url }, new Recorder());
    await stream.ready();
    // Another holder of the session refreshed: this client's refresh token is dead.
    await createParleyClient({ baseUrl: server.url }).auth.refreshToken({ refreshToken: alice.client.session.current!.refreshToken! });
    server.clock.advance(accessTokenLifetimeMs + 1000);
    proxy.cut();
    const end = await stream.ended();
    expect(end.reason === "failed" && end.error).to.be.instanceOf(SessionEndedError);
    expect(alice.ended).to.have.length(1);
  });

  it("stops for good, without reconnecting, when the session is revoked", async () => {
    const seen = new Recorder();
    const stream = open({ url: proxy.url }, seen);
    await stream.ready();
    const accepted = proxy.accepted;
    await createParleyClient({ baseUrl: server.url, tokens: { accessToken: alice.client.session.current!.accessToken } }).auth.logout({});
    const end = await stream.ended();
    expect(end.reason).to.equal("failed");
    expect(end.reason === "failed" && end.error).to.be.instanceOf(GatewayError);
    expect(stream.state).to.equal("closed");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(proxy.accepted).to.equal(accepted);
  });

  it("gives up at once on a token nobody knows, rather than retrying forever", async () => {
    const stranger = createParleyClient({ baseUrl: server.url, tokens: { accessToken: "pk_user_not_a_real_token" } });
    // With a starting sn the gateway is the first to refuse the token; without one, GetCurrentState is.
    const fromGateway = open({ client: stranger, initialSn: 0 }, new Recorder());
    expect(await fromGateway.ready().catch((err: unknown) => err)).to.be.instanceOf(GatewayError);
    expect((await fromGateway.ended()).reason).to.equal("failed");
    const fromApi = open({ client: stranger }, new Recorder());
    const refusal = await fromApi.ready().catch((err: unknown) => err);
    expect(refusal instanceof ConnectError && refusal.code).to.equal(Code.Unauthenticated);
    expect((await fromApi.ended()).reason).to.equal("failed");
  });

  it("delivers nothing after close()", async () => {
    const seen = new Recorder();
    const stream = open({}, seen);
    await stream.ready();
    await stream.close();
    expect(await stream.ended()).to.deep.equal({ reason: "closed" });
    await sendText(bob, conversationId, "too late");
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(seen.entries).to.deep.equal([]);
  });
});
