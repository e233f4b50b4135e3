// The SDK's client against a real server: every service reachable, the session's tokens on every
// call, and renewal when the server refuses an expired token.
import { expect } from "chai";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionEndedError, createParleyClient, errorDetailOf, parleyServices } from "../src/index.js";
import * as protocol from "../src/protocol.js";
import { startTestServer, type TestServer } from "../../test/support/harness.js";
import { signIn } from "./support/people.js";

const accessTokenLifetimeMs = 2 * 60 * 60_000;

const rpcError = (err: unknown) => ({ code: err instanceof ConnectError ? err.code : undefined, name: errorDetailOf(err)?.errorName });

describe("sdk: ParleyClient against a real server", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
  });
  after(() => server.dispose());

  it("has a client for every generated service, 79 RPCs in all", () => {
    const generated = (Object.values(protocol) as unknown[])
      .filter((value): value is DescService => (value as { kind?: string }).kind === "service")
      .map((service) => service.typeName)
      .sort();
    expect(Object.values(parleyServices).map((service) => service.typeName).sort()).to.deep.equal(generated);
    const client = createParleyClient({ baseUrl: server.url });
    let methods = 0;
    for (const [name, service] of Object.entries(parleyServices)) {
      const serviceClient = client[name as keyof typeof parleyServices] as unknown as Record<string, unknown>;
      for (const method of service.methods) {
        expect(serviceClient[method.localName], `${service.typeName}/${method.name}`).to.be.a("function");
        methods += 1;
      }
    }
    expect(methods).to.equal(79);
  });

  for (const wire of ["binary", "json"] as const) {
    it(`reaches every service with the session's token (${wire})`, async () => {
      const { client, userId } = await signIn(server, { wire });
      expect((await client.user.getProfile({})).profile?.userId).to.equal(userId);
      expect((await client.auth.getClientConfig({})).gateway?.wsUrl).to.match(/^ws/);
      expect((await client.agent.listMyAgents({})).agents).to.deep.equal([]);
      expect((await client.contact.listContacts({})).contacts).to.deep.equal([]);
      expect((await client.conversation.listConversations({})).conversations).to.deep.equal([]);
      expect((await client.group.listGroups({})).groups).to.deep.equal([]);
      await client.push.clearBadge({});
      expect((await client.sync.getCurrentState({})).state?.latestSn).to.be.a("number");
      // Authenticated, routed and refused on its merits: not UNAUTHENTICATED.
      expect(rpcError(await client.media.getDownloadURL({ fileId: "no-such-file" }).catch((err: unknown) => err)).code).to.equal(Code.NotFound);
      expect(rpcError(await client.message.getMessageHistory({ conversationId: 123456789n }).catch((err: unknown) => err)).code).to.be.oneOf([
        Code.NotFound,
        Code.PermissionDenied,
      ]);
    });
  }

  it("adopts the tokens a sign-in answers and persists them through onTokens", async () => {
    const before = Date.now();
    const { client, saved } = await signIn(server);
    expect(saved).to.have.length(1);
    expect(saved[0]?.accessToken).to.be.a("string").and.not.equal("");
    expect(saved[0]?.refreshToken).to.be.a("string").and.not.equal("");
    expect(saved[0]?.accessExpiresAt).to.be.within(before + accessTokenLifetimeMs, Date.now() + accessTokenLifetimeMs);
    expect(client.session.current).to.equal(saved[0]);
  });

  it("refreshes once when the server says the access token expired, and the call succeeds", async () => {
    const { client, userId, saved, sent } = await signIn(server);
    const first = saved[0]!;
    server.clock.advance(accessTokenLifetimeMs + 1000);
    expect((await client.user.getProfile({})).profile?.userId).to.equal(userId);
    expect(sent.slice(-3)).to.deep.equal(["GetProfile", "RefreshToken", "GetProfile"]);
    expect(saved).to.have.length(2);
    expect(saved[1]?.accessToken).to.not.equal(first.accessToken);
    expect(saved[1]?.refreshToken).to.not.equal(first.refreshToken);
    // The server rotated: the refresh token from sign-in no longer works anywhere.
    const stale = createParleyClient({ baseUrl: server.url });
    expect(rpcError(await stale.auth.refreshToken({ refreshToken: first.refreshToken! }).catch((err: unknown) => err))).to.deep.equal({
      code: Code.Unauthenticated,
      name: "REFRESH_TOKEN_INVALID",
    });
  });

  it("lets concurrent calls that all met the expired token share one refresh", async () => {
    const { client, userId, saved, sent } = await signIn(server);
    server.clock.advance(accessTokenLifetimeMs + 1000);
    const profiles = await Promise.all(Array.from({ length: 8 }, () => client.user.getProfile({})));
    expect(profiles.map((p) => p.profile?.userId)).to.deep.equal(Array(8).fill(userId));
    expect(sent.filter((name) => name === "RefreshToken")).to.have.length(1);
    expect(saved).to.have.length(2);
  });

  it("refreshes before a call when its own clock says the token is about to expire", async () => {
    const clock = { now: Date.now() };
    const { client, saved, sent } = await signIn(server, { now: () => clock.now });
    clock.now += accessTokenLifetimeMs - 30_000;
    await client.user.getProfile({});
    // The server never saw an expired token: the refresh went first.
    expect(sent.slice(-2)).to.deep.equal(["RefreshToken", "GetProfile"]);
    expect(saved).to.have.length(2);
  });

  it("ends the session when the refresh token is refused: the calls fail with SessionEndedError and the hooks hear of it", async () => {
    const { client, saved, ended, sent } = await signIn(server);
    // Another holder of the same session refreshed: this client's refresh token is dead.
    await createParleyClient({ baseUrl: server.url }).auth.refreshToken({ refreshToken: saved[0]!.refreshToken! });
    server.clock.advance(accessTokenLifetimeMs + 1000);
    const outcomes = await Promise.allSettled([client.user.getProfile({}), client.contact.listContacts({}), client.sync.getCurrentState({})]);
    for (const outcome of outcomes) {
      expect(outcome.status).to.equal("rejected");
      const reason = (outcome as PromiseRejectedResult).reason as SessionEndedError;
      expect(reason).to.be.instanceOf(SessionEndedError);
      expect(rpcError(reason.cause)).to.deep.equal({ code: Code.Unauthenticated, name: "REFRESH_TOKEN_INVALID" });
      expect(rpcError(reason), "the refusal's detail, on the error callers get").to.deep.equal({ code: Code.Unauthenticated, name: "REFRESH_TOKEN_INVALID" });
    }
    expect(sent.filter((name) => name === "RefreshToken")).to.have.length(1);
    expect(ended).to.have.length(1);
    expect(saved.at(-1)).to.equal(undefined);
    const sentBefore = sent.length;
    expect(await client.user.getProfile({}).catch((err: unknown) => err)).to.be.instanceOf(SessionEndedError);
    expect(sent.length, "nothing is sent once the session ended").to.equal(sentBefore);
  });

  it("does not refresh on an UNAUTHENTICATED that a refresh cannot cure (a wrong old password)", async () => {
    const { client, sent } = await signIn(server);
    await client.auth.setupPassword({ newPassword: "correct horse 1" });
    const refused = await client.auth.changePassword({ oldPassword: "wrong horse 22", newPassword: "battery staple 3" }).catch((err: unknown) => err);
    expect(rpcError(refused).code).to.equal(Code.Unauthenticated);
    expect(sent).to.not.include("RefreshToken");
  });

  it("forgets the tokens after Logout", async () => {
    const { client, saved } = await signIn(server);
    await client.auth.logout({});
    expect(client.session.current).to.equal(undefined);
    expect(saved.at(-1)).to.equal(undefined);
  });

  it("sends an agent token as it is, which never expires", async () => {
    const { client: owner } = await signIn(server);
    const created = await owner.agent.createAgent({ username: `sdk_bot_${process.pid}_${Date.now() % 100000}`.slice(0, 32), name: "SDK bot", signature: "tests" });
    const agent = createParleyClient({ baseUrl: server.url, tokens: { accessToken: created.token } });
    server.clock.advance(accessTokenLifetimeMs + 1000);
    expect((await agent.user.getProfile({})).profile?.userId).to.equal(created.profile?.user?.userId);
  });
});
