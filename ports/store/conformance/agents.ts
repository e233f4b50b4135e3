// What the storage port promises of its agents, as every adapter must keep it
// (conformance/store-conformance.ts runs it on each).
import { expect } from "chai";
import { AccountType, AgentChangeRefused, AgentStatus, AgentVisibility, DeliveryMode, type FanOutRecord, type Store } from "../store.js";
import type { StoreSuite, StoreUnderTest } from "./suite.js";

export function describeAgents(t: StoreSuite): void {
  describe("agents", () => {
    let store: Store;
    let subject: StoreUnderTest;
    beforeEach(() => {
      store = t.store;
      subject = t.subject;
    });
    const { newUser } = t;

    type NewAgent = Parameters<Store["agents"]["createAgent"]>[1];
    const record = (creatorId: number, overrides: Partial<NewAgent> = {}): NewAgent => ({
      creatorId,
      status: AgentStatus.active,
      visibility: AgentVisibility.private,
      isSystem: false,
      tokenHash: `token-${creatorId}-${Math.random()}`,
      tokenPrefix: "nxa_prefix",
      secretKey: "nxk_secret",
      deliveryMode: DeliveryMode.websocket,
      webhookUrl: "",
      ipWhitelist: [],
      commands: [],
      miniApp: { enabled: false, url: "", allowedOrigins: [], permissions: 0 },
      createdAt: 1000,
      updatedAt: 1000,
      ...overrides,
    });
    const account = (username: string, userId?: number) => ({ accountType: AccountType.agent, username, nickname: "Bot", signature: "helps", createdAt: 1000, userId });

    it("creates the account and the agent together, a reserved id leaving the id sequence alone", async () => {
      const system = await store.agents.createAgent(account("system_bot", 10000), record(0, { isSystem: true, visibility: AgentVisibility.public }));
      expect(system.user).to.deep.include({ userId: 10000, accountType: AccountType.agent, username: "system_bot", usernameCustom: true, nickname: "Bot", signature: "helps" });
      expect(system.agent).to.deep.include({ agentUserId: 10000, creatorId: 0, isSystem: true });
      expect((await store.agents.getAgent(10000))?.isSystem).to.equal(true);
      const creator = await newUser("a@x.io");
      expect(creator.userId).to.equal(10001);
      const bot = await store.agents.createAgent(account("plain_bot"), record(creator.userId, { tokenHash: "hash-1" }));
      expect(bot.user.userId).to.equal(10002);
      expect((await store.agents.findByTokenHash("hash-1"))?.agentUserId).to.equal(10002);
      expect(await store.agents.findByTokenHash("hash-2")).to.equal(undefined);
      expect((await store.agents.listByCreator(creator.userId)).map((a) => a.agentUserId)).to.deep.equal([10002]);
      let refused = 0;
      await store.agents.createAgent(account("other_bot", 10000), record(0)).catch(() => refused++);
      await store.agents.createAgent(account("plain_bot"), record(creator.userId)).catch(() => refused++);
      expect(refused).to.equal(2);
    });

    it("replaces only the fields given and reads them back whole", async () => {
      const { agent } = await store.agents.createAgent(account("change_bot"), record(7, { commands: [{ command: "go", description: "Go" }] }));
      const miniApp = { enabled: true, url: "https://app.example.com/", allowedOrigins: ["https://app.example.com"], permissions: 5 };
      const changed = await store.agents.updateAgent(agent.agentUserId, { ipWhitelist: ["10.0.0.0/8", "::1"], miniApp, webhookUrl: "https://h.example/", updatedAt: 2000 });
      expect(changed).to.deep.equal({ ...agent, ipWhitelist: ["10.0.0.0/8", "::1"], miniApp, webhookUrl: "https://h.example/", updatedAt: 2000 });
      expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(changed);
      const deleted = await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, tokenHash: "next", secretKey: "nxk_next" });
      expect(deleted).to.deep.include({ status: AgentStatus.deleted, tokenHash: "next", secretKey: "nxk_next", commands: [{ command: "go", description: "Go" }], miniApp });
      expect(await store.agents.findByTokenHash(agent.tokenHash)).to.equal(undefined);
    });

    describe("conditional changes", () => {
      let nextFanOutId = 2n ** 61n;
      /** The agent's deletion event, as the engine records it with the change. */
      const deletionEvent = (agentUserId: number): FanOutRecord => ({
        fanOutId: nextFanOutId++,
        scope: `user:${agentUserId}`,
        recipients: [7],
        entry: new Uint8Array([9, 9]),
        related: "{}",
        createdAt: 1000,
      });
      const refusal = async (write: Promise<unknown>): Promise<AgentChangeRefused> => {
        const outcome = await write.then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(outcome).to.be.instanceOf(AgentChangeRefused);
        return outcome as AgentChangeRefused;
      };
      const pendingOf = async (agentUserId: number) => (await store.outbox.pending(100, `user:${agentUserId}`)).map((f) => f.fanOutId);

      it("moves updatedAt forward on every write, also within one millisecond and with a clock that stands still", async () => {
        const { agent } = await store.agents.createAgent(account("version_bot"), record(7));
        const first = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_1", updatedAt: 1000 });
        const second = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_2", updatedAt: 1000 });
        const third = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_3" });
        expect([first.updatedAt, second.updatedAt, third.updatedAt]).to.deep.equal([1001, 1002, 1003]);
        const later = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_4", updatedAt: 5000 });
        expect(later.updatedAt).to.equal(5000);
        expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(later);
      });

      it("applies a change conditioned on the version and status it read, with its events", async () => {
        const { agent } = await store.agents.createAgent(account("cas_bot"), record(7));
        const event = deletionEvent(agent.agentUserId);
        const seen: number[] = [];
        const deleted = await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, updatedAt: 2000 }, (written) => (seen.push(written.updatedAt), [event]), {
          ifUpdatedAt: agent.updatedAt,
          ifStatus: AgentStatus.active,
        });
        expect(deleted).to.deep.include({ status: AgentStatus.deleted, updatedAt: 2000 });
        expect(seen).to.deep.equal([2000]);
        expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(deleted);
        expect(await pendingOf(agent.agentUserId)).to.deep.equal([event.fanOutId]);
      });

      it("refuses a change conditioned on a stale updatedAt: nothing written, the record as it stands answered", async () => {
        const { agent } = await store.agents.createAgent(account("stale_bot"), record(7));
        const other = subject.another ? await subject.another() : store;
        // Another node changed the record after this one read it.
        const meanwhile = await other.agents.updateAgent(agent.agentUserId, { visibility: AgentVisibility.public, updatedAt: 1500 });
        const refused = await refusal(store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_lost", updatedAt: 1600 }, undefined, { ifUpdatedAt: agent.updatedAt }));
        expect(refused.current).to.deep.equal(meanwhile);
        expect(await store.agents.getAgent(agent.agentUserId)).to.deep.equal(meanwhile);
        // Re-read, the same change applies.
        const applied = await store.agents.updateAgent(agent.agentUserId, { secretKey: "nxk_kept", updatedAt: 1600 }, undefined, { ifUpdatedAt: refused.current!.updatedAt });
        expect(applied).to.deep.equal({ ...meanwhile, secretKey: "nxk_kept", updatedAt: 1600 });
      });

      it("refuses a change conditioned on a status the record left, and records none of its events", async () => {
        const { agent } = await store.agents.createAgent(account("gone_twice_bot"), record(7));
        const first = deletionEvent(agent.agentUserId);
        await store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted }, () => [first], { ifStatus: AgentStatus.active });
        const second = deletionEvent(agent.agentUserId);
        let asked = 0;
        const refused = await refusal(
          store.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted, tokenHash: "after-refusal" }, () => (asked++, [second]), { ifStatus: AgentStatus.active }),
        );
        expect(refused.current?.status).to.equal(AgentStatus.deleted);
        expect(await pendingOf(agent.agentUserId)).to.deep.equal([first.fanOutId]);
        expect((await store.agents.getAgent(agent.agentUserId))?.tokenHash).to.equal(agent.tokenHash);
        expect(await store.agents.findByTokenHash("after-refusal")).to.equal(undefined);
        // A refusal before any write never asks for the events; one found at the write discards them.
        expect(asked).to.be.at.most(1);
      });

      it("of two conditional deletions racing from two handles, exactly one applies and records its event", async () => {
        const { agent } = await store.agents.createAgent(account("race_bot"), record(7));
        const other = subject.another ? await subject.another() : store;
        const events = [deletionEvent(agent.agentUserId), deletionEvent(agent.agentUserId)];
        const outcomes = await Promise.allSettled(
          [store, other].map((handle, i) => handle.agents.updateAgent(agent.agentUserId, { status: AgentStatus.deleted }, () => [events[i]], { ifStatus: AgentStatus.active })),
        );
        const applied = outcomes.flatMap((outcome, i) => (outcome.status === "fulfilled" ? [i] : []));
        expect(applied).to.have.length(1);
        const rejected = outcomes.find((outcome) => outcome.status === "rejected") as PromiseRejectedResult;
        expect(rejected.reason).to.be.instanceOf(AgentChangeRefused);
        expect(await pendingOf(agent.agentUserId)).to.deep.equal([events[applied[0]].fanOutId]);
      });

      it("keeps both of two unconditioned changes of different fields racing from two handles", async () => {
        const { agent } = await store.agents.createAgent(account("merge_bot"), record(7));
        const other = subject.another ? await subject.another() : store;
        await Promise.all([
          store.agents.updateAgent(agent.agentUserId, { commands: [{ command: "a", description: "A" }] }),
          other.agents.updateAgent(agent.agentUserId, { ipWhitelist: ["10.0.0.1"] }),
        ]);
        expect(await store.agents.getAgent(agent.agentUserId)).to.deep.include({ commands: [{ command: "a", description: "A" }], ipWhitelist: ["10.0.0.1"], updatedAt: 1002 });
      });
    });

    it("samples only public, active agents, at most the limit", async () => {
      const shown = [];
      for (let i = 0; i < 3; i++) shown.push((await store.agents.createAgent(account(`shown_${i}`), record(7, { visibility: AgentVisibility.public }))).agent.agentUserId);
      await store.agents.createAgent(account("private_bot"), record(7));
      await store.agents.createAgent(account("gone_bot"), record(7, { visibility: AgentVisibility.public, status: AgentStatus.deleted }));
      expect((await store.agents.sampleFeatured(10)).map((a) => a.agentUserId).sort()).to.deep.equal(shown.sort());
      expect(await store.agents.sampleFeatured(2)).to.have.length(2);
    });

    it("finds public, active agents by nickname, username or description, by id, following their changes", async () => {
      const listed = { visibility: AgentVisibility.public };
      const search = async (text: string, limit = 10) => (await store.users.searchAgents(text, limit)).map((u) => u.userId);
      const forecaster = (await store.agents.createAgent({ ...account("alpha_bot"), nickname: "Weather Helper", signature: "Daily Forecasts" }, record(7, listed))).agent.agentUserId;
      const named = (await store.agents.createAgent(account("beta_weather"), record(7, listed))).agent.agentUserId;
      await store.agents.createAgent(account("weather_private"), record(7));
      await store.agents.createAgent(account("weather_gone"), record(7, { ...listed, status: AgentStatus.deleted }));
      await newUser("weather@x.io");
      expect(await search("WEATHER")).to.deep.equal([forecaster, named]);
      expect(await search("weather", 1)).to.deep.equal([forecaster]);
      expect(await search("forecast")).to.deep.equal([forecaster]);
      await store.agents.updateAgent(named, { visibility: AgentVisibility.private });
      await store.users.updateProfile(forecaster, { nickname: "Rain", signature: "" });
      expect(await search("weather")).to.deep.equal([]);
      expect(await search("rain")).to.deep.equal([forecaster]);
      await store.agents.updateAgent(named, { visibility: AgentVisibility.public });
      expect(await search("weather")).to.deep.equal([named]);
    });
  });
}
