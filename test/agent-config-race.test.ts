// Changes of one agent's record made at once on two engine nodes (or by another node's write while a
// webhook test request is in flight): the store's condition decides, not a lock inside one process.
// Of two deletions exactly one writes and is announced; two configuration changes both apply, one
// after the other, each whole, and a change made meanwhile to a field the other does not name is
// kept; a change whose agent was deleted meanwhile answers AGENT_DELETED, and one whose record keeps
// changing under every try answers UNAVAILABLE; neither writes anything.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import { expect } from "chai";
import {
  AgentService,
  DeleteMyAgentRequestSchema,
  GetMyAgentRequestSchema,
  GetMyAgentResponseSchema,
  SetAgentConfigRequestSchema,
  SetAgentConfigResponseSchema,
  SetAgentMiniAppRequestSchema,
} from "../shared/gen/api/v1/agent_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { AgentDeliveryMode, AgentVisibility, type AgentProfile } from "../shared/gen/shared/v1/agent_pb.js";
import type { Caller, RpcParams } from "../shared/caller.js";
import { Errors, parleyErrorParts } from "../shared/errors.js";
import { fromWire, toWire } from "../shared/wire.js";
import { engineNodes } from "../engine/shard-owners.js";
import { AgentStatus, DeliveryMode, type Store } from "../ports/store/store.js";
import type { Parley } from "../server.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, startNodes, startTestServer, testConfig, type TestServer } from "./support/harness.js";
import { startHttpsReceiver, type HttpsReceiver } from "./support/https-receiver.js";
import { eventually } from "./support/messaging.js";
import { createAgent } from "./support/social.js";

describe("agent changes made at once on two engine nodes", () => {
  let nodes: Record<"engineA" | "engineB" | "edge", Parley>;
  let dataDir: string;
  let codesFile: string;
  let store: Store;
  const engines = ["agentrace-engineA", "agentrace-engineB"] as const;

  before(async function () {
    this.timeout(60_000);
    dataDir = mkdtempSync(join(tmpdir(), "parley-agentrace-"));
    ({ nodes, codesFile } = await startNodes(dataDir, "agentrace", { engineA: ["engine"], engineB: ["engine", "webhooks"], edge: ["api", "gateway"] }));
    await eventually(() => engineNodes(nodes.edge.broker).length === 2, "the edge seeing both engines", 30_000);
    store = await openServerStore({ config: await testConfig(dataDir), dataDir });
  });

  after(async () => {
    await nodes?.edge.stop();
    await nodes?.engineA.stop();
    await nodes?.engineB.stop();
    await store?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const server = () => ({ url: nodes.edge.url, codesFile }) as TestServer;
  const callerOf = (user: SignedIn): Caller => ({ kind: "user", userId: user.userId, deviceId: user.deviceId });

  /** An agents action run on the named engine node, as the API tier would call it. */
  async function onEngine<Req extends DescMessage>(engine: string, action: string, user: SignedIn, schema: Req, request: MessageInitShape<Req>): Promise<unknown> {
    return nodes.edge.broker.call(`agents.${action}`, { caller: callerOf(user), request: toWire(schema, request) } satisfies RpcParams, { nodeID: engine });
  }
  const decoded = <Res extends DescMessage>(schema: Res, wire: unknown): MessageShape<Res> => fromWire(schema, wire as Parameters<typeof fromWire>[1]);

  it("DeleteMyAgent on both engines at once: exactly one deletes, the other answers AGENT_NOT_FOUND, contacts hear of it once", async () => {
    const owner = await signInWithCode(server(), "json");
    // Several agents, so that a race the store did not decide would show in at least one of them.
    for (let round = 0; round < 5; round++) {
      const agent = await createAgent(server(), owner);
      const outcomes = await Promise.allSettled(engines.map((engine) => onEngine(engine, "deleteMyAgent", owner, DeleteMyAgentRequestSchema, { agentUserId: agent.userId })));
      expect(outcomes.filter((o) => o.status === "fulfilled"), `round ${round}`).to.have.length(1);
      const refused = outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult;
      expect(parleyErrorParts(refused.reason)?.entry.errorName).to.equal(Errors.agentNotFound.errorName);
      expect((await store.agents.getAgent(agent.userId))?.status).to.equal(AgentStatus.deleted);
      const told = async () =>
        (await client(server(), SyncService, "json", owner.accessToken).getDifference({ sn: 0 })).updates.filter(
          (u) => u.update.case === "agentStatusChanged" && u.update.value.agentUserId === agent.userId,
        );
      expect(await told(), `round ${round}`).to.have.length(1);
    }
  });

  it("SetAgentConfig on both engines at once: both apply, one after the other, and the record is the later one whole", async () => {
    const owner = await signInWithCode(server(), "json");
    for (let round = 0; round < 5; round++) {
      const agent = await createAgent(server(), owner);
      const changes = [
        { agentUserId: agent.userId, visibility: AgentVisibility.PUBLIC, ipWhitelist: ["10.0.0.1"], commands: { items: [{ command: "a", description: "A" }] } },
        { agentUserId: agent.userId, visibility: AgentVisibility.PRIVATE, ipWhitelist: ["10.0.0.2", "10.0.0.3"], commands: { items: [{ command: "b", description: "B" }] } },
      ];
      const answers = await Promise.all(
        engines.map(async (engine, i) => decoded(SetAgentConfigResponseSchema, await onEngine(engine, "setAgentConfig", owner, SetAgentConfigRequestSchema, changes[i]))),
      );
      const profiles = answers.map((answer) => answer.profile!);
      // Every write moves updatedAt on, so the two answers tell which came last.
      expect(profiles[0].updatedAt, `round ${round}`).to.not.equal(profiles[1].updatedAt);
      const later = profiles[0].updatedAt > profiles[1].updatedAt ? 0 : 1;
      const stored = decoded(GetMyAgentResponseSchema, await onEngine(engines[round % 2], "getMyAgent", owner, GetMyAgentRequestSchema, { agentUserId: agent.userId })).profile!;
      expect(configOf(stored), `round ${round}`).to.deep.equal(configOf(profiles[later]));
      expect(stored.secretKeyPrefix).to.equal(answers[later].secretKey.slice(0, stored.secretKeyPrefix.length));
    }
  });

  it("keeps a Mini App set on one engine while the other changes the configuration", async () => {
    const owner = await signInWithCode(server(), "json");
    for (let round = 0; round < 5; round++) {
      const agent = await createAgent(server(), owner);
      const miniApp = { agentUserId: agent.userId, enabled: true, url: "https://app.example.com/", allowedOrigins: ["https://app.example.com"], permissions: 1 };
      await Promise.all([
        onEngine(engines[0], "setAgentMiniApp", owner, SetAgentMiniAppRequestSchema, miniApp),
        onEngine(engines[1], "setAgentConfig", owner, SetAgentConfigRequestSchema, { agentUserId: agent.userId, ipWhitelist: ["10.0.0.9"], commands: { items: [{ command: "go", description: "Go" }] } }),
      ]);
      const stored = (await store.agents.getAgent(agent.userId))!;
      expect(stored.miniApp, `round ${round}`).to.deep.equal({ enabled: true, url: miniApp.url, allowedOrigins: miniApp.allowedOrigins, permissions: 1 });
      expect(stored).to.deep.include({ ipWhitelist: ["10.0.0.9"], commands: [{ command: "go", description: "Go" }] });
    }
  });
});

/** The fields SetAgentConfig sets, and the version. */
const configOf = (profile: AgentProfile) => ({
  visibility: profile.visibility,
  ipWhitelist: profile.ipWhitelist,
  commands: profile.commands.map(({ command, description }) => ({ command, description })),
  secretKeyPrefix: profile.secretKeyPrefix,
  updatedAt: profile.updatedAt,
});

describe("a webhook configuration while another node changes the agent", () => {
  let server: TestServer;
  let other: Store;
  let receiver: HttpsReceiver;
  /** What the other node does while the test request is in flight; the request then succeeds. */
  let meanwhile: () => Promise<unknown> = async () => undefined;

  before(async () => {
    server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" } });
    other = await openServerStore(server);
    receiver = await startHttpsReceiver(async () => {
      await meanwhile();
      return 200;
    });
  });
  after(async () => {
    await receiver?.close();
    await other?.close();
    await server?.dispose();
  });

  it("is applied over the other node's change, keeping it, without a second test request", async () => {
    const owner = await signInWithCode(server, "json");
    const agent = await createAgent(server, owner);
    const miniApp = { enabled: true, url: "https://app.example.com/", allowedOrigins: [], permissions: 0 };
    let otherWrite: number | undefined;
    meanwhile = async () => {
      otherWrite ??= (await other.agents.updateAgent(agent.userId, { miniApp })).updatedAt;
    };
    const before = receiver.received.length;
    const url = `${receiver.url}/hooks/${agent.userId}`;
    const { secretKey, profile } = await client(server, AgentService, "json", owner.accessToken).setAgentConfig({ agentUserId: agent.userId, deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: url });
    expect(receiver.received.length - before).to.equal(1);
    const stored = (await other.agents.getAgent(agent.userId))!;
    expect(stored).to.deep.include({ miniApp, webhookUrl: url, secretKey });
    expect(stored.updatedAt).to.be.above(otherWrite!);
    expect(Number(profile!.updatedAt)).to.equal(stored.updatedAt);
    expect(profile!.miniAppEnabled).to.equal(true);
  });

  it("answers UNAVAILABLE, writing nothing, when the record keeps changing under every try", async () => {
    const owner = await signInWithCode(server, "json");
    const agent = await createAgent(server, owner);
    const hook = (n: number) => `${receiver.url}/hooks/${agent.userId}/${n}`;
    const start = await other.agents.updateAgent(agent.userId, { deliveryMode: DeliveryMode.webhook, webhookUrl: hook(0) });
    // Each test request meets a record whose URL another node has just changed, so each try re-reads a new URL to test.
    let moved = 0;
    meanwhile = async () => other.agents.updateAgent(agent.userId, { webhookUrl: hook(++moved) });
    const before = receiver.received.length;
    const detail = await expectError(client(server, AgentService, "json", agent.token).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK }), Errors.unavailable);
    expect(detail.metadata).to.deep.include({ reason: "agent_changed_concurrently", attempts: "4" });
    expect(receiver.received.slice(before).map((request) => request.path)).to.deep.equal([0, 1, 2, 3].map((n) => `/hooks/${agent.userId}/${n}`));
    // Only the other node's writes landed: the key is the one from before.
    expect(await other.agents.getAgent(agent.userId)).to.deep.include({ webhookUrl: hook(4), secretKey: start.secretKey });
  });

  it("answers AGENT_DELETED when the agent was deleted meanwhile, and writes nothing", async () => {
    const owner = await signInWithCode(server, "json");
    const agent = await createAgent(server, owner);
    meanwhile = async () => {
      if ((await other.agents.getAgent(agent.userId))?.status === AgentStatus.active) await other.agents.updateAgent(agent.userId, { status: AgentStatus.deleted });
    };
    await expectError(
      client(server, AgentService, "json", agent.token).updateAgentSelfConfig({ deliveryMode: AgentDeliveryMode.WEBHOOK, webhookUrl: `${receiver.url}/hooks/${agent.userId}` }),
      Errors.agentNotActive,
    );
    expect(await other.agents.getAgent(agent.userId)).to.deep.include({ status: AgentStatus.deleted, webhookUrl: "", deliveryMode: DeliveryMode.websocket });
  });
});
