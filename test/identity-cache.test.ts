// Authentication answers from each edge process's identity cache (api/identity-cache.ts): no
// store read and no question to the engine per request, while every revocation still holds from
// the very next request, in every process, and closes the live sockets it concerns.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import type { ServiceBroker } from "moleculer";
import type { Store } from "../ports/store/store.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors, type CatalogueEntry } from "../shared/errors.js";
import type { Parley } from "../server.js";
import { device, signInAnotherDevice, signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, lastCode, startNodes, startTestServer, wireModes, type TestServer, type WireMode } from "./support/harness.js";
import { eventually } from "./support/messaging.js";
import { createAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

/** Counts the calls of every store method ("sessions.findByAccessHash") through the store the engine is given. */
class StoreCalls {
  readonly counts = new Map<string, number>();

  readonly wrap = (store: Store): Store => {
    const parts = new Map<string, object>();
    return new Proxy(store, {
      get: (target, property, receiver) => {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== "object" || value === null || typeof property !== "string") return value;
        let part = parts.get(property);
        if (!part) parts.set(property, (part = this.counted(property, value)));
        return part;
      },
    });
  };

  private counted(name: string, part: object): object {
    return new Proxy(part, {
      get: (target, method, receiver) => {
        const value: unknown = Reflect.get(target, method, receiver);
        if (typeof value !== "function" || typeof method !== "string") return value;
        const key = `${name}.${method}`;
        return (...args: unknown[]) => {
          this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  }

  /** The calls made while `work` ran. */
  async during(work: () => Promise<unknown>): Promise<Map<string, number>> {
    const before = new Map(this.counts);
    await work();
    return new Map([...this.counts].map(([key, count]) => [key, count - (before.get(key) ?? 0)] as const).filter(([, count]) => count > 0));
  }
}

/** Counts the questions this broker sends the engine about tokens (the identity cache's misses). */
function countTokenQuestions(broker: ServiceBroker): () => number {
  let asked = 0;
  const forward = broker.call.bind(broker) as (...args: unknown[]) => unknown;
  (broker as unknown as { call: (...args: unknown[]) => unknown }).call = (action: unknown, ...rest: unknown[]) => {
    if (action === "auth.resolveToken") asked += 1;
    return forward(action, ...rest);
  };
  return () => asked;
}

async function connectedAs(server: { url: string }, mode: WireMode, token: string): Promise<GatewayClient> {
  const socket = await GatewayClient.connect(server.url, mode);
  const answer = await socket.authenticate(token);
  expect(answer.payload.case === "authResponse" && answer.payload.value.success, "socket authenticated").to.equal(true);
  return socket;
}

async function expectClosed(socket: GatewayClient, reason: CatalogueEntry): Promise<void> {
  expect(await socket.closed).to.deep.equal({ code: 4003, reason: reason.errorName });
}

for (const mode of wireModes) {
  describe(`Authentication from the identity cache (${mode})`, () => {
    let server: TestServer;
    let store: StoreCalls;
    let tokenQuestions: () => number;
    before(async () => {
      store = new StoreCalls();
      // These count what one node's cache asks and reads; across nodes, revocation is the
      // concern of the two-edge tests at the end of this file.
      server = await startTestServer({ adapters: { store: store.wrap }, topology: "single" });
      tokenQuestions = countTokenQuestions(server.broker);
    });
    after(async () => server.dispose());

    const users = (token: string) => client(server, UserService, mode, token);
    const auth = (token?: string) => client(server, AuthService, mode, token);
    const agents = (token: string) => client(server, AgentService, mode, token);
    const profileOf = async (token: string) => (await users(token).getProfile({})).profile?.userId;

    /** Makes sure the token's identity is cached: a second request asks the engine nothing. */
    async function cached(token: string, expectedUserId: number): Promise<void> {
      expect(await profileOf(token)).to.equal(expectedUserId);
      const asked = tokenQuestions();
      expect(await profileOf(token)).to.equal(expectedUserId);
      expect(tokenQuestions() - asked, "answered from the cache").to.equal(0);
    }

    async function twoDevices(password?: string): Promise<[SignedIn, SignedIn]> {
      const first = await signInWithCode(server, mode);
      if (password) await auth(first.accessToken).setupPassword({ newPassword: password });
      const second = await signInAnotherDevice(server, first.email);
      return [first, second];
    }

    describe("no read per request", () => {
      it("answers repeated RPCs of a user without reading the token or asking the engine; each reads only what GetProfile needs", async () => {
        const user = await signInWithCode(server, mode);
        await profileOf(user.accessToken);
        const one = await store.during(() => profileOf(user.accessToken));
        const asked = tokenQuestions();
        const ten = await store.during(async () => {
          for (let i = 0; i < 10; i += 1) expect(await profileOf(user.accessToken)).to.equal(user.userId);
        });
        expect(tokenQuestions() - asked).to.equal(0);
        expect([...ten.keys()].filter((key) => key.startsWith("sessions."))).to.deep.equal([]);
        expect([...one.keys()].filter((key) => key.startsWith("sessions."))).to.deep.equal([]);
        expect(one.size).to.be.greaterThan(0);
        expect(Object.fromEntries(ten)).to.deep.equal(Object.fromEntries([...one].map(([key, count]) => [key, count * 10])));
      });

      it("answers repeated RPCs and socket sign-ins of an agent without reading its token", async () => {
        const owner = await signInWithCode(server, mode);
        const agent = await createAgent(server, owner, mode);
        await profileOf(agent.token);
        const asked = tokenQuestions();
        const calls = await store.during(async () => {
          for (let i = 0; i < 5; i += 1) expect(await profileOf(agent.token)).to.equal(agent.userId);
          const socket = await connectedAs(server, mode, agent.token);
          socket.close();
        });
        expect(tokenQuestions() - asked).to.equal(0);
        expect(calls.get("agents.findByTokenHash") ?? 0).to.equal(0);
      });

      it("asks the engine once for a new token, then serves the socket sign-in from the cache too", async () => {
        const user = await signInWithCode(server, mode);
        const asked = tokenQuestions();
        const reads = await store.during(async () => {
          await profileOf(user.accessToken);
          const socket = await connectedAs(server, mode, user.accessToken);
          socket.close();
          await profileOf(user.accessToken);
        });
        expect(tokenQuestions() - asked).to.equal(1);
        expect(reads.get("sessions.findByAccessHash")).to.equal(1);
      });
    });

    describe("revocation holds from the very next request and closes live sockets", () => {
      it("LogoutAll", async () => {
        const [first, second] = await twoDevices();
        await cached(first.accessToken, first.userId);
        await cached(second.accessToken, first.userId);
        const sockets = [await connectedAs(server, mode, first.accessToken), await connectedAs(server, mode, second.accessToken)];
        await auth(first.accessToken).logoutAll({});
        await expectError(users(first.accessToken).getProfile({}), Errors.unauthenticated);
        await expectError(users(second.accessToken).getProfile({}), Errors.unauthenticated);
        for (const socket of sockets) await expectClosed(socket, Errors.sessionRevoked);
      });

      it("Logout", async () => {
        const [first, second] = await twoDevices();
        await cached(first.accessToken, first.userId);
        const socket = await connectedAs(server, mode, first.accessToken);
        await auth(first.accessToken).logout({});
        await expectError(users(first.accessToken).getProfile({}), Errors.unauthenticated);
        await expectClosed(socket, Errors.sessionRevoked);
        expect(await profileOf(second.accessToken)).to.equal(first.userId);
      });

      it("RemoveDevice", async () => {
        const [first, second] = await twoDevices();
        await cached(first.accessToken, first.userId);
        await cached(second.accessToken, first.userId);
        const [kept, removed] = [await connectedAs(server, mode, first.accessToken), await connectedAs(server, mode, second.accessToken)];
        await users(first.accessToken).removeDevice({ deviceId: second.deviceId });
        await expectError(users(second.accessToken).getProfile({}), Errors.unauthenticated);
        await expectClosed(removed, Errors.sessionRevoked);
        expect(await profileOf(first.accessToken)).to.equal(first.userId);
        await kept.ping();
        kept.close();
      });

      it("ChangePassword revokes the other devices; the current one keeps working", async () => {
        const [first, second] = await twoDevices("first password 1");
        await cached(first.accessToken, first.userId);
        await cached(second.accessToken, first.userId);
        const other = await connectedAs(server, mode, second.accessToken);
        await auth(first.accessToken).changePassword({ oldPassword: "first password 1", newPassword: "second password 2" });
        await expectError(users(second.accessToken).getProfile({}), Errors.unauthenticated);
        await expectClosed(other, Errors.sessionRevoked);
        expect(await profileOf(first.accessToken)).to.equal(first.userId);
      });

      it("ResetPasswordConfirm revokes every device", async () => {
        const [first, second] = await twoDevices("first password 1");
        // The code interval since the last sign-in code; cached() comes after, as the clock moved.
        server.clock.advance(61_000);
        const { verifyToken } = await auth().resetPasswordRequest({ identityType: IdentityType.EMAIL, identityValue: first.email });
        const { resetToken } = await auth().resetPasswordVerify({ verifyToken, code: lastCode(server, first.email, "reset") });
        await cached(first.accessToken, first.userId);
        await cached(second.accessToken, first.userId);
        const sockets = [await connectedAs(server, mode, first.accessToken), await connectedAs(server, mode, second.accessToken)];
        await auth().resetPasswordConfirm({ resetToken, newPassword: "third password 3" });
        await expectError(users(first.accessToken).getProfile({}), Errors.unauthenticated);
        await expectError(users(second.accessToken).getProfile({}), Errors.unauthenticated);
        for (const socket of sockets) await expectClosed(socket, Errors.sessionRevoked);
      });

      it("RefreshToken: the previous access token is refused on the next request", async () => {
        const user = await signInWithCode(server, mode);
        await cached(user.accessToken, user.userId);
        const renewed = await auth().refreshToken({ refreshToken: user.refreshToken });
        await expectError(users(user.accessToken).getProfile({}), Errors.unauthenticated);
        expect(await profileOf(renewed.accessToken)).to.equal(user.userId);
      });

      it("signing in again on a device: that device's previous access token is refused on the next request", async () => {
        const user = await signInWithCode(server, mode);
        // The code interval first: moving the clock past it also ages cached entries out.
        server.clock.advance(61_000);
        await cached(user.accessToken, user.userId);
        const again = await signInWithCode(server, mode, user.email, user.deviceId);
        await expectError(users(user.accessToken).getProfile({}), Errors.unauthenticated);
        expect(await profileOf(again.accessToken)).to.equal(user.userId);
      });

      it("RegenerateAgentToken", async () => {
        const owner = await signInWithCode(server, mode);
        const agent = await createAgent(server, owner, mode);
        await cached(agent.token, agent.userId);
        const socket = await connectedAs(server, mode, agent.token);
        const { token } = await agents(owner.accessToken).regenerateAgentToken({ agentUserId: agent.userId });
        await expectError(users(agent.token).getProfile({}), Errors.unauthenticated);
        await expectClosed(socket, Errors.agentTokenRevoked);
        expect(await profileOf(token)).to.equal(agent.userId);
      });

      it("DeleteMyAgent: the agent's next request answers AGENT_NOT_ACTIVE", async () => {
        const owner = await signInWithCode(server, mode);
        const agent = await createAgent(server, owner, mode);
        await cached(agent.token, agent.userId);
        const socket = await connectedAs(server, mode, agent.token);
        await agents(owner.accessToken).deleteMyAgent({ agentUserId: agent.userId });
        await expectError(users(agent.token).getProfile({}), Errors.agentNotActive);
        await expectClosed(socket, Errors.agentTokenRevoked);
      });

      it("an IP whitelist change: refused from the next request outside it, allowed from the next request once it allows again", async () => {
        const owner = await signInWithCode(server, mode);
        const agent = await createAgent(server, owner, mode);
        await cached(agent.token, agent.userId);
        const socket = await connectedAs(server, mode, agent.token);
        await agents(owner.accessToken).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["192.0.2.0/24"] });
        const detail = await expectError(users(agent.token).getProfile({}), Errors.ipNotAllowed);
        expect(detail.metadata.clientIp).to.equal("127.0.0.1");
        await expectClosed(socket, Errors.ipNotAllowed);
        // The refusal came from the cache's copy of the new list; the next change replaces it.
        await expectError(users(agent.token).getProfile({}), Errors.ipNotAllowed);
        await agents(owner.accessToken).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["127.0.0.0/8"] });
        expect(await profileOf(agent.token)).to.equal(agent.userId);
      });

      it("expiry: an access token whose time passed answers TOKEN_EXPIRED without asking the engine", async () => {
        const user = await signInWithCode(server, mode);
        // Cached (again, the earlier entry having aged out) half a minute before the token expires.
        server.clock.advance(2 * 60 * 60_000 - 30_000);
        await cached(user.accessToken, user.userId);
        server.clock.advance(30_000);
        const asked = tokenQuestions();
        await expectError(users(user.accessToken).getProfile({}), Errors.tokenExpired);
        expect(tokenQuestions() - asked).to.equal(0);
        const socket = await GatewayClient.connect(server.url, mode);
        const answer = await socket.authenticate(user.accessToken);
        expect(answer.payload.case === "authResponse" && answer.payload.value.error?.errorName).to.equal(Errors.tokenExpired.errorName);
        expect((await socket.closed).code).to.equal(4001);
      });
    });
  });
}

describe("Identity caches on two edge processes and an engine over the TCP transporter", () => {
  let nodes: Record<"engine" | "edgeA" | "edgeB", Parley>;
  let codesFile: string;
  let dataDir: string;
  let questionsOnB: () => number;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-identity-"));
    ({ nodes, codesFile } = await startNodes(dataDir, "identity", { engine: ["engine", "webhooks"], edgeA: ["api", "gateway"], edgeB: ["api", "gateway"] }));
    // An edge serves without caching until the engine has discovered it (and can make it forget).
    const cachesKnown = () => nodes.engine.broker.registry.actions.get("identityCache.forget")?.endpoints.length === 2;
    await eventually(cachesKnown, "the engine discovering both edges' identity caches", 30_000);
    questionsOnB = countTokenQuestions(nodes.edgeB.broker);
  });

  after(async () => {
    await nodes?.edgeA.stop();
    await nodes?.edgeB.stop();
    await nodes?.engine.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  for (const mode of wireModes) {
    const profileOn = async (edge: Parley, token: string) => (await client(edge, UserService, mode, token).getProfile({})).profile?.userId;

    /** Caches the token's identity on edge B, and proves it: B's second request asks the engine nothing. */
    async function cachedOnB(token: string, userId: number): Promise<void> {
      expect(await profileOn(nodes.edgeB, token)).to.equal(userId);
      const asked = questionsOnB();
      expect(await profileOn(nodes.edgeB, token)).to.equal(userId);
      expect(questionsOnB() - asked).to.equal(0);
    }

    it(`a LogoutAll served by edge A holds on edge B's next request and closes B's socket (${mode})`, async () => {
      const user = await signInWithCode({ url: nodes.edgeA.url, codesFile }, mode);
      await cachedOnB(user.accessToken, user.userId);
      expect(await profileOn(nodes.edgeA, user.accessToken)).to.equal(user.userId);
      const socket = await connectedAs(nodes.edgeB, mode, user.accessToken);
      await client(nodes.edgeA, AuthService, mode, user.accessToken).logoutAll({});
      await expectError(client(nodes.edgeB, UserService, mode, user.accessToken).getProfile({}), Errors.unauthenticated);
      await expectError(client(nodes.edgeA, UserService, mode, user.accessToken).getProfile({}), Errors.unauthenticated);
      await expectClosed(socket, Errors.sessionRevoked);
    });

    it(`a RefreshToken served by edge A retires the previous access token on edge B (${mode})`, async () => {
      const user = await signInWithCode({ url: nodes.edgeA.url, codesFile }, mode, undefined, device().deviceId);
      await cachedOnB(user.accessToken, user.userId);
      const renewed = await client(nodes.edgeA, AuthService, mode).refreshToken({ refreshToken: user.refreshToken });
      await expectError(client(nodes.edgeB, UserService, mode, user.accessToken).getProfile({}), Errors.unauthenticated);
      expect(await profileOn(nodes.edgeB, renewed.accessToken)).to.equal(user.userId);
    });

    it(`an agent token regenerated through edge A stops on edge B's next request and B's socket closes (${mode})`, async () => {
      const owner = await signInWithCode({ url: nodes.edgeA.url, codesFile }, mode);
      const { profile, token } = await client(nodes.edgeA, AgentService, mode, owner.accessToken).createAgent({ username: `idbot_${mode}_${process.pid}`.slice(0, 32), name: "Bot" });
      const agentUserId = profile!.user!.userId;
      await cachedOnB(token, agentUserId);
      const socket = await connectedAs(nodes.edgeB, mode, token);
      await client(nodes.edgeA, AgentService, mode, owner.accessToken).regenerateAgentToken({ agentUserId });
      await expectError(client(nodes.edgeB, UserService, mode, token).getProfile({}), Errors.unauthenticated);
      await expectClosed(socket, Errors.agentTokenRevoked);
    });
  }
});
