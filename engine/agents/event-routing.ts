// Agent event delivery, engine side. An agent's events are the entries of its own update stream.
// In WEBSOCKET mode its connections carry them: live, and after a reconnect from its delivered
// position (agentBacklog; the gateway moves the position as it writes frames). In WEBHOOK mode
// the entries of the kinds below are queued as the JSON of their Update in the same transaction
// that stores them, and the delivered position moves past every entry appended meanwhile (the
// webhook took them over). Other kinds, and stream deltas, do not go out by webhook.
//
// A mode switch takes effect in the agent's inbox mailbox, the one place its appends run, so no
// append is routed by a mode whose switch was not yet carried out (WebhookRouting.settle):
// - into WEBHOOK mode, the entries after the delivered position (what its sockets never had) are
//   queued as if they had just arrived, and the position moves to the latest entry (what a live
//   socket was sent and the agent confirmed was recorded first: gateway/agent-feed.ts);
// - out of it, the queue is dropped and the position moves back to just before the oldest entry
//   still queued, so the socket catch-up replays what the webhook had not delivered.
import type { AgentBacklog, FeedRelease, WebhookTarget } from "../../shared/agent-delivery.js";
import { UserInfoSchema } from "../../shared/gen/shared/v1/common_pb.js";
import { GroupInfoSchema } from "../../shared/gen/shared/v1/group_pb.js";
import { SnUpdateSchema, type SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { type UpdateJson } from "../../shared/gen/api/v1/updates_pb.js";
import { toWire, type WireMessage } from "../../shared/wire.js";
import type { Clock } from "../../shared/clock.js";
import { AccountType, AgentStatus, DeliveryMode, type AgentRecord, type Store } from "../../ports/store/store.js";
import { snUpdateOf } from "../delivery/stream-entry.js";
import { groupInfoView, userInfoView } from "../views.js";

const webhookSnKinds = new Set(["messageEnvelope", "contactAdded", "removedFromGroup", "groupDissolved"]);
const isKindOf = (kinds: Set<string>, wire: WireMessage) => Object.keys(wire).some((key) => kinds.has(key));

/** Users whose delivery route is cached. */
const cachedUsers = 100_000;
/** Entries per page of an agent's WebSocket catch-up. */
const backlogPageSize = 100;

/** Where an agent's webhook deliveries go, or undefined when it is not an active WEBHOOK-mode agent. */
export function webhookTarget(agent: AgentRecord | undefined): WebhookTarget | undefined {
  if (!agent || agent.status !== AgentStatus.active || agent.deliveryMode !== DeliveryMode.webhook || !agent.webhookUrl) return undefined;
  return { url: agent.webhookUrl, secretKey: agent.secretKey };
}

/**
 * Decides, for the inbox, which stream entries also go to a webhook queue, and carries out mode
 * switches. Every method that reads the agent record runs in the user's inbox mailbox.
 */
export class WebhookRouting {
  private readonly byWebhook = new Map<number, boolean>();
  /** Counts agent changes, so a lookup that raced one does not cache what it read. */
  private agentChanges = 0;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    /** Jobs were queued for the agent outside an append (the dispatcher is woken). */
    private readonly queued: (agentUserId: number) => void,
  ) {}

  /**
   * Which of these users' events go out by webhook. An account's type never changes, so a person
   * costs one read per cache lifetime (the users not cached are read together). An agent's
   * answer is dropped when its record changes, and every fresh read settles its mode before the
   * answer is used: a switch written but not yet announced to this inbox is carried out by the
   * first append that sees it.
   */
  async webhookUsers(userIds: readonly number[], latestSn: (userId: number) => Promise<number>): Promise<Set<number>> {
    const byWebhook = new Set<number>();
    const unknown: number[] = [];
    for (const userId of userIds) {
      const cached = this.byWebhook.get(userId);
      if (cached === undefined) unknown.push(userId);
      else if (cached) byWebhook.add(userId);
    }
    if (unknown.length === 0) return byWebhook;
    const changes = this.agentChanges;
    const agents = new Set((await this.store.users.getUsers(unknown)).filter((user) => user.accountType === AccountType.agent).map((user) => user.userId));
    for (const userId of unknown) {
      const sends = agents.has(userId) && (await this.settle(userId, () => latestSn(userId))).toWebhook;
      this.remember(userId, sends, changes);
      if (sends) byWebhook.add(userId);
    }
    return byWebhook;
  }

  /**
   * The agent's mode or URL changed (or a job of it met a mode other than WEBHOOK): settles it
   * now, and answers what the agent's sockets are to be told.
   */
  async modeChanged(agentUserId: number, latestSn: () => Promise<number>): Promise<FeedRelease> {
    this.forgetAgent(agentUserId);
    const changes = this.agentChanges;
    const settled = await this.settle(agentUserId, latestSn);
    this.remember(agentUserId, settled.toWebhook, changes);
    return settled;
  }

  /** Forgets what was cached about an agent (BusEvents.agentChanged). */
  forgetAgent(agentUserId: number): void {
    this.agentChanges += 1;
    this.byWebhook.delete(agentUserId);
  }

  private remember(userId: number, byWebhook: boolean, changesBefore: number): void {
    if (changesBefore !== this.agentChanges) return;
    if (this.byWebhook.size >= cachedUsers) this.byWebhook.delete(this.byWebhook.keys().next().value!);
    this.byWebhook.set(userId, byWebhook);
  }

  /**
   * Makes the agent's queue and delivered position match its current mode; answers whether it is
   * in WEBHOOK mode (and through which sn the webhook took its entries). Idempotent: in WEBHOOK
   * mode the position is already at the latest entry, out of it the queue is empty, and then there
   * is nothing to do.
   */
  private async settle(agentUserId: number, latestSn: () => Promise<number>): Promise<FeedRelease> {
    if (webhookTarget(await this.store.agents.getAgent(agentUserId)) !== undefined) {
      const through = await latestSn();
      const queued = await handOverBacklog(this.store, agentUserId, through, this.clock.now());
      if (queued > 0) this.queued(agentUserId);
      return { toWebhook: true, through };
    }
    await takeBackQueue(this.store, agentUserId);
    return { toWebhook: false };
  }

  /** What an append to a WEBHOOK-mode agent's stream queues for an entry: its Update's JSON, or nothing for a kind not sent by webhook. */
  webhookBody(sn: number, entry: WireMessage, related: WireMessage): string | undefined {
    return isKindOf(webhookSnKinds, entry) ? JSON.stringify({ ...related, snUpdate: { sn, ...entry } }) : undefined;
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
 * A page of an agent's stream for its WebSocket connection: none for an agent in WEBHOOK mode
 * (the webhook carries its entries; the page says so), its backlog otherwise.
 */
export async function agentFeedPage(store: Store, userId: number, afterSn: number | undefined, limit: number): Promise<AgentBacklog> {
  if (webhookTarget(await store.agents.getAgent(userId)) !== undefined) {
    return { afterSn: await store.webhookJobs.deliveredSn(userId), updates: [], hasMore: false, byWebhook: true };
  }
  return agentBacklog(store, userId, afterSn, limit);
}

/**
 * A page of an agent's stream for its WebSocket catch-up: the entries after `afterSn` (by default
 * its delivered position), with the users and groups they reference as they are now (the log
 * keeps only the entries themselves). Entries already pruned are simply not there; the agent sees
 * the sn jump.
 */
export async function agentBacklog(store: Store, userId: number, afterSn: number | undefined, limit: number): Promise<AgentBacklog> {
  const from = afterSn ?? (await store.webhookJobs.deliveredSn(userId));
  const pageSize = Math.min(Math.max(limit, 1), backlogPageSize);
  // One row more than the page tells whether another page follows, whatever size the caller asked for.
  const read = await store.updates.readUpdates(userId, from, pageSize + 1);
  const rows = read.slice(0, pageSize);
  const entries = rows.map(snUpdateOf);
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
  return { afterSn: from, updates, hasMore: read.length > rows.length };
}

/**
 * Queues, as webhook jobs, the entries of the webhook kinds after the agent's delivered position
 * (in the form of live ones, with users and groups as they are now) and moves the position to
 * `latestSn`; each page is one write, so a crash midway neither repeats nor skips a page.
 * Answers how many jobs were queued.
 */
async function handOverBacklog(store: Store, agentUserId: number, latestSn: number, now: number): Promise<number> {
  let from = await store.webhookJobs.deliveredSn(agentUserId);
  if (from >= latestSn) return 0;
  let queued = 0;
  for (;;) {
    const page = await agentBacklog(store, agentUserId, from, backlogPageSize);
    const last = page.updates.at(-1)?.snUpdate?.sn ?? from;
    const end = !page.hasMore;
    // Past the last page the position goes to the latest sn even when pruning left nothing to read.
    const through = end ? Math.max(last, latestSn) : last;
    const bodies = page.updates.filter((update) => isKindOf(webhookSnKinds, update.snUpdate as WireMessage)).map((update) => JSON.stringify(update));
    await store.webhookJobs.handOver(agentUserId, bodies, now, through);
    queued += bodies.length;
    if (end) return queued;
    from = through;
  }
}

/** The sn an Update body carries, or undefined for an ephemeral one (a card action). */
function sequencedSn(body: string): number | undefined {
  return (JSON.parse(body) as { snUpdate?: { sn?: number } }).snUpdate?.sn;
}

/**
 * Drops the agent's webhook queue and moves its delivered position back to just before the
 * oldest sequenced entry it held, which the webhook had not delivered (the head blocks the rest),
 * so the socket catch-up replays it and everything after. The position moves first: a crash
 * between the two leaves the queue for the dispatcher to hand back again, never a skipped entry.
 */
async function takeBackQueue(store: Store, agentUserId: number): Promise<void> {
  const jobs = await store.webhookJobs.pending(agentUserId);
  if (jobs.length === 0) return;
  let oldest: number | undefined;
  for (const job of jobs) {
    const sn = sequencedSn(job.body);
    if (sn !== undefined && (oldest === undefined || sn < oldest)) oldest = sn;
  }
  if (oldest !== undefined) await store.webhookJobs.rewindDelivered(agentUserId, oldest - 1);
  await store.webhookJobs.clearAgent(agentUserId);
}
