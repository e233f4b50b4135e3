import { EventEmitter } from "node:events";
import { expect } from "chai";
import type { ServiceBroker } from "moleculer";
import type { LiveEvent } from "../../shared/bus.js";
import type { PresenceRegistry } from "../../ports/presence/presence-registry.js";
import { LiveRouter } from "./live-router.js";

/** A broker that records the gateway calls it is asked for, in the order asked, and knows the nodes it was told of. */
class RecordingBroker {
  readonly calls: string[] = [];
  readonly localBus = new EventEmitter();
  readonly known = new Set<string>();
  readonly logger = { warn: () => {} };
  readonly registry = { nodes: { get: (id: string) => (this.known.has(id) ? { available: true } : undefined) } };

  async call(_action: string, params: LiveEvent, options: { nodeID: string }): Promise<null> {
    const users = "recipients" in params ? params.recipients.map(([userId]) => userId) : params.userIds;
    this.calls.push(`${options.nodeID}: ${(params.update as { note: string }).note} to ${users.join(",")}`);
    return null;
  }

  connect(nodeID: string): void {
    this.known.add(nodeID);
    this.localBus.emit("$node.connected", { node: { id: nodeID } });
  }
}

/** Presence whose lookups are answered when the test says, in any order. */
class HeldPresence {
  private readonly held: { userIds: readonly number[]; answer: (gateways: Map<number, string[]>) => void; fail: (err: Error) => void }[] = [];
  constructor(private readonly where: Record<number, string[]>) {}

  gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    return new Promise((answer, fail) => this.held.push({ userIds, answer, fail }));
  }

  /** Answers the lookup made `index`-th (0 the first) of those still held. */
  answer(index: number): void {
    const [lookup] = this.held.splice(index, 1);
    lookup.answer(new Map(lookup.userIds.map((userId) => [userId, this.where[userId] ?? []])));
  }

  fail(index: number): void {
    const [lookup] = this.held.splice(index, 1);
    lookup.fail(new Error("presence down"));
  }
}

const push = (note: string, ...userIds: number[]): LiveEvent => ({ update: { note } as never, userIds });
const sequenced = (note: string, ...userIds: number[]): LiveEvent => ({ update: { note } as never, recipients: userIds.map((userId) => [userId, 1]) });
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("LiveRouter", () => {
  let broker: RecordingBroker;
  let presence: HeldPresence;
  let router: LiveRouter;
  beforeEach(() => {
    broker = new RecordingBroker();
    broker.known.add("gw-a").add("gw-b");
    presence = new HeldPresence({ 1: ["gw-a"], 2: ["gw-b"], 3: ["gw-a", "gw-b"], 4: ["gw-new"] });
    router = new LiveRouter(broker as unknown as ServiceBroker, presence as unknown as PresenceRegistry);
  });

  it("issues the pushes in the order they were sent, whichever lookup answers first, each gateway only its recipients", async () => {
    const sent = [router.send(sequenced("start", 3)), router.send(sequenced("delta 1", 1, 2)), router.send(push("delta 2", 3))];
    presence.answer(2);
    presence.answer(1);
    await settle();
    expect(broker.calls).to.deep.equal([]);
    presence.answer(0);
    await Promise.all(sent);
    expect(broker.calls).to.deep.equal(["gw-a: start to 3", "gw-b: start to 3", "gw-a: delta 1 to 1", "gw-b: delta 1 to 2", "gw-a: delta 2 to 3", "gw-b: delta 2 to 3"]);
  });

  it("holds a gateway's pushes until it is discovered, in their order, without holding up the other gateways", async () => {
    const sent = [router.send(push("first", 4, 1)), router.send(push("second", 4)), router.send(push("third", 1))];
    for (let lookup = 0; lookup < 3; lookup++) presence.answer(0);
    await settle();
    expect(broker.calls).to.deep.equal(["gw-a: first to 1", "gw-a: third to 1"]);
    broker.connect("gw-new");
    await Promise.all(sent);
    expect(broker.calls).to.deep.equal(["gw-a: first to 1", "gw-a: third to 1", "gw-new: first to 4", "gw-new: second to 4"]);
  });

  it("gives up a push whose lookup failed, without failing its sender or holding up the pushes after it", async () => {
    const sent = [router.send(push("lost", 1)), router.send(push("kept", 2))];
    presence.fail(0);
    presence.answer(0);
    await Promise.all(sent);
    expect(broker.calls).to.deep.equal(["gw-b: kept to 2"]);
  });
});
