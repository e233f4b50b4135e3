// Agent event delivery, engine side. An agent's events are the entries of its own update stream.
// In WEBSOCKET mode its connections carry them: live, and after a reconnect from its delivered
// position (agentBacklog; the gateway moves the position as it writes frames). In WEBHOOK mode
// the entries of the kinds below are queued as the JSON of their Update in the same transaction
// that stores them, and the delivered position moves past every entry appended meanwhile (the
// webhook took them over), so a later switch to WEBSOCKET mode does not replay them. Other
// kinds, and stream deltas, do not go out by webhook.
import { fromBinary } from "@bufbuild/protobuf";
import type { AgentBacklog, WebhookTarget } from "../shared/agent-delivery.js";
import { UserInfoSchema } from "../shared/gen/api/v1/common_pb.js";
import { GroupInfoSchema } from "../shared/gen/api/v1/group_pb.js";
import { SnUpdateSchema, type SnUpdate, type UpdateJson } from "../shared/gen/api/v1/updates_pb.js";
import { toWire, type WireMessage } from "../shared/wire.js";
import { AccountType, AgentStatus, DeliveryMode, type AgentRecord, type Store, type WebhookHandoff } from "./store/store.js";
import { groupInfoView, userInfoView } from "./views.js";

const webhookSnKinds = new Set(["messageEnvelope", "contactAdded", "removedFromGroup", "groupDissolved"]);
const webhookEphemeralKinds = new Set(["cardAction"]);
const isKindOf = (kinds: Set<string>, wire: WireMessage) => Object.keys(wire).some((key) => kinds.has(key));

/** Users whose delivery route is cached. */
const cachedUsers = 100_000;
/** Entries per page of an agent's WebSocket catch-up. */
export const backlogPageSize = 100;

/** Where an agent's webhook deliveries go, or undefined when it is not an active WEBHOOK-mode agent. */
export function webhookTarget(agent: AgentRecord | undefined): WebhookTarget | undefined {
  if (!agent || agent.status !== AgentStatus.active || agent.deliveryMode !== DeliveryMode.webhook || !agent.webhookUrl) return undefined;
  return { url: agent.webhookUrl, secretKey: agent.secretKey };
}

/** Decides, for the inbox, which stream entries also go to a webhook queue. */
export class WebhookRouting {
  private readonly byWebhook = new Map<number, boolean>();
  /** Counts agent changes, so a lookup that raced one does not cache what it read. */
  private agentChanges = 0;

  constructor(private readonly store: Store) {}

  /**
   * Whether the user's events go out by webhook. An account's type never changes, so a person
   * costs one read per cache lifetime; an agent's answer is dropped when its record changes.
   */
  async sendsByWebhook(userId: number): Promise<boolean> {
    const cached = this.byWebhook.get(userId);
    if (cached !== undefined) return cached;
    const changes = this.agentChanges;
    const user = await this.store.users.getUser(userId);
    const byWebhook = user?.accountType === AccountType.agent && webhookTarget(await this.store.agents.getAgent(userId)) !== undefined;
    if (changes === this.agentChanges) {
      if (this.byWebhook.size >= cachedUsers) this.byWebhook.delete(this.byWebhook.keys().next().value!);
      this.byWebhook.set(userId, byWebhook);
    }
    return byWebhook;
  }

  /** Forgets what was cached about an agent (BusEvents.agentChanged). */
  forgetAgent(agentUserId: number): void {
    this.agentChanges += 1;
    this.byWebhook.delete(agentUserId);
  }

  /** What an append to a WEBHOOK-mode agent's stream queues: the Update JSON of each entry sent by webhook. */
  handoff(entries: readonly { sn: number; wire: WireMessage }[], related: WireMessage, now: number): WebhookHandoff {
    return {
      bodies: entries.flatMap(({ sn, wire }) => (isKindOf(webhookSnKinds, wire) ? [JSON.stringify({ ...related, snUpdate: { sn, ...wire } })] : [])),
      queuedAt: now,
    };
  }

  /** Whether an ephemeral entry (NonSnUpdate wire form) is of a kind sent by webhook. */
  sendsEphemeral(entry: WireMessage): boolean {
    return isKindOf(webhookEphemeralKinds, entry);
  }
}

/** The users and groups a live push of this entry carries along (see the producers of each kind). */
function referencedBy(entry: SnUpdate): { userIds: number[]; groupIds: number[] } {
  switch (entry.update.case) {
    case "messageEnvelope":
      return { userIds: entry.update.value.senderId ? [entry.update.value.senderId] : [], groupIds: [] };
    case "contactAdded":
      return { userIds: [entry.update.value.peerUserId], groupIds: [] };
    case "removedFromGroup":
    case "groupDissolved":
      return { userIds: [], groupIds: [entry.update.value.groupId] };
    default:
      return { userIds: [], groupIds: [] };
  }
}

/**
 * A page of an agent's stream for its WebSocket catch-up: the entries after `afterSn` (by default
 * its delivered position), with the users and groups they reference as they are now (the log
 * keeps only the entries themselves). Entries already pruned are simply not there; the agent sees
 * the sn jump.
 */
export async function agentBacklog(store: Store, userId: number, afterSn: number | undefined, limit: number): Promise<AgentBacklog> {
  const from = afterSn ?? (await store.webhookJobs.deliveredSn(userId));
  const rows = await store.updates.readUpdates(userId, from, Math.min(Math.max(limit, 1), backlogPageSize));
  const entries = rows.map((row) => fromBinary(SnUpdateSchema, row.payload));
  const refs = entries.map(referencedBy);
  const users = new Map<number, WireMessage>();
  for (const user of await store.users.getUsers([...new Set(refs.flatMap((ref) => ref.userIds))])) {
    users.set(user.userId, toWire(UserInfoSchema, userInfoView(user)));
  }
  const groups = new Map<number, WireMessage>();
  for (const groupId of new Set(refs.flatMap((ref) => ref.groupIds))) {
    const group = await store.groups.getGroup(groupId);
    if (group) groups.set(groupId, toWire(GroupInfoSchema, groupInfoView(group)));
  }
  const updates = entries.map((entry, index) => {
    const related = refs[index].userIds.map((id) => users.get(id)).filter((user) => user !== undefined);
    const relatedGroups = refs[index].groupIds.map((id) => groups.get(id)).filter((group) => group !== undefined);
    // Empty lists are omitted, as proto3 JSON and the live pushes do.
    return {
      ...(related.length ? { users: related } : {}),
      ...(relatedGroups.length ? { groups: relatedGroups } : {}),
      snUpdate: toWire(SnUpdateSchema, entry),
    } as UpdateJson;
  });
  return { afterSn: from, updates };
}
