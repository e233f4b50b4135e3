import { create, fromBinary, fromJson, toBinary, toJson, type DescService } from "@bufbuild/protobuf";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createHmac } from "node:crypto";
import { createConnectTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import WebSocket from "ws";
import { AgentDeliveryMode, AgentStatus, AgentVisibility } from "../shared/gen/shared/v1/agent_pb.js";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AccountType } from "../shared/gen/shared/v1/common_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema, type ServerFrame } from "../shared/gen/api/v1/gateway_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { MessageType, type MessageEnvelope } from "../shared/gen/shared/v1/message_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { Errors } from "../shared/errors.js";
import { privateConversationId } from "../shared/ids.js";
import { verifySignature as verifyWebhookSignature } from "@parley/sdk";
import { MiniAppPermission, verifyInitData } from "../engine/agents/mini-app.js";
import { systemAgentUserId, systemAgentUsername } from "../engine/agents/system-agent.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, startTestServer, wireModes, type TestServer, type WireMode } from "./support/harness.js";
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from "./support/https-receiver.js";
import { createAgent, type TestAgent } from "./support/social.js";
import { GatewayClient } from "./support/ws-client.js";

let clientIds = 1n;
const text = (value: string) => ({ type: MessageType.TEXT, content: { case: "text" as const, value: { text: value } } });

async function eventually<T>(probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error("the condition did not hold in time");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A Connect client that sends extra headers (X-Forwarded-For) with every call. */
/**
 * The upstream agent SDK's initData check (nexus-x nxutil/hmac.go), written here from its rule
 * rather than taken from the server: URL-decoded query, first value of each key, `hash` and
 * `auth_date` required, auth_date within 5 minutes either way, the data-check string of every
 * other key sorted as key=value joined by "\n", keyed with HMAC-SHA256("NexusMiniApp", secretKey).
 */
function upstreamVerifyInitData(initData: string, secretKey: string, nowSeconds: number): Record<string, string> | undefined {
  const query = new URLSearchParams(initData);
  const first: Record<string, string> = {};
  for (const [key, value] of query) if (!(key in first)) first[key] = value;
  if (first.hash === undefined || first.auth_date === undefined) return undefined;
  const authDate = Number.parseInt(first.auth_date, 10);
  if (Number.isNaN(authDate) || Math.abs(nowSeconds - authDate) > 300) return undefined;
  const dataCheck = Object.keys(first).filter((key) => key !== "hash").sort().map((key) => `${key}=${first[key]}`).join("\n");
  const secret = createHmac("sha256", "NexusMiniApp").update(secretKey).digest();
  return createHmac("sha256", secret).update(dataCheck).digest("hex") === first.hash ? first : undefined;
}

function clientWithHeaders<S extends DescService>(server: TestServer, service: S, mode: WireMode, token: string, headers: Record<string, string>): Client<S> {
  const transport = createConnectTransport({
    baseUrl: server.url,
    httpVersion: "1.1",
    useBinaryFormat: mode === "binary",
    interceptors: [
      (next) => async (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
        return next(req);
      },
    ],
  });
  return createClient(service, transport);
}

/** Opens /ws with extra upgrade headers and answers the authentication response and the close. */
async function wsAuthenticate(server: TestServer, mode: WireMode, token: string, headers: Record<string, string> = {}) {
  const socket = new WebSocket(server.url.replace(/^http/, "ws") + "/ws", { headers });
  const closed = new Promise<number>((resolve) => socket.on("close", (code) => resolve(code)));
  const answer = new Promise<ServerFrame>((resolve) =>
    socket.on("message", (data: Buffer, isBinary: boolean) => {
      const frame = isBinary ? fromBinary(ServerFrameSchema, new Uint8Array(data)) : fromJson(ServerFrameSchema, JSON.parse(data.toString("utf8")));
      if (frame.payload.case === "authResponse") resolve(frame);
    }),
  );
  await new Promise<void>((resolve, reject) => {
    socket.once("open", () => resolve());
    socket.once("error", reject);
  });
  const frame = create(ClientFrameSchema, { requestId: 1n, type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token } } });
  socket.send(mode === "binary" ? toBinary(ClientFrameSchema, frame) : JSON.stringify(toJson(ClientFrameSchema, frame)));
  const response = await answer;
  const auth = response.payload.case === "authResponse" ? response.payload.value : undefined;
  return { auth, closed, close: () => socket.close() };
}

const verifications = (receiver: HttpsReceiver) => receiver.received.filter((r) => r.body === "{}");
const signedWith = (request: ReceivedRequest, secretKey: string) =>
  verifyWebhookSignature(secretKey, String(request.headers["x-service-timestamp"]), String(request.headers["x-service-signature"]), request.body);

for (const mode of wireModes) {
  describe(`AgentService (${mode})`, function () {
    this.timeout(30_000);
    let server: TestServer;
    let strict: TestServer;
    let ok: HttpsReceiver;
    let failing: HttpsReceiver;
    let owner: SignedIn;
    let stranger: SignedIn;

    before(async () => {
      // The main server trusts the loopback peer as a proxy, so tests can present client addresses.
      server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", TRUSTED_PROXIES: "127.0.0.1" } });
      // Proxy trust is a node's own setting; a cluster always trusts its front.
      strict = await startTestServer({ topology: "single" });
      ok = await startHttpsReceiver(() => 200);
      failing = await startHttpsReceiver(() => 500);
      owner = await signInWithCode(server, mode);
      stranger = await signInWithCode(server, mode);
    });
    after(async () => {
      await ok.close();
      await failing.close();
      await server.dispose();
      await strict.dispose();
    });

    const agents = (who: { accessToken: string } | TestAgent, on: TestServer = server) => client(on, AgentService, mode, "token" in who ? who.token : who.accessToken);
    const newAgent = (who: SignedIn = owner, on: TestServer = server) => createAgent(on, who, mode);
    const publicAgent = async (who: SignedIn = owner) => {
      const agent = await newAgent(who);
      await agents(who).setAgentConfig({ agentUserId: agent.userId, visibility: AgentVisibility.PUBLIC });
      return agent;
    };
    const webhookUrl = (receiver: HttpsReceiver, path = "/hook") => `${receiver.url}${path}`;
    /** Whether `secretKey` is the agent's current key: Mini App launch data is signed with it. */
    const isCurrentKey = async (agent: TestAgent, secretKey: string) => {
      await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", permissions: 0 });
      const { initData } = await agents(owner).getMiniAppLaunchData({ agentUserId: agent.userId, platform: "desktop" });
      return verifyInitData(initData, secretKey, 3600, Math.floor(server.clock.now() / 1000)) !== undefined;
    };

    describe("AgentService.ListFeaturedAgents", () => {
      let featured: TestAgent[];
      let hidden: TestAgent[];
      before(async () => {
        featured = [];
        for (let i = 0; i < 24; i++) featured.push(await publicAgent());
        hidden = [await newAgent(), await publicAgent()];
        await agents(owner).deleteMyAgent({ agentUserId: hidden[1].userId });
      });

      it("answers public active agents only, with the system agent among them, 20 by default", async () => {
        const all = await agents(stranger).listFeaturedAgents({ limit: 50 });
        const ids = all.agents.map((a) => a.user!.userId);
        expect(new Set(ids).size).to.equal(ids.length);
        for (const agent of featured) expect(ids).to.include(agent.userId);
        for (const agent of hidden) expect(ids).to.not.include(agent.userId);
        expect(all.agents.every((a) => a.visibility === AgentVisibility.PUBLIC && a.status === AgentStatus.ACTIVE)).to.equal(true);
        const system = all.agents.find((a) => a.isSystemAgent);
        expect(system?.user?.userId).to.equal(systemAgentUserId);
        expect(system?.creator).to.equal(undefined);
        const mine = all.agents.find((a) => a.user?.userId === featured[0].userId);
        expect(mine?.creator?.userId).to.equal(owner.userId);
        expect(mine?.user?.accountType).to.equal(AccountType.AGENT);
        expect((await agents(stranger).listFeaturedAgents({})).agents).to.have.length(20);
        expect((await agents(stranger).listFeaturedAgents({ limit: 0 })).agents).to.have.length(20);
        expect((await agents(stranger).listFeaturedAgents({ limit: 3 })).agents).to.have.length(3);
      });

      it("answers a different random batch on repeated calls", async () => {
        const batches = new Set<string>();
        for (let i = 0; i < 5; i++) batches.add((await agents(stranger).listFeaturedAgents({ limit: 5 })).agents.map((a) => a.user!.userId).join(","));
        expect(batches.size).to.be.greaterThan(1);
      });

      it("serves agent tokens too and refuses a limit outside 0..50", async () => {
        expect((await agents(featured[0]).listFeaturedAgents({ limit: 2 })).agents).to.have.length(2);
        await expectError(agents(stranger).listFeaturedAgents({ limit: 51 }), Errors.invalidArgument);
        await expectError(agents(stranger).listFeaturedAgents({ limit: -1 }), Errors.invalidArgument);
      });
    });

    describe("AgentService.GetAgentInfo", () => {
      it("answers the public profile with commands and the Mini App fields", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, commands: { items: [{ command: "weather", description: "Today's weather" }] } });
        await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/start", allowedOrigins: ["https://app.example.com"], permissions: 3 });
        const { agent: info } = await agents(stranger).getAgentInfo({ agentUserId: agent.userId });
        expect(info).to.deep.include({ status: AgentStatus.ACTIVE, visibility: AgentVisibility.PRIVATE, isSystemAgent: false, miniAppEnabled: true, miniAppUrl: "https://app.example.com/start", miniAppPermissions: 3 });
        expect(info?.commands.map((c) => [c.command, c.description])).to.deep.equal([["weather", "Today's weather"]]);
        expect(info?.creator?.userId).to.equal(owner.userId);
        expect(info!.createdAt > 0n).to.equal(true);
      });

      it("answers NOT_FOUND for unknown ids, users and deleted agents; INVALID_ARGUMENT for 0", async () => {
        const agent = await newAgent();
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });
        await expectError(agents(stranger).getAgentInfo({ agentUserId: agent.userId }), Errors.agentNotFound);
        await expectError(agents(stranger).getAgentInfo({ agentUserId: owner.userId }), Errors.agentNotFound);
        await expectError(agents(stranger).getAgentInfo({ agentUserId: 99_999_999 }), Errors.agentNotFound);
        await expectError(agents(stranger).getAgentInfo({ agentUserId: 0 }), Errors.invalidArgument);
      });
    });

    describe("AgentService.SetAgentConfig", () => {
      it("changes only the fields given and issues a new secret key with every call", async () => {
        const agent = await newAgent();
        const first = await agents(owner).setAgentConfig({
          agentUserId: agent.userId,
          visibility: AgentVisibility.PUBLIC,
          ipWhitelist: ["127.0.0.1", "10.0.0.0/8"],
          commands: { items: [{ command: "start", description: "Start" }, { command: "help", description: "Help" }] },
        });
        expect(first.secretKey).to.match(/^nxk_/).and.not.equal(agent.secretKey);
        expect(first.profile).to.deep.include({ visibility: AgentVisibility.PUBLIC, deliveryMode: AgentDeliveryMode.WEBSOCKET, secretKeyPrefix: first.secretKey.slice(0, 12) });
        expect(first.profile?.ipWhitelist).to.deep.equal(["127.0.0.1", "10.0.0.0/8"]);
        expect(first.profile?.commands.map((c) => c.command)).to.deep.equal(["start", "help"]);

        // Visibility and commands are absent, so they stay; the whitelist is a list and always replaces.
        const second = await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["2001:db8::/32"] });
        expect(second.secretKey).to.match(/^nxk_/).and.not.equal(first.secretKey);
        expect(second.profile?.visibility).to.equal(AgentVisibility.PUBLIC);
        expect(second.profile?.commands.map((c) => c.command)).to.deep.equal(["start", "help"]);
        expect(second.profile?.ipWhitelist).to.deep.equal(["2001:db8::/32"]);
        expect(await isCurrentKey(agent, second.secretKey)).to.equal(true);
        expect(await isCurrentKey(agent, first.secretKey)).to.equal(false);

        const cleared = await agents(owner).setAgentConfig({ agentUserId: agent.userId, commands: { items: [] } });
        expect(cleared.profile?.ipWhitelist).to.deep.equal([]);
        expect(cleared.profile?.commands).to.deep.equal([]);
        const { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile).to.deep.include({ visibility: AgentVisibility.PUBLIC, secretKeyPrefix: cleared.secretKey.slice(0, 12) });
        expect(profile!.updatedAt >= profile!.createdAt).to.equal(true);
      });

      it("refuses invalid values with INVALID_ARGUMENT and changes nothing", async () => {
        const agent = await newAgent();
        const id = agent.userId;
        const detail = await expectError(agents(owner).setAgentConfig({ agentUserId: id, ipWhitelist: ["10.0.0.1", "not-an-ip"] }), Errors.invalidIpWhitelist);
        expect(detail.metadata.entry).to.equal("not-an-ip");
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, ipWhitelist: ["10.0.0.0/33"] }), Errors.invalidIpWhitelist);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, ipWhitelist: Array.from({ length: 51 }, (_, i) => `10.0.0.${i}`) }), Errors.invalidArgument);
        const many = Array.from({ length: 101 }, (_, i) => ({ command: `c${i}`, description: "d" }));
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, commands: { items: many } }), Errors.invalidArgument);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, commands: { items: [{ command: "x".repeat(33), description: "d" }] } }), Errors.invalidArgument);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, commands: { items: [{ command: "go", description: "" }] } }), Errors.invalidArgument);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, commands: { items: [{ command: "go", description: "a" }, { command: "go", description: "b" }] } }), Errors.invalidAgentConfig);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, visibility: AgentVisibility.UNSPECIFIED }), Errors.invalidAgentConfig);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, deliveryMode: AgentDeliveryMode.UNSPECIFIED }), Errors.invalidAgentConfig);
        await expectError(agents(owner).setAgentConfig({ agentUserId: id, visibility: 7 as AgentVisibility }), Errors.invalidArgument);
        await expectError(agents(owner).setAgentConfig({ agentUserId: 0 }), Errors.invalidArgument);
        const { profile } = await agents(owner).getMyAgent({ agentUserId: id });
        expect(profile).to.deep.include({ visibility: AgentVisibility.PRIVATE, secretKeyPrefix: agent.secretKey.slice(0, 12) });
        expect(profile?.commands).to.deep.equal([]);
      });

      it("answers NOT_FOUND for unknown or deleted agents and PERMISSION_DENIED for others and for agent tokens", async () => {
        const agent = await newAgent();
        await expectError(agents(stranger).setAgentConfig({ agentUserId: agent.userId, visibility: AgentVisibility.PUBLIC }), Errors.notAgentCreator);
        await expectError(agents(agent).setAgentConfig({ agentUserId: agent.userId, visibility: AgentVisibility.PUBLIC }), Errors.userOnly);
        await expectError(agents(owner).setAgentConfig({ agentUserId: 99_999_999 }), Errors.agentNotFound);
        await expectError(agents(owner).setAgentConfig({ agentUserId: stranger.userId }), Errors.agentNotFound);
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId }), Errors.agentNotFound);
      });
    });

    describe("AgentService.SetAgentConfig webhook rules", () => {
      it("configures WEBHOOK after a test request signed with the key the agent holds, then issues a new key that replaces it at once", async () => {
        const agent = await newAgent();
        const before = verifications(ok).length;
        const { secretKey, profile } = await agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok, "/a") });
        expect(profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBHOOK);
        expect(profile?.secretKeyPrefix).to.equal(secretKey.slice(0, 12));
        const tests = verifications(ok).slice(before);
        expect(tests).to.have.length(1);
        expect(tests[0]).to.deep.include({ method: "POST", path: "/a", body: "{}" });
        expect(tests[0].headers["content-type"]).to.equal("application/json");
        expect(signedWith(tests[0], agent.secretKey)).to.equal(true);
        expect(signedWith(tests[0], secretKey)).to.equal(false);
        expect(await isCurrentKey(agent, secretKey)).to.equal(true);
        expect(await isCurrentKey(agent, agent.secretKey)).to.equal(false);

        // A new URL alone, in WEBHOOK mode, is a new configuration: tested again (with the key the
        // first call issued, now the agent's), new key again.
        const moved = await agents(owner).setAgentConfig({ agentUserId: agent.userId, webhookUrl: webhookUrl(ok, "/b") });
        const retest = verifications(ok).slice(before);
        expect(retest).to.have.length(2);
        expect(retest[1].path).to.equal("/b");
        expect(signedWith(retest[1], secretKey)).to.equal(true);
        expect(signedWith(retest[1], moved.secretKey)).to.equal(false);
        expect(moved.secretKey).to.not.equal(secretKey);
      });

      it("needs an https URL for WEBHOOK and makes no request for a refused one", async () => {
        const agent = await newAgent();
        const before = verifications(ok).length;
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK }), Errors.webhookUrlRequired);
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: "" }), Errors.webhookUrlRequired);
        const plain = await expectError(
          agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok).replace("https:", "http:") }),
          Errors.invalidWebhookUrl,
        );
        expect(plain.metadata.reason).to.match(/https/);
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: "not a url" }), Errors.invalidWebhookUrl);
        await expectError(
          agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: `https://example.com/${"x".repeat(2040)}` }),
          Errors.invalidArgument,
        );
        // A URL belongs to WEBHOOK mode only.
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, webhookUrl: webhookUrl(ok) }), Errors.invalidAgentConfig);
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBSOCKET, webhookUrl: webhookUrl(ok) }), Errors.invalidAgentConfig);
        expect(verifications(ok).length).to.equal(before);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
      });

      it("refuses a URL whose test request fails (HTTP 500): nothing changes and the old key stays valid", async () => {
        const agent = await newAgent();
        const configured = await agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok, "/keep") });
        const before = failing.received.length;
        const detail = await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, webhookUrl: webhookUrl(failing) }), Errors.webhookUnreachable);
        expect(detail.metadata.reason).to.equal("answered HTTP 500");
        const attempts = failing.received.slice(before).filter((r) => r.body === "{}");
        expect(attempts).to.have.length(1);
        expect(signedWith(attempts[0], configured.secretKey)).to.equal(true);
        const { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile).to.deep.include({ deliveryMode: AgentDeliveryMode.WEBHOOK, secretKeyPrefix: configured.secretKey.slice(0, 12) });
        expect(await isCurrentKey(agent, configured.secretKey)).to.equal(true);
        // The stored URL is still the working one: WEBHOOK alone re-tests it.
        const count = verifications(ok).length;
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK });
        expect(verifications(ok).slice(count).map((r) => r.path)).to.deep.equal(["/keep"]);
      });

      it("switching to WEBSOCKET clears the webhook URL", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok) });
        const { profile } = await agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBSOCKET });
        expect(profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
        await expectError(agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK }), Errors.webhookUrlRequired);
      });

      it("refuses loopback targets when private networks are not allowed (SSRF guard)", async () => {
        const strictOwner = await signInWithCode(strict, mode);
        const agent = await newAgent(strictOwner, strict);
        const before = verifications(ok).length;
        const detail = await expectError(
          agents(strictOwner, strict).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok) }),
          Errors.webhookUnreachable,
        );
        expect(detail.metadata.reason).to.match(/private address/);
        expect(verifications(ok).length).to.equal(before);
      });

      if (mode === "json") {
        it("refuses a URL that does not answer within 5 seconds", async () => {
          const slow = await startHttpsReceiver(() => new Promise((resolve) => setTimeout(() => resolve(200), 6500)));
          try {
            const agent = await newAgent();
            const detail = await expectError(
              agents(owner).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(slow) }),
              Errors.webhookUnreachable,
            );
            expect(detail.metadata.reason).to.match(/no answer within/);
            expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
          } finally {
            await slow.close();
          }
        });
      }
    });

    describe("AgentService.UpdateAgentSelfConfig", () => {
      it("lets the agent replace its commands and configure its webhook, testing it with the agent's key and never changing the key", async () => {
        const agent = await newAgent();
        await agents(agent).updateAgentSelfConfig({ commands: { items: [{ command: "ask", description: "Ask me" }] } });
        await agents(agent).updateAgentSelfConfig({});
        let { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile?.commands.map((c) => c.command)).to.deep.equal(["ask"]);
        expect(profile?.secretKeyPrefix).to.equal(agent.secretKey.slice(0, 12));

        const before = verifications(ok).length;
        await agents(agent).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(ok, "/self") });
        const [test] = verifications(ok).slice(before);
        expect(test.path).to.equal("/self");
        expect(signedWith(test, agent.secretKey)).to.equal(true);
        expect(await isCurrentKey(agent, agent.secretKey)).to.equal(true);
        ({ profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId }));
        expect(profile).to.deep.include({ deliveryMode: AgentDeliveryMode.WEBHOOK, secretKeyPrefix: agent.secretKey.slice(0, 12) });
        expect(profile?.commands.map((c) => c.command)).to.deep.equal(["ask"]);

        await agents(agent).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBSOCKET, commands: { items: [] } });
        ({ profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId }));
        expect(profile).to.deep.include({ deliveryMode: AgentDeliveryMode.WEBSOCKET, secretKeyPrefix: agent.secretKey.slice(0, 12) });
        expect(profile?.commands).to.deep.equal([]);
      });

      it("answers PERMISSION_DENIED to users, INVALID_ARGUMENT to bad values, FAILED_PRECONDITION once deleted", async () => {
        const agent = await newAgent();
        await expectError(agents(owner).updateAgentSelfConfig({ commands: { items: [] } }), Errors.agentOnly);
        await expectError(agents(agent).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK }), Errors.webhookUrlRequired);
        await expectError(agents(agent).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: "http://example.com/hook" }), Errors.invalidWebhookUrl);
        await expectError(agents(agent).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: webhookUrl(failing) }), Errors.webhookUnreachable);
        await expectError(agents(agent).updateAgentSelfConfig({ commands: { items: Array.from({ length: 101 }, (_, i) => ({ command: `c${i}`, description: "d" })) } }), Errors.invalidArgument);
        await expectError(agents(agent).updateAgentSelfConfig({ webhookUrl: "x".repeat(2049) }), Errors.invalidArgument);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });
        await expectError(agents(agent).updateAgentSelfConfig({ commands: { items: [] } }), Errors.agentNotActive);
      });
    });

    describe("agent IP whitelist", () => {
      it("leaves an agent without a whitelist unrestricted and refuses other addresses once it has one", async () => {
        const agent = await newAgent();
        const asAgent = () => client(server, UserService, mode, agent.token);
        expect((await asAgent().getProfile({})).profile?.userId).to.equal(agent.userId);
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["10.0.0.0/8", "::1"] });
        const detail = await expectError(asAgent().getProfile({}), Errors.ipNotAllowed);
        expect(detail.metadata.clientIp).to.equal("127.0.0.1");
        await expectError(agents(agent).updateAgentSelfConfig({}), Errors.ipNotAllowed);
        // User tokens are never restricted by an agent's list.
        expect((await client(server, UserService, mode, owner.accessToken).getProfile({})).profile?.userId).to.equal(owner.userId);
        for (const list of [["127.0.0.1"], ["127.0.0.0/8"], ["::ffff:127.0.0.1"], ["::ffff:127.0.0.0/104", "2001:db8::/32"]]) {
          await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: list });
          expect((await asAgent().getProfile({})).profile?.userId, list.join(",")).to.equal(agent.userId);
        }
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: [] });
        expect((await asAgent().getProfile({})).profile?.userId).to.equal(agent.userId);
      });

      it("applies to the WebSocket authentication", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["192.0.2.0/24"] });
        const refused = await wsAuthenticate(server, mode, agent.token);
        expect(refused.auth?.success).to.equal(false);
        expect(refused.auth?.error?.errorName).to.equal(Errors.ipNotAllowed.errorName);
        expect(await refused.closed).to.equal(4001);
        const forwarded = await wsAuthenticate(server, mode, agent.token, { "x-forwarded-for": "192.0.2.44" });
        expect(forwarded.auth).to.deep.include({ success: true, userId: agent.userId });
        forwarded.close();
      });

      it("closes open agent sockets whose address a changed whitelist no longer allows, and only those", async () => {
        const agent = await newAgent();
        const first = await wsAuthenticate(server, mode, agent.token, { "x-forwarded-for": "192.0.2.44" });
        const second = await wsAuthenticate(server, mode, agent.token, { "x-forwarded-for": "198.51.100.9" });
        expect(first.auth?.success && second.auth?.success).to.equal(true);
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["198.51.100.0/24"] });
        expect(await first.closed).to.equal(4003);
        // The allowed socket stays: a later change that still allows it leaves it open too.
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["198.51.100.9", "203.0.113.1"] });
        const stillOpen = await Promise.race([second.closed.then(() => false), new Promise<boolean>((resolve) => setTimeout(() => resolve(true), 300))]);
        expect(stillOpen).to.equal(true);
        second.close();
      });

      it("reads the client address from X-Forwarded-For behind a trusted proxy only (rightmost untrusted hop), IPv4 and IPv6", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["203.0.113.0/24", "2001:db8::/32"] });
        const from = (forwardedFor: string, on: TestServer = server) => clientWithHeaders(on, UserService, mode, agent.token, { "x-forwarded-for": forwardedFor }).getProfile({});
        for (const allowed of ["203.0.113.7", "198.51.100.1, 203.0.113.7", "2001:db8::9", "::ffff:203.0.113.8"]) {
          expect((await from(allowed)).profile?.userId, allowed).to.equal(agent.userId);
        }
        for (const refused of ["198.51.100.1", "203.0.113.7, 198.51.100.1", "2001:db9::1"]) {
          const detail = await expectError(from(refused), Errors.ipNotAllowed);
          expect(detail.metadata.clientIp).to.equal(refused.split(", ").pop());
        }
        // A server that trusts no proxy ignores the header: the TCP peer is the client.
        const strictOwner = await signInWithCode(strict, mode);
        const strictAgent = await newAgent(strictOwner, strict);
        await agents(strictOwner, strict).setAgentConfig({ agentUserId: strictAgent.userId, ipWhitelist: ["203.0.113.0/24"] });
        const ignored = await expectError(
          clientWithHeaders(strict, UserService, mode, strictAgent.token, { "x-forwarded-for": "203.0.113.7" }).getProfile({}),
          Errors.ipNotAllowed,
        );
        expect(ignored.metadata.clientIp).to.equal("127.0.0.1");
      });
    });

    describe("AgentService.RegenerateAgentToken", () => {
      it("answers a new agent token; the old one stops at once and its sockets are closed", async () => {
        const agent = await newAgent();
        const socket = await GatewayClient.connect(server.url, mode);
        const answer = await socket.authenticate(agent.token);
        expect(answer.payload.case === "authResponse" && answer.payload.value.success).to.equal(true);
        const userSocket = await GatewayClient.connect(server.url, mode);
        await userSocket.authenticate(owner.accessToken);

        const { token } = await agents(owner).regenerateAgentToken({ agentUserId: agent.userId });
        expect(token).to.match(/^nxa_/).and.not.equal(agent.token);
        const closed = await socket.closed;
        expect(closed).to.deep.equal({ code: 4003, reason: Errors.agentTokenRevoked.errorName });
        const errorFrame = socket.frames.find((f) => f.payload.case === "error");
        expect(errorFrame?.payload.case === "error" && errorFrame.payload.value.error?.errorName).to.equal(Errors.agentTokenRevoked.errorName);
        await expectError(client(server, UserService, mode, agent.token).getProfile({}), Errors.unauthenticated);
        expect((await client(server, UserService, mode, token).getProfile({})).profile?.userId).to.equal(agent.userId);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.tokenPrefix).to.equal(token.slice(0, 12));
        // The owner's own socket is not the agent's: it stays open.
        userSocket.send({ type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
        await userSocket.next((f) => f.payload.case === "heartbeatPong");
        userSocket.close();
      });

      it("answers NOT_FOUND and PERMISSION_DENIED as the other management calls", async () => {
        const agent = await newAgent();
        await expectError(agents(stranger).regenerateAgentToken({ agentUserId: agent.userId }), Errors.notAgentCreator);
        await expectError(agents(agent).regenerateAgentToken({ agentUserId: agent.userId }), Errors.userOnly);
        await expectError(agents(owner).regenerateAgentToken({ agentUserId: 99_999_999 }), Errors.agentNotFound);
        await expectError(agents(owner).regenerateAgentToken({ agentUserId: 0 }), Errors.invalidArgument);
        expect((await client(server, UserService, mode, agent.token).getProfile({})).profile?.userId).to.equal(agent.userId);
      });
    });

    describe("AgentService.RegenerateAgentSecretKey", () => {
      it("answers a new key that replaces the old one at once", async () => {
        const agent = await newAgent();
        expect(await isCurrentKey(agent, agent.secretKey)).to.equal(true);
        const { secretKey } = await agents(owner).regenerateAgentSecretKey({ agentUserId: agent.userId });
        expect(secretKey).to.match(/^nxk_/).and.not.equal(agent.secretKey);
        expect(await isCurrentKey(agent, secretKey)).to.equal(true);
        expect(await isCurrentKey(agent, agent.secretKey)).to.equal(false);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.secretKeyPrefix).to.equal(secretKey.slice(0, 12));
        // The token is untouched.
        expect((await client(server, UserService, mode, agent.token).getProfile({})).profile?.userId).to.equal(agent.userId);
      });

      it("answers NOT_FOUND and PERMISSION_DENIED", async () => {
        const agent = await newAgent();
        await expectError(agents(stranger).regenerateAgentSecretKey({ agentUserId: agent.userId }), Errors.notAgentCreator);
        await expectError(agents(agent).regenerateAgentSecretKey({ agentUserId: agent.userId }), Errors.userOnly);
        await expectError(agents(owner).regenerateAgentSecretKey({ agentUserId: owner.userId }), Errors.agentNotFound);
      });
    });

    describe("AgentService.DeleteMyAgent", () => {
      it("deletes: token and sockets end, groups lose the agent, contacts are told, conversations turn read-only", async () => {
        const agent = await publicAgent();
        const fan = await signInWithCode(server, mode);
        const outsider = await signInWithCode(server, mode);
        await client(server, ContactService, mode, fan.accessToken).addContact({ targetUserId: agent.userId });
        const fanConversation = privateConversationId(fan.userId, agent.userId);
        await client(server, MessageService, mode, fan.accessToken).sendMessage({ conversationId: fanConversation, clientMessageId: clientIds++, body: text("hello bot") });
        const groups = client(server, GroupService, mode, owner.accessToken);
        const { group } = await groups.createGroup({ name: "with bot", memberIds: [fan.userId, agent.userId] });
        const fanSync = client(server, SyncService, mode, fan.accessToken);
        const ownerSync = client(server, SyncService, mode, owner.accessToken);
        const outsiderSync = client(server, SyncService, mode, outsider.accessToken);
        const [fanSn, ownerSn, outsiderSn] = await Promise.all([fanSync, ownerSync, outsiderSync].map(async (s) => (await s.getCurrentState({})).state!.latestSn));
        const socket = await GatewayClient.connect(server.url, mode);
        await socket.authenticate(agent.token);

        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });

        expect((await socket.closed).code).to.equal(4003);
        await expectError(client(server, UserService, mode, agent.token).getProfile({}), Errors.agentNotActive);
        await expectError(agents(stranger).getAgentInfo({ agentUserId: agent.userId }), Errors.agentNotFound);
        await expectError(agents(owner).getMyAgent({ agentUserId: agent.userId }), Errors.agentNotFound);
        expect((await agents(owner).listMyAgents({})).agents.map((a) => a.user?.userId)).to.not.include(agent.userId);
        await expectError(agents(owner).deleteMyAgent({ agentUserId: agent.userId }), Errors.agentNotFound);

        const info = await groups.getGroupInfo({ groupId: group!.groupId });
        expect(info.members.map((m) => m.userId).sort()).to.deep.equal([owner.userId, fan.userId].sort());
        const history = await client(server, MessageService, mode, fan.accessToken).getMessageHistory({ conversationId: BigInt(group!.groupId) });
        const last = history.messages[0];
        expect(last.senderId).to.equal(0);
        const event = last.body?.content.case === "group" ? last.body.content.value.event : undefined;
        expect(event?.case).to.equal("memberLeft");
        expect(event?.case === "memberLeft" && event.value.member?.userId).to.equal(agent.userId);

        const statusEvents = async (sync: typeof fanSync, sn: number) =>
          (await sync.getDifference({ sn })).updates.flatMap((u) => (u.update.case === "agentStatusChanged" ? [u.update.value] : []));
        for (const [sync, sn] of [[fanSync, fanSn], [ownerSync, ownerSn]] as const) {
          const events = await statusEvents(sync, sn);
          expect(events.map((e) => [e.agentUserId, e.newStatus])).to.deep.equal([[agent.userId, AgentStatus.DELETED]]);
        }
        expect(await statusEvents(outsiderSync, outsiderSn)).to.deep.equal([]);

        // History stays readable; nothing new can be sent; nobody can add the agent again.
        const privateHistory = await client(server, MessageService, mode, fan.accessToken).getMessageHistory({ conversationId: fanConversation });
        expect(privateHistory.messages.some((m) => m.body?.content.case === "text" && m.body.content.value.text === "hello bot")).to.equal(true);
        await expectError(
          client(server, MessageService, mode, fan.accessToken).sendMessage({ conversationId: fanConversation, clientMessageId: clientIds++, body: text("still there?") }),
          Errors.conversationReadOnly,
        );
        await expectError(
          client(server, MessageService, mode, owner.accessToken).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text("hi") }),
          Errors.conversationReadOnly,
        );
        await expectError(client(server, ContactService, mode, outsider.accessToken).addContact({ targetUserId: agent.userId }), Errors.agentNotActive);
      });

      it("answers NOT_FOUND and PERMISSION_DENIED, leaving the agent active", async () => {
        const agent = await newAgent();
        await expectError(agents(stranger).deleteMyAgent({ agentUserId: agent.userId }), Errors.notAgentCreator);
        await expectError(agents(agent).deleteMyAgent({ agentUserId: agent.userId }), Errors.userOnly);
        await expectError(agents(owner).deleteMyAgent({ agentUserId: 99_999_999 }), Errors.agentNotFound);
        await expectError(agents(owner).deleteMyAgent({ agentUserId: systemAgentUserId }), Errors.notAgentCreator);
        expect((await agents(stranger).getAgentInfo({ agentUserId: agent.userId })).agent?.status).to.equal(AgentStatus.ACTIVE);
      });
    });

    describe("a deleted agent's token", () => {
      it("still identifies the agent: every RPC answers FAILED_PRECONDITION AGENT_NOT_ACTIVE before validation or the handler", async () => {
        const agent = await newAgent();
        expect((await client(server, UserService, mode, agent.token).getProfile({})).profile?.userId).to.equal(agent.userId);
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });

        await expectError(agents(agent).updateAgentSelfConfig({ commands: { items: [{ command: "help", description: "d" }] } }), Errors.agentNotActive);
        // Out of bounds: validation would answer INVALID_ARGUMENT had authentication let it through.
        await expectError(agents(agent).updateAgentSelfConfig({ webhookUrl: "x".repeat(2049) }), Errors.agentNotActive);
        const detail = await expectError(client(server, UserService, mode, agent.token).getProfile({}), Errors.agentNotActive);
        expect(detail.errorCode).to.equal(7003);
        // The handler would answer CONVERSATION_READ_ONLY, and a user-only call USER_ONLY.
        await expectError(
          client(server, MessageService, mode, agent.token).sendMessage({ conversationId: agent.conversationId, clientMessageId: clientIds++, body: text("still here") }),
          Errors.agentNotActive,
        );
        await expectError(agents(agent).createAgent({ username: `bot_${Date.now()}`, name: "Bot" }), Errors.agentNotActive);
        // Its creator cannot add it back either (the spec's code 7003).
        await expectError(client(server, ContactService, mode, owner.accessToken).addContact({ targetUserId: agent.userId }), Errors.agentNotActive);
      });

      it("is refused at /ws authentication with AGENT_NOT_ACTIVE, and the connection closes", async () => {
        const agent = await newAgent();
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });
        const { auth, closed } = await wsAuthenticate(server, mode, agent.token);
        expect(auth?.success).to.equal(false);
        expect(auth?.error).to.deep.include({ errorName: Errors.agentNotActive.errorName, errorCode: Errors.agentNotActive.errorCode });
        expect(await closed).to.equal(4001);
      });

      it("leaves a token replaced before the deletion UNAUTHENTICATED; the current one answers AGENT_NOT_ACTIVE", async () => {
        const agent = await newAgent();
        const { token } = await agents(owner).regenerateAgentToken({ agentUserId: agent.userId });
        await expectError(client(server, UserService, mode, agent.token).getProfile({}), Errors.unauthenticated);
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });

        await expectError(agents(agent).updateAgentSelfConfig({ commands: { items: [] } }), Errors.unauthenticated);
        await expectError(client(server, UserService, mode, agent.token).getProfile({}), Errors.unauthenticated);
        const old = await wsAuthenticate(server, mode, agent.token);
        expect(old.auth?.error?.errorName).to.equal(Errors.unauthenticated.errorName);
        expect(await old.closed).to.equal(4001);

        const current = { ...agent, token };
        await expectError(agents(current).updateAgentSelfConfig({ commands: { items: [] } }), Errors.agentNotActive);
        await expectError(client(server, UserService, mode, token).getProfile({}), Errors.agentNotActive);
        const refused = await wsAuthenticate(server, mode, token);
        expect(refused.auth?.error?.errorName).to.equal(Errors.agentNotActive.errorName);
        expect(await refused.closed).to.equal(4001);
        // Nor can a deleted agent be given a fresh token.
        await expectError(agents(owner).regenerateAgentToken({ agentUserId: agent.userId }), Errors.agentNotFound);
      });

      it("is checked against the IP whitelist first: outside it the answer stays IP_NOT_ALLOWED", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentConfig({ agentUserId: agent.userId, ipWhitelist: ["203.0.113.0/24"] });
        await agents(owner).deleteMyAgent({ agentUserId: agent.userId });
        const from = (forwardedFor: string) => clientWithHeaders(server, UserService, mode, agent.token, { "x-forwarded-for": forwardedFor }).getProfile({});
        await expectError(from("198.51.100.1"), Errors.ipNotAllowed);
        await expectError(from("203.0.113.7"), Errors.agentNotActive);
        const outside = await wsAuthenticate(server, mode, agent.token, { "x-forwarded-for": "198.51.100.1" });
        expect(outside.auth?.error?.errorName).to.equal(Errors.ipNotAllowed.errorName);
        const inside = await wsAuthenticate(server, mode, agent.token, { "x-forwarded-for": "203.0.113.7" });
        expect(inside.auth?.error?.errorName).to.equal(Errors.agentNotActive.errorName);
        await Promise.all([outside.closed, inside.closed]);
      });
    });

    describe("AgentService.SetAgentMiniApp", () => {
      it("stores the Mini App, shown in full to the creator and in part publicly", async () => {
        const agent = await newAgent();
        await agents(owner).setAgentMiniApp({
          agentUserId: agent.userId,
          enabled: true,
          url: "https://app.example.com/start?x=1",
          allowedOrigins: ["https://app.example.com", "http://localhost:5173"],
          permissions: MiniAppPermission.readProfile | MiniAppPermission.requestContact,
        });
        const { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile).to.deep.include({ miniAppEnabled: true, miniAppUrl: "https://app.example.com/start?x=1", miniAppPermissions: 5 });
        expect(profile?.miniAppAllowedOrigins).to.deep.equal(["https://app.example.com", "http://localhost:5173"]);
        await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: false });
        expect((await agents(stranger).getAgentInfo({ agentUserId: agent.userId })).agent).to.deep.include({ miniAppEnabled: false, miniAppUrl: "", miniAppPermissions: 0 });
      });

      it("refuses invalid URLs, origins and permission bits, and callers who are not the creator", async () => {
        const agent = await newAgent();
        const set = (fields: { enabled?: boolean; url?: string; allowedOrigins?: string[]; permissions?: number }) =>
          agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", ...fields });
        await expectError(set({ url: "http://app.example.com/" }), Errors.invalidMiniAppUrl);
        await expectError(set({ url: "" }), Errors.invalidMiniAppUrl);
        await expectError(set({ url: "app.example.com" }), Errors.invalidMiniAppUrl);
        await expectError(set({ enabled: false, url: "ftp://app.example.com/" }), Errors.invalidMiniAppUrl);
        for (const origin of ["https://app.example.com/", "https://app.example.com/path", "http://app.example.com", "app.example.com", "*"]) {
          const detail = await expectError(set({ allowedOrigins: [origin] }), Errors.invalidMiniAppOrigin);
          expect(detail.metadata.origin).to.equal(origin);
        }
        await expectError(set({ permissions: 8 }), Errors.invalidMiniAppPermissions);
        await expectError(set({ permissions: -1 }), Errors.invalidMiniAppPermissions);
        await expectError(agents(stranger).setAgentMiniApp({ agentUserId: agent.userId, enabled: false }), Errors.notAgentCreator);
        await expectError(agents(agent).setAgentMiniApp({ agentUserId: agent.userId, enabled: false }), Errors.userOnly);
        await expectError(agents(owner).setAgentMiniApp({ agentUserId: 99_999_999, enabled: false }), Errors.agentNotFound);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.miniAppEnabled).to.equal(false);
        await set({ permissions: 7 });
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.miniAppPermissions).to.equal(7);
      });
    });

    describe("AgentService.GetMiniAppLaunchData", () => {
      let agent: TestAgent;
      let key: string;
      before(async () => {
        agent = await publicAgent();
        key = (await agents(owner).regenerateAgentSecretKey({ agentUserId: agent.userId })).secretKey;
      });
      const nowSeconds = () => Math.floor(server.clock.now() / 1000);
      const launch = (who: SignedIn, fields: { conversationId?: bigint; startParam?: string; platform?: string } = {}) =>
        agents(who).getMiniAppLaunchData({ agentUserId: agent.userId, platform: "ios", ...fields });

      it("answers FAILED_PRECONDITION until the Mini App is enabled", async () => {
        await expectError(launch(stranger), Errors.miniAppNotEnabled);
        await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", permissions: MiniAppPermission.readProfile });
        expect((await launch(stranger)).miniAppUrl).to.equal("https://app.example.com/");
      });

      it("signs initData with the agent's secret key; the exported verifier accepts it and refuses any tampering", async () => {
        const { initData } = await launch(owner, { conversationId: agent.conversationId, startParam: "ref_42", platform: "Android" });
        const fields = verifyInitData(initData, key, 60, nowSeconds());
        expect(fields).to.not.equal(undefined);
        expect(fields).to.deep.include({ agent_user_id: String(agent.userId), conversation_id: String(agent.conversationId), start_param: "ref_42", platform: "android" });
        expect(Object.keys(fields!).sort()).to.deep.equal(["agent_user_id", "auth_date", "conversation_id", "hash", "platform", "query_id", "start_param", "user"]);
        expect(Math.abs(Number(fields!.auth_date) - nowSeconds())).to.be.lessThan(5);
        expect(JSON.parse(fields!.user)).to.deep.include({ userId: owner.userId, accountType: "ACCOUNT_TYPE_USER" });
        const again = verifyInitData((await launch(owner)).initData, key, 60, nowSeconds());
        expect(again?.query_id).to.not.equal(fields!.query_id);
        expect(again?.conversation_id).to.equal("0");

        const tampered = new URLSearchParams(initData);
        tampered.set("start_param", "ref_43");
        expect(verifyInitData(tampered.toString(), key, 60, nowSeconds())).to.equal(undefined);
        const otherUser = new URLSearchParams(initData);
        otherUser.set("user", JSON.stringify({ userId: stranger.userId }));
        expect(verifyInitData(otherUser.toString(), key, 60, nowSeconds())).to.equal(undefined);
        const repeated = `${initData}&start_param=ref_42`;
        expect(verifyInitData(repeated, key, 60, nowSeconds())).to.equal(undefined);
        expect(verifyInitData(initData, agent.secretKey, 60, nowSeconds())).to.equal(undefined);
        expect(verifyInitData(initData, key, 60, nowSeconds() + 120)).to.equal(undefined);
        expect(verifyInitData(initData.replace(/hash=[0-9a-f]+/, "hash=00"), key, 60, nowSeconds())).to.equal(undefined);
      });

      it("builds initData that the upstream SDK's rule (nexus-x) verifies", async () => {
        const { initData } = await launch(owner, { conversationId: agent.conversationId, startParam: "a b&c=d/é", platform: "desktop" });
        const fields = upstreamVerifyInitData(initData, key, nowSeconds());
        expect(fields).to.not.equal(undefined);
        expect(fields).to.deep.include({ start_param: "a b&c=d/é", conversation_id: String(agent.conversationId), agent_user_id: String(agent.userId) });
        expect(upstreamVerifyInitData(initData, agent.secretKey, nowSeconds()), "an old key").to.equal(undefined);
        expect(upstreamVerifyInitData(initData, key, nowSeconds() + 301), "auth_date 5 minutes past").to.equal(undefined);
        expect(upstreamVerifyInitData(initData, key, nowSeconds() - 301), "auth_date 5 minutes ahead").to.equal(undefined);
        const tampered = new URLSearchParams(initData);
        tampered.set("platform", "ios");
        expect(upstreamVerifyInitData(tampered.toString(), key, nowSeconds())).to.equal(undefined);
        // Keyed with the derived key, not the secret key itself.
        const params = new URLSearchParams(initData);
        const dataCheck = [...params.keys()].filter((k) => k !== "hash").sort().map((k) => `${k}=${params.get(k)}`).join("\n");
        expect(params.get("hash")).to.not.equal(createHmac("sha256", key).update(dataCheck).digest("hex"));
      });

      it("refuses a startParam with line breaks, so a signed string cannot be re-cut into forged fields", async () => {
        // The attack: a startParam that reads as extra "key=value" lines of the data-check string.
        const forgedUser = JSON.stringify({ userId: owner.userId });
        const startParam = `x\nuser=${forgedUser}\nzzz=`;
        await expectError(launch(stranger, { startParam }), Errors.invalidArgument);
        await expectError(launch(stranger, { startParam: "tab\there" }), Errors.invalidArgument);
        // And the verifier refuses unknown fields and line breaks even if a signer let them through.
        const { initData } = await launch(stranger, { startParam: "ok" });
        const extra = new URLSearchParams(initData);
        extra.append("zzz", "1");
        expect(verifyInitData(extra.toString(), key, 60, nowSeconds())).to.equal(undefined);
        const broken = new URLSearchParams(initData);
        broken.set("start_param", "a\nb");
        expect(verifyInitData(broken.toString(), key, 60, nowSeconds())).to.equal(undefined);
      });

      it("carries only the user id without the READ_PROFILE permission", async () => {
        await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", permissions: MiniAppPermission.sendMessages });
        const fields = verifyInitData((await launch(stranger)).initData, key, 60, nowSeconds());
        expect(JSON.parse(fields!.user)).to.deep.equal({ userId: stranger.userId });
        await agents(owner).setAgentMiniApp({ agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", permissions: MiniAppPermission.readProfile });
      });

      it("accepts the caller's PRIVATE conversation with the agent or a group with both, nothing else", async () => {
        const fan = await signInWithCode(server, mode);
        await client(server, ContactService, mode, fan.accessToken).addContact({ targetUserId: agent.userId });
        const fanConversation = privateConversationId(fan.userId, agent.userId);
        expect(verifyInitData((await launch(fan, { conversationId: fanConversation })).initData, key, 60, nowSeconds())?.conversation_id).to.equal(String(fanConversation));
        const { group } = await client(server, GroupService, mode, owner.accessToken).createGroup({ name: "launch", memberIds: [fan.userId, agent.userId] });
        await launch(fan, { conversationId: BigInt(group!.groupId) });
        const { group: without } = await client(server, GroupService, mode, owner.accessToken).createGroup({ name: "no bot", memberIds: [fan.userId, stranger.userId] });
        await expectError(launch(fan, { conversationId: BigInt(without!.groupId) }), Errors.launchConversationMismatch);
        await expectError(launch(stranger, { conversationId: BigInt(group!.groupId) }), Errors.launchConversationMismatch);
        await expectError(launch(stranger, { conversationId: fanConversation }), Errors.launchConversationMismatch);
        await expectError(launch(stranger, { conversationId: 12345n << 32n }), Errors.launchConversationMismatch);
      });

      it("refuses callers without access to a private agent, agent tokens, and bad input", async () => {
        const hidden = await newAgent();
        await agents(owner).setAgentMiniApp({ agentUserId: hidden.userId, enabled: true, url: "https://app.example.com/", permissions: 0 });
        await expectError(agents(stranger).getMiniAppLaunchData({ agentUserId: hidden.userId, platform: "ios" }), Errors.noAgentAccess);
        expect((await agents(owner).getMiniAppLaunchData({ agentUserId: hidden.userId, platform: "ios" })).initData).to.include("hash=");
        await expectError(agents(agent).getMiniAppLaunchData({ agentUserId: agent.userId, platform: "ios" }), Errors.userOnly);
        await expectError(agents(stranger).getMiniAppLaunchData({ agentUserId: 99_999_999, platform: "ios" }), Errors.agentNotFound);
        await expectError(agents(stranger).getMiniAppLaunchData({ agentUserId: 0, platform: "ios" }), Errors.invalidArgument);
        await expectError(launch(stranger, { platform: "an odd platform" }), Errors.invalidArgument);
        await expectError(launch(stranger, { startParam: "p".repeat(513) }), Errors.invalidArgument);
      });
    });

    describe("the system agent", () => {
      const messagesOf = (who: SignedIn) => client(server, MessageService, mode, who.accessToken);
      const systemConversation = (who: SignedIn) => privateConversationId(who.userId, systemAgentUserId);
      /** Sends a text to the system agent and waits for the answer to it. */
      const ask = async (who: SignedIn, question: string): Promise<MessageEnvelope> => {
        const { messageId } = await messagesOf(who).sendMessage({ conversationId: systemConversation(who), clientMessageId: clientIds++, body: text(question) });
        return eventually(async () => {
          const { messages } = await messagesOf(who).getMessageHistory({ conversationId: systemConversation(who), afterMessageId: messageId });
          return messages.find((m) => m.senderId === systemAgentUserId && m.replyTo?.messageId === messageId);
        });
      };
      const textOf = (m: MessageEnvelope) => (m.body?.content.case === "text" ? m.body.content.value.text : "");

      before(async () => {
        await client(server, ContactService, mode, owner.accessToken).addContact({ targetUserId: systemAgentUserId });
        await client(server, ContactService, mode, stranger.accessToken).addContact({ targetUserId: systemAgentUserId });
      });

      it("exists on a fresh install: public, built in, without a creator, under a fixed username", async () => {
        const { agent } = await agents(stranger).getAgentInfo({ agentUserId: systemAgentUserId });
        expect(agent).to.deep.include({ isSystemAgent: true, visibility: AgentVisibility.PUBLIC, status: AgentStatus.ACTIVE });
        expect(agent?.creator).to.equal(undefined);
        expect(agent?.user?.username).to.equal(systemAgentUsername);
        expect(agent?.commands.map((c) => c.command)).to.include("setwebhook");
        const resolved = await client(server, UserService, mode, stranger.accessToken).resolveUsername({ username: systemAgentUsername });
        expect(resolved.user?.userId).to.equal(systemAgentUserId);
      });

      it("/setwebhook configures the sender's agent like SetAgentConfig and answers the new secret key", async () => {
        const agent = await newAgent();
        const username = (await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile!.user!.username;
        const before = verifications(ok).length;
        const reply = await ask(owner, `/setwebhook @${username} ${webhookUrl(ok, "/via-system")}`);
        expect(reply.body?.type).to.equal(MessageType.TEXT);
        const key = /New secret key: (nxk_\S+)/.exec(textOf(reply))?.[1];
        expect(key, textOf(reply)).to.be.a("string");
        const [test] = verifications(ok).slice(before);
        expect(test.path).to.equal("/via-system");
        // Tested with the key the agent held; the new one signs what follows.
        expect(signedWith(test, agent.secretKey)).to.equal(true);
        expect(key).to.not.equal(agent.secretKey);
        const { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile).to.deep.include({ deliveryMode: AgentDeliveryMode.WEBHOOK, secretKeyPrefix: key!.slice(0, 12) });
      });

      it("answers the reason when the webhook is refused, and changes nothing", async () => {
        const agent = await newAgent();
        const username = (await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile!.user!.username;
        const refused = textOf(await ask(owner, `/setwebhook ${username} ${webhookUrl(failing)}`));
        expect(refused).to.include("was not changed").and.include("HTTP 500");
        const plain = textOf(await ask(owner, `/setwebhook ${username} http://example.com/hook`));
        expect(plain).to.include("was not changed").and.include("https");
        const { profile } = await agents(owner).getMyAgent({ agentUserId: agent.userId });
        expect(profile).to.deep.include({ deliveryMode: AgentDeliveryMode.WEBSOCKET, secretKeyPrefix: agent.secretKey.slice(0, 12) });
      });

      it("does nothing for agents the sender did not create, and explains its commands otherwise", async () => {
        const agent = await newAgent();
        const username = (await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile!.user!.username;
        const before = verifications(ok).length;
        expect(textOf(await ask(stranger, `/setwebhook ${username} ${webhookUrl(ok)}`))).to.include(`You have no agent @${username}`);
        expect(textOf(await ask(stranger, `/setwebhook nobody_here_at_all ${webhookUrl(ok)}`))).to.include("You have no agent");
        expect(verifications(ok).length).to.equal(before);
        expect((await agents(owner).getMyAgent({ agentUserId: agent.userId })).profile?.deliveryMode).to.equal(AgentDeliveryMode.WEBSOCKET);
        expect(textOf(await ask(stranger, "/setwebhook only_one_argument"))).to.match(/^Usage: \/setwebhook/);
        expect(textOf(await ask(stranger, "hello"))).to.include("/setwebhook <agent_username> <https_url>");
      });

      it("cannot be configured or deleted by anyone", async () => {
        await expectError(agents(owner).setAgentConfig({ agentUserId: systemAgentUserId, visibility: AgentVisibility.PRIVATE }), Errors.notAgentCreator);
        await expectError(agents(owner).regenerateAgentToken({ agentUserId: systemAgentUserId }), Errors.notAgentCreator);
      });
    });
  });
}

describe("the system agent across restarts", () => {
  it("is created once and keeps its id and username", async () => {
    let server = await startTestServer();
    try {
      const user = await signInWithCode(server);
      const before = await client(server, AgentService, "json", user.accessToken).getAgentInfo({ agentUserId: systemAgentUserId });
      server = await server.restart();
      const after = await client(server, AgentService, "json", user.accessToken).getAgentInfo({ agentUserId: systemAgentUserId });
      expect(after.agent?.user?.username).to.equal(systemAgentUsername);
      expect(after.agent?.createdAt).to.equal(before.agent?.createdAt);
      const featured = await client(server, AgentService, "json", user.accessToken).listFeaturedAgents({ limit: 50 });
      expect(featured.agents.filter((a) => a.isSystemAgent)).to.have.length(1);
      // Ordinary ids still start at 10001.
      expect(user.userId).to.equal(10001);
      await expectError(client(server, AgentService, "json", "nxa_" + "A".repeat(43)).getAgentInfo({ agentUserId: systemAgentUserId }), Code.Unauthenticated);
    } finally {
      await server.dispose();
    }
  });
});
