// Who takes part in a conversation, and what a user may do in it. A PRIVATE conversation's two
// users are in its id; a GROUP conversation's participants are the group's current members.
//
// Two ways to answer. `requireParticipant` reads the store (services that check a conversation
// now and then). The conversation actor, which checks on every message and every stream delta,
// keeps what its checks need in memory instead (ConversationChecks, AccountFacts), loaded once and
// dropped when the services that change it say so (`tellConversationActors`, called before they
// answer their own caller): so a block, a removal or a new nickname is seen by the very next
// message, and a message reads none of it.
import type { Context } from "moleculer";
import { Errors, ParleyError } from "../shared/errors.js";
import { callEngine, type EngineActions, type ForgetParams } from "./engine-actions.js";
import { isGroupConversationId, privateParticipants } from "../shared/ids.js";
import { AccountType, AgentStatus, ConversationKind, GroupStatus, type ConversationRecord, type GroupRecord, type Store, type UserRecord } from "../ports/store/store.js";

export interface ConversationAccess {
  conversation: ConversationRecord;
  participants: number[];
  /** PRIVATE: the other user; GROUP: the group id. */
  peerId: number;
  group?: GroupRecord;
}

/**
 * The conversation and its participants. NOT_FOUND when it does not exist, FAILED_PRECONDITION
 * for a dissolved group, PERMISSION_DENIED for anyone who does not take part.
 */
export async function requireParticipant(store: Store, conversationId: bigint, userId: number): Promise<ConversationAccess> {
  if (isGroupConversationId(conversationId)) {
    const group = await store.groups.getGroup(Number(conversationId));
    if (!group) throw new ParleyError(Errors.conversationNotFound);
    if (group.status === GroupStatus.dissolved) throw new ParleyError(Errors.groupDissolved);
    const members = (await store.groups.listMembers(group.groupId)).map((m) => m.userId);
    if (!members.includes(userId)) throw new ParleyError(Errors.notMember);
    const conversation = (await store.conversations.getConversation(conversationId)) ?? groupConversation(group);
    return { conversation, participants: members, peerId: group.groupId, group };
  }
  const conversation = await store.conversations.getConversation(conversationId);
  const pair = privateParticipants(conversationId);
  if (!conversation || !pair) throw new ParleyError(Errors.conversationNotFound);
  if (!pair.includes(userId)) throw new ParleyError(Errors.notMember);
  return { conversation, participants: pair, peerId: pair[0] === userId ? pair[1] : pair[0] };
}

/** A GROUP conversation whose row is missing, as it stands before its first message. */
const groupConversation = (group: GroupRecord): ConversationRecord => ({
  conversationId: BigInt(group.groupId),
  type: ConversationKind.group,
  lastMessageId: 0n,
  lastMessageTime: group.createdAt,
  createdAt: group.createdAt,
});

/**
 * What the conversation actor's checks need of one conversation. `conversation` is kept for its
 * id and type only (its last message moves on without the cache hearing of it).
 */
export interface ConversationChecks {
  /** The epoch of the conversation's shard lease when loaded: valid only while it is the owner's. */
  epoch: number;
  conversation: ConversationRecord;
  participants: number[];
  /** GROUP: the members, for the membership test; the group (its status). */
  members?: ReadonlySet<number>;
  group?: GroupRecord;
  /** PRIVATE: whether either user blocked the other. */
  blocked: boolean;
  /** PRIVATE: whether each user still has the other as a contact (both sides needed to post). */
  bothContacts: boolean;
}

/** Loads what the checks of one conversation need: NOT_FOUND when there is no such conversation. */
export async function loadChecks(store: Store, conversationId: bigint, epoch: number): Promise<ConversationChecks> {
  if (isGroupConversationId(conversationId)) {
    const group = await store.groups.getGroup(Number(conversationId));
    if (!group) throw new ParleyError(Errors.conversationNotFound);
    const [members, conversation] = await Promise.all([store.groups.listMembers(group.groupId), store.conversations.getConversation(conversationId)]);
    const participants = members.map((m) => m.userId);
    return {
      epoch,
      conversation: conversation ?? groupConversation(group),
      participants,
      members: new Set(participants),
      group,
      blocked: false,
      bothContacts: true,
    };
  }
  const pair = privateParticipants(conversationId);
  const conversation = pair && (await store.conversations.getConversation(conversationId));
  if (!conversation || !pair) throw new ParleyError(Errors.conversationNotFound);
  const [a, b] = pair;
  const [blocked, aHasB, bHasA] = await Promise.all([store.contacts.isBlockedEitherWay(a, b), store.contacts.getContact(a, b), store.contacts.getContact(b, a)]);
  return { epoch, conversation, participants: pair, blocked, bothContacts: aHasB !== undefined && bHasA !== undefined };
}

/** The user's access to a conversation whose checks are loaded; throws as requireParticipant does. */
export function accessOf(checks: ConversationChecks, userId: number): ConversationAccess {
  const { conversation, participants, group } = checks;
  if (group) {
    if (group.status === GroupStatus.dissolved) throw new ParleyError(Errors.groupDissolved);
    if (!checks.members!.has(userId)) throw new ParleyError(Errors.notMember);
    return { conversation, participants, peerId: group.groupId, group };
  }
  if (participants[0] !== userId && participants[1] !== userId) throw new ParleyError(Errors.notMember);
  return { conversation, participants, peerId: participants[0] === userId ? participants[1] : participants[0] };
}

/** What the conversation actor knows of an account: the record it attaches to events, and an agent's status. */
export interface AccountFacts {
  user: UserRecord;
  /** The agent's status; undefined for a person. */
  agentStatus: number | undefined;
}

export async function loadAccount(store: Store, userId: number): Promise<AccountFacts | undefined> {
  const user = await store.users.getUser(userId);
  if (!user) return undefined;
  const agent = user.accountType === AccountType.agent ? await store.agents.getAgent(userId) : undefined;
  return { user, agentStatus: agent?.status };
}

/**
 * Whether the user may post. In a PRIVATE conversation both sides must still be contacts,
 * neither may have blocked the other, and an agent peer must still be active (a deleted agent's
 * conversations are read-only). Group members may always post.
 */
export function requireCanPost(checks: ConversationChecks, access: ConversationAccess, peer: AccountFacts | undefined): void {
  if (access.group) return;
  if (checks.blocked) throw new ParleyError(Errors.blocked);
  if (peer?.agentStatus !== undefined && peer.agentStatus !== AgentStatus.active) throw new ParleyError(Errors.conversationReadOnly);
  if (!checks.bothContacts) throw new ParleyError(Errors.contactRemoved);
}

/**
 * A map that keeps at most `maxEntries` entries and at most `maxWeight` in total, dropping the
 * least recently used first. A read moves the entry to the recent end.
 */
export class BoundedCache<K, V> {
  private readonly entries = new Map<K, { value: V; weight: number }>();
  private totalWeight = 0;

  constructor(
    private readonly maxEntries: number,
    private readonly maxWeight = Infinity,
    private readonly weigh: (value: V) => number = () => 1,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  set(key: K, value: V): void {
    this.delete(key);
    const weight = this.weigh(value);
    this.entries.set(key, { value, weight });
    this.totalWeight += weight;
    while (this.entries.size > this.maxEntries || (this.totalWeight > this.maxWeight && this.entries.size > 1)) {
      this.delete(this.entries.keys().next().value as K);
    }
  }

  delete(key: K): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.totalWeight -= entry.weight;
  }

  /** Drops the entries the predicate picks. */
  deleteWhere(predicate: (key: K, value: V) => boolean): void {
    for (const [key, entry] of [...this.entries]) if (predicate(key, entry.value)) this.delete(key);
  }

  clear(): void {
    this.entries.clear();
    this.totalWeight = 0;
  }
}

const forgetAction = "messages.forget" satisfies keyof EngineActions;

/**
 * Tells every node that runs conversation actors that these conversations or accounts changed,
 * and waits until each has dropped what it held of them. Call it after the change is written and
 * before answering: then the very next message is checked against the change.
 *
 * Every node is told, not only the conversation's owner: while ownership moves, the node that
 * Moleculer's routing picks and the lease holder may differ for a moment, and a node that held
 * the conversation may hold it again later. Changes that concern conversations (contacts,
 * blocks, members, profiles, agent deletion) are rare next to messages, and engine nodes few.
 */
export async function tellConversationActors(ctx: Pick<Context, "call" | "broker">, change: ForgetParams): Promise<void> {
  if (!change.conversationIds?.length && !change.userIds?.length) return;
  const registry = ctx.broker.registry as unknown as { getActionEndpoints(name: string): { endpoints: { id: string; state: boolean }[] } | undefined };
  const nodes = () => new Set((registry.getActionEndpoints(forgetAction)?.endpoints ?? []).filter((endpoint) => endpoint.state).map((endpoint) => endpoint.id));
  await Promise.all(
    [...nodes()].map((nodeID) =>
      callEngine(ctx, forgetAction, change, { nodeID }).catch((err: unknown) => {
        // A node that left meanwhile holds nothing any more (and forgets everything when it
        // rejoins: see the conversation service's node events); any other failure is the caller's.
        if (nodes().has(nodeID)) throw err;
      }),
    ),
  );
}
