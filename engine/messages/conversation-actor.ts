// The conversation actor: one per conversation (sharded by conversationId), owner of its dense
// message id sequence, of the messages' lifecycle (send, edit, recall, streams) and of card
// actions. Writes for one conversation run one at a time through its mailbox; different
// conversations run concurrently. The mailbox is held while a change becomes durable (the message
// and its fan-out record commit together), not while it is pushed: the fan-out is delivered after
// the mailbox moved on, in the conversation's order (fan-out.ts), so each user sees a
// conversation's events in order. A call still answers once its own events are delivered.
//
// Streamed output is the hot path: deltas live only in memory here (GetMessage reads them) and go
// out as ephemeral pushes; the database sees a stream twice, at START and at END or ERROR.
//
// The actor holds what its checks need in memory (membership.ts: participants, group status,
// contacts and blocks of a pair, accounts) and is told when it changes (`messages.forget`),
// so no message or delta reads it. It serves a conversation only while this node owns it
// (ownership.ts): every write carries the lease's fence, and a write the store refuses drops what
// the node held of the conversation (checks, sequence position, live streams) and answers a
// retryable UNAVAILABLE; the new owner rebuilds from the store.
import { randomBytes } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { Context } from "moleculer";
import type { SendMessageRequest } from "../../shared/gen/api/v1/message_pb.js";
import {
  MessageBodySchema,
  MessageEnvelopeSchema,
  MessageType,
  ReplyContextSchema,
  StreamPhase,
  type MessageBody,
  type MessageEntity,
  type MessageEnvelope,
} from "../../shared/gen/shared/v1/message_pb.js";
import { CardActionPayloadSchema } from "../../shared/gen/shared/v1/updates_pb.js";
import type { Caller } from "../../shared/caller.js";
import { Errors, ParleyError, parleyErrorParts, type CatalogueEntry } from "../../shared/errors.js";
import { isGroupConversationId } from "../../shared/ids.js";
import type { EngineDeps } from "../deps.js";
import type { PreparedFanOut } from "../delivery/fan-out.js";
import { callEngine, type AdoptStreamParams, type ForgetParams } from "../engine-actions.js";
import { deliverCardAction, sendEphemeral } from "../delivery/ephemeral.js";
import { Mailbox } from "../../shared/mailbox.js";
import {
  BoundedCache,
  accessOf,
  loadAccount,
  loadChecks,
  requireCanPost,
  type AccountFacts,
  type ConversationAccess,
  type ConversationChecks,
} from "../membership.js";
import { conversationKey, shardOf } from "../../shared/shards.js";
import {
  checkEntities,
  checkOutgoingBody,
  contentPreview,
  notificationPreview,
  finishedStreamBody,
  groupEventUserIds,
  openStreamOf,
  recalledBody,
  startsStream,
  streamStartBody,
} from "./message-body.js";
import { requestOfflinePush } from "../push/push-service.js";
import { systemAgentUserId, tellSystemAgent } from "../agents/system-agent.js";
import { OwnershipLostError, type Fence, type MessageRecord, type UserRecord } from "../../ports/store/store.js";
import { userInfoView } from "../views.js";
import { streamsEnded, streamsStarted } from "../../shared/metrics.js";
import { backgroundFailed } from "../../shared/background.js";

export const MessagePolicy = {
  editWindowMs: 24 * 60 * 60 * 1000,
  cardActionTtlMs: 5 * 60 * 1000,
  historyPageDefault: 50,
  /** Deltas that may arrive ahead of a missing one and wait for it. */
  streamReorderWindow: 64,
  /** A stream without a delta for this long is ended as abandoned (ERROR, partial text kept). */
  streamIdleTimeoutMs: 10 * 60 * 1000,
  /** How often each node looks for abandoned streams. */
  streamSweepIntervalMs: 60 * 1000,
  /** Persisted open streams one sweep hands back to their owners at most. */
  adoptedStreamsPerSweep: 500,
} as const;

/**
 * How much of the checks' state one node keeps (least recently used goes first; a miss costs a
 * few indexed reads). A private conversation's entry is a few hundred bytes and a group's grows
 * with its members, so the participants held are bounded as well: 50,000 conversations (the ones
 * active within minutes on a busy node) and 1,000,000 participant ids in all, some tens of MB at
 * worst. Accounts (a UserRecord, about half a KB): 50,000, some 25 MB.
 */
export const CheckCachePolicy = {
  conversations: 50_000,
  participants: 1_000_000,
  accounts: 50_000,
} as const;

const streamsEndedByAgent = streamsEnded.bind({ outcome: "end" });
const streamsFailedByAgent = streamsEnded.bind({ outcome: "error" });
const streamsAbandoned = streamsEnded.bind({ outcome: "abandoned" });
const streamsRecalled = streamsEnded.bind({ outcome: "recalled" });

/** The ErrorStream message the platform itself gives a stream its agent abandoned. */
export const abandonedStreamError = "the agent stopped streaming: no delta for 10 minutes";

interface LiveStream {
  senderId: number;
  /**
   * The seq the next in-order delta must carry; 0 when unknown (the stream was picked up after
   * its owner changed), in which case the next delta's seq is taken as the continuation.
   */
  nextSeq: number;
  text: string;
  /** Deltas that arrived ahead of a gap, by seq. */
  waiting: Map<number, string>;
  contentType: string;
  /** Clock time of the START or the latest delta; a stream idle too long is abandoned. */
  lastActivityAt: number;
  /** Of the message, for the delta envelopes (so a delta reads nothing from the store). */
  createdAt: number;
  clientMessageId: bigint;
  /** The epoch of the conversation's lease it was built under: a stream of an earlier owner is rebuilt. */
  epoch: number;
}

/**
 * The in-memory state of a stream message. `nextSeq` 0 means a stream picked up after its owner
 * changed (restart or reshard): the deltas held in memory are gone, and the stream goes on from
 * whatever seq the agent sends next. EndStream carries the agent's full text, so END loses nothing.
 */
function newLiveStream(record: MessageRecord, contentType: string, nextSeq: number, now: number, fence: Fence): LiveStream {
  return {
    senderId: record.senderId,
    nextSeq,
    text: "",
    waiting: new Map(),
    contentType,
    lastActivityAt: now,
    createdAt: record.createdAt,
    clientMessageId: record.clientMessageId,
    epoch: fence.epoch,
  };
}

interface CardAction {
  conversationId: string;
  messageId: string;
  agentUserId: number;
  submitterId: number;
}

/**
 * One conversation's actor, as Tinode has one object per topic: what this node holds of the
 * conversation while it owns it. Its mailbox runs the conversation's writes one at a time; the rest
 * is what those writes keep between them, all of it rebuilt from the store by whoever owns the
 * conversation next. What it may check from memory (membership, accounts) is shared by the actors
 * of this node under one memory bound (ConversationActors).
 */
export class ConversationActor {
  private readonly mailbox = new Mailbox();
  /** The last message id written (the next one is one more), once read from the store. */
  latestId: bigint | undefined;
  /** The lease epoch under which the fan-outs an earlier holder left unfinished were finished (finishInheritedFanOuts). */
  settledUnder: number | undefined;
  /** Streamed messages open in memory, by message id; made when the first one opens. */
  private liveStreams: Map<bigint, LiveStream> | undefined;

  constructor(readonly conversationId: bigint) {}

  /** Runs `work` in the conversation's mailbox, after every write queued before it. */
  run<T>(work: () => Promise<T>): Promise<T> {
    return this.mailbox.run(work);
  }

  /** Nothing queued in the mailbox: a new actor for the conversation could take over at once. */
  get idle(): boolean {
    return this.mailbox.idle;
  }

  stream(messageId: bigint): LiveStream | undefined {
    return this.liveStreams?.get(messageId);
  }

  openStream(messageId: bigint, stream: LiveStream): void {
    (this.liveStreams ??= new Map()).set(messageId, stream);
  }

  closeStream(messageId: bigint): void {
    this.liveStreams?.delete(messageId);
    if (this.liveStreams?.size === 0) this.liveStreams = undefined;
  }

  /** How many streams are open in memory. */
  get openStreams(): number {
    return this.liveStreams?.size ?? 0;
  }

  /** The streams open in memory, with their message ids. */
  streams(): [bigint, LiveStream][] {
    return this.liveStreams ? [...this.liveStreams] : [];
  }

  /** Forgets what was built under a lease this node no longer holds; the mailbox goes on. */
  reset(): void {
    this.latestId = undefined;
    this.settledUnder = undefined;
    this.liveStreams = undefined;
  }
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

export function envelopeOf(record: MessageRecord, live?: LiveStream): MessageEnvelope {
  let body = fromBinary(MessageBodySchema, record.body);
  if (live && body.content.case === "stream") {
    // Mid-stream, seq is the last delta the accumulated text includes, so a client recovering
    // with GetMessage knows which pushed deltas it already holds.
    const phase = live.text ? StreamPhase.DELTA : StreamPhase.START;
    const seq = phase === StreamPhase.DELTA && live.nextSeq > 0 ? live.nextSeq - 1 : 0;
    body = create(MessageBodySchema, {
      type: MessageType.STREAM,
      content: { case: "stream", value: { phase, seq, contentType: live.contentType, accumulatedText: live.text } },
    });
  }
  return create(MessageEnvelopeSchema, {
    messageId: record.messageId,
    conversationId: record.conversationId,
    senderId: record.senderId,
    body,
    replyTo: record.replyTo ? fromBinary(ReplyContextSchema, record.replyTo) : undefined,
    metadata: record.metadata,
    createdAt: BigInt(record.createdAt),
    updatedAt: record.updatedAt === null ? undefined : BigInt(record.updatedAt),
    edited: record.edited,
    clientMessageId: record.clientMessageId,
  });
}

/**
 * The conversation actors of this node, one ConversationActor per conversation it has written or
 * streamed in, and the calls every actor serves (send, edit, recall, streams, card actions). What
 * the actors check from memory is shared here under one bound: the conversations' checks and the
 * accounts' facts, dropped when they change (`messages.forget`).
 */
export class ConversationActors {
  private readonly actors = new Map<bigint, ConversationActor>();
  /** Deliveries a call's writes started, awaited once the call has left the mailbox. */
  private readonly deliveries = new WeakMap<Context, Promise<void>[]>();
  private readonly checks = new BoundedCache<bigint, ConversationChecks>(CheckCachePolicy.conversations, CheckCachePolicy.participants, (checks) => checks.participants.length);
  private readonly loadingChecks = new Map<bigint, Promise<ConversationChecks>>();
  private readonly accounts = new BoundedCache<number, AccountFacts>(CheckCachePolicy.accounts);
  /** Counts what was forgotten: a load that began before a change is used once, not kept. */
  private forgotten = 0;

  constructor(private readonly deps: EngineDeps) {
    deps.ownership.onLost((shard) => this.dropShard(shard));
  }

  private get store() {
    return this.deps.store;
  }

  /** The conversation's actor, made when first needed. */
  private actor(conversationId: bigint): ConversationActor {
    let actor = this.actors.get(conversationId);
    if (!actor) {
      actor = new ConversationActor(conversationId);
      this.actors.set(conversationId, actor);
    }
    return actor;
  }

  /** A stream open in this node's memory, without making an actor for a conversation it never held. */
  private liveStreamIn(conversationId: bigint, messageId: bigint): LiveStream | undefined {
    return this.actors.get(conversationId)?.stream(messageId);
  }

  /** Streams open in this node's memory. */
  get openStreams(): number {
    let open = 0;
    for (const actor of this.actors.values()) open += actor.openStreams;
    return open;
  }

  /**
   * The fence of the conversation's lease and its checks' state, loaded when missing or built
   * under an earlier lease. UNAVAILABLE when another node owns the conversation.
   */
  private async enter(conversationId: bigint): Promise<{ fence: Fence; checks: ConversationChecks }> {
    const fence = await this.deps.ownership.fence(conversationKey(conversationId));
    const cached = this.checks.get(conversationId);
    if (cached?.epoch === fence.epoch) return { fence, checks: cached };
    let loading = this.loadingChecks.get(conversationId);
    if (!loading) {
      const generation = this.forgotten;
      loading = loadChecks(this.store, conversationId, fence.epoch).then((checks) => {
        if (generation === this.forgotten && this.deps.ownership.holds(fence)) this.checks.set(conversationId, checks);
        return checks;
      });
      const settled = loading.finally(() => this.loadingChecks.delete(conversationId));
      settled.catch(() => undefined);
      this.loadingChecks.set(conversationId, loading);
    }
    const checks = await loading;
    return { fence, checks: checks.epoch === fence.epoch ? checks : { ...checks, epoch: fence.epoch } };
  }

  /** The account's record and agent status, from memory after the first use. */
  private async account(userId: number): Promise<AccountFacts | undefined> {
    const cached = this.accounts.get(userId);
    if (cached) return cached;
    const generation = this.forgotten;
    const facts = await loadAccount(this.store, userId);
    if (facts && generation === this.forgotten) this.accounts.set(userId, facts);
    return facts;
  }

  /** Drops what the checks hold of these conversations and accounts: they changed. */
  forget(change: ForgetParams): void {
    this.forgotten += 1;
    for (const id of change.conversationIds ?? []) this.checks.delete(BigInt(id));
    for (const userId of change.userIds ?? []) this.accounts.delete(userId);
  }

  /** Drops every check's state (the cluster changed: this node may have missed a change). */
  forgetAll(): void {
    this.forgotten += 1;
    this.checks.clear();
    this.accounts.clear();
  }

  /** Drops everything held of the conversations of a shard this node no longer owns. */
  private dropShard(shard: number): void {
    this.forgotten += 1;
    const inShard = (conversationId: bigint) => shardOf(conversationKey(conversationId)) === shard;
    this.checks.deleteWhere(inShard);
    for (const [conversationId, actor] of [...this.actors]) {
      if (!inShard(conversationId)) continue;
      actor.reset();
      // A write under way keeps its actor, so the next write of the conversation queues behind it.
      if (actor.idle) this.actors.delete(conversationId);
    }
  }

  /**
   * Runs a change of the conversation in its mailbox. A write the store refused because another
   * node took the conversation over drops what this node held of it (ownership listeners) and
   * answers a retryable UNAVAILABLE.
   */
  private owned<T>(conversationId: bigint, work: () => Promise<T>): Promise<T> {
    return this.actor(conversationId).run(() =>
      work().catch((err: unknown) => {
        if (!(err instanceof OwnershipLostError)) throw err;
        this.deps.ownership.lost(err.fence);
        throw new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: String(err.fence.shard) }, "another node took this conversation over; try again");
      }),
    );
  }

  private async nextIds(conversationId: bigint): Promise<bigint> {
    const actor = this.actor(conversationId);
    if (actor.latestId !== undefined) return actor.latestId + 1n;
    const latest = await this.store.messages.latestMessageId(conversationId);
    actor.latestId = latest;
    return latest + 1n;
  }

  /**
   * Runs a call's writes in the conversation's mailbox, then waits, outside it, for the delivery
   * of the events they recorded: the caller hears back once its change reached every stream
   * (an error if a delivery failed; the change is durable and its retry finishes it), while the
   * next change of the conversation is already being written. A call that recorded nothing (a
   * retry answered from what is stored) waits for the deliveries under way, its original's too.
   */
  private async writing<T>(ctx: Context, conversationId: bigint, work: () => Promise<T>): Promise<T> {
    try {
      return await this.owned(conversationId, async () => {
        await this.finishInheritedFanOuts(ctx, conversationId);
        return work();
      });
    } finally {
      const started = this.deliveries.get(ctx);
      this.deliveries.delete(ctx);
      if (started) await Promise.all(started);
      else await this.deps.fanOuts.delivered(String(conversationId));
    }
  }

  /**
   * The first write under a lease this node did not hold before (the conversation moved here, or
   * this node restarted) first finishes the fan-outs the previous holder recorded and did not
   * deliver (it died between its answer and its deliveries): a new event of the conversation must
   * follow them in every stream, and nobody else remembers them but the outbox.
   */
  private async finishInheritedFanOuts(ctx: Context, conversationId: bigint): Promise<void> {
    const fence = await this.deps.ownership.fence(conversationKey(conversationId));
    const actor = this.actor(conversationId);
    if (actor.settledUnder === fence.epoch) return;
    await this.deps.fanOuts.finishScopeInOrder(ctx, String(conversationId));
    if (this.deps.ownership.holds(fence)) actor.settledUnder = fence.epoch;
  }

  /**
   * Starts delivering a fan-out the mailbox's write just recorded; writing() waits for it. A
   * stream's START and its end are pushed from here, as its deltas are: one ordered path to each
   * gateway, so no socket sees a delta before the START or after the end.
   */
  private startDelivery(ctx: Context, fanOut: PreparedFanOut, options: { opensOrClosesStream?: boolean } = {}): void {
    const delivered = this.deps.fanOuts.deliver(ctx, fanOut, options.opensOrClosesStream ? this.deps.live : undefined);
    // A failure stays recorded in the outbox; whoever awaits it hears it, nobody else must.
    delivered.catch(() => undefined);
    const started = this.deliveries.get(ctx);
    if (started) started.push(delivered);
    else this.deliveries.set(ctx, [delivered]);
  }

  /** The event of a message written or changed, to the given recipients. */
  private async messageFanOut(record: MessageRecord, recipients: readonly number[], related: readonly UserRecord[]): Promise<PreparedFanOut> {
    await this.deps.fanOuts.ready();
    return this.deps.fanOuts.prepare(String(record.conversationId), recipients, { case: "messageEnvelope", value: envelopeOf(record) }, related.map(userInfoView));
  }

  /**
   * Stores a new message at the next id, as the conversation's last message, together with its
   * event to `recipients`, then starts delivering the event. A stale sequence (another owner wrote) is reloaded.
   */
  private async insert(
    ctx: Context,
    record: Omit<MessageRecord, "messageId">,
    options: { fence: Fence; participants: readonly number[]; recipients: readonly number[]; related: readonly UserRecord[]; opensStream?: boolean; postsSystemMessage?: bigint },
  ): Promise<{ record: MessageRecord; duplicate: boolean }> {
    for (let attempt = 0; attempt < 4; attempt++) {
      const messageId = await this.nextIds(record.conversationId);
      const candidate = { ...record, messageId };
      const fanOut = await this.messageFanOut(candidate, options.recipients, options.related);
      const result = await this.store.messages.insertMessage(candidate, {
        opensStream: options.opensStream,
        postsSystemMessage: options.postsSystemMessage,
        recordAsLast: { participants: options.participants },
        fanOut: fanOut.record,
        fence: options.fence,
      });
      if (result.outcome === "ok") {
        this.actor(record.conversationId).latestId = messageId;
        this.startDelivery(ctx, fanOut, { opensOrClosesStream: options.opensStream });
        return { record: candidate, duplicate: false };
      }
      if (result.outcome === "duplicate") return { record: result.existing, duplicate: true };
      this.actor(record.conversationId).latestId = undefined;
    }
    throw new ParleyError(Errors.unavailable, { reason: "message sequence contention" });
  }

  /**
   * Stores a change of a message together with its event to the participants, then starts
   * delivering the event; answers the sender. A change that closes a stream also ends it in memory once stored.
   */
  private async update(ctx: Context, access: ConversationAccess, updated: MessageRecord, options: { fence: Fence; closesStream?: boolean }): Promise<UserRecord | undefined> {
    const sender = (await this.account(updated.senderId))?.user;
    const fanOut = await this.messageFanOut(updated, access.participants, sender ? [sender] : []);
    await this.store.messages.updateMessage(updated.conversationId, updated.messageId, updated, { ...options, fanOut: fanOut.record });
    if (options.closesStream) this.actor(updated.conversationId).closeStream(updated.messageId);
    this.startDelivery(ctx, fanOut, { opensOrClosesStream: options.closesStream });
    return sender;
  }

  /** Alerts offline recipients of a message that now says something (not a stream's empty START). */
  private offlinePush(ctx: Context, access: ConversationAccess, record: MessageRecord, body: MessageBody, sender: UserRecord | undefined): void {
    requestOfflinePush(ctx, {
      conversationId: String(record.conversationId),
      messageId: String(record.messageId),
      senderId: record.senderId,
      senderNickname: sender?.nickname ?? "",
      ...(access.group ? { groupName: access.group.name } : {}),
      participants: access.participants,
      preview: notificationPreview(body),
    });
  }

  /**
   * The checks a message must pass, from memory. A check that fails answers a retry of a message
   * already accepted with that message, whatever changed since: the one read it costs is paid only
   * then (a retry that passes them meets its message as the insert's "duplicate").
   */
  private async admit(caller: Caller, request: SendMessageRequest, checks: ConversationChecks): Promise<{ admitted?: Admitted; existing?: MessageRecord }> {
    let access: ConversationAccess;
    try {
      access = accessOf(checks, caller.userId);
    } catch (err) {
      return { existing: await this.acceptedBefore(caller, request, err) };
    }
    checkOutgoingBody(request.body!, caller.kind === "agent");
    try {
      const [sender, peer] = await Promise.all([this.account(caller.userId), access.group ? undefined : this.account(access.peerId)]);
      requireCanPost(checks, access, peer);
      const replyTo = request.replyToMessageId ? await this.replyContext(caller.userId, access, request.replyToMessageId) : null;
      return { admitted: { access, sender: sender?.user, replyTo } };
    } catch (err) {
      return { existing: await this.acceptedBefore(caller, request, err) };
    }
  }

  /** The message this send repeats, if one was accepted before; else throws the check's error. */
  private async acceptedBefore(caller: Caller, request: SendMessageRequest, err: unknown): Promise<MessageRecord> {
    if (!(err instanceof ParleyError)) throw err;
    const existing = await this.store.messages.findByClientMessageId(request.conversationId, caller.userId, request.clientMessageId);
    if (!existing) throw err;
    return existing;
  }

  async send(ctx: Context, caller: Caller, request: SendMessageRequest) {
    return this.writing(ctx, request.conversationId, async () => {
      await this.deps.fanOuts.settle(ctx, String(request.conversationId));
      const { fence, checks } = await this.enter(request.conversationId);
      const { admitted, existing } = await this.admit(caller, request, checks);
      if (existing) return { messageId: existing.messageId, createdAt: BigInt(existing.createdAt) };
      const { access, sender, replyTo } = admitted!;
      const isStream = startsStream(request.body!);
      const body = isStream ? streamStartBody(request.body!) : request.body!;
      const now = this.deps.clock.now();
      const { record, duplicate } = await this.insert(ctx, {
        conversationId: request.conversationId,
        senderId: caller.userId,
        clientMessageId: request.clientMessageId,
        body: toBinary(MessageBodySchema, body),
        replyTo,
        metadata: {},
        createdAt: now,
        updatedAt: null,
        edited: false,
      }, { fence, participants: access.participants, recipients: access.participants, related: sender ? [sender] : [], opensStream: isStream });
      if (duplicate) return { messageId: record.messageId, createdAt: BigInt(record.createdAt) };
      if (isStream) {
        const contentType = body.content.case === "stream" ? body.content.value.contentType : "text/plain";
        this.actor(record.conversationId).openStream(record.messageId, newLiveStream(record, contentType, 1, now, fence));
        streamsStarted.inc();
      }
      if (!isStream) this.offlinePush(ctx, access, record, body, sender);
      if (access.peerId === systemAgentUserId && !access.group && caller.kind === "user" && body.content.case === "text") {
        tellSystemAgent(ctx, { conversationId: String(record.conversationId), messageId: String(record.messageId), senderId: caller.userId, text: body.content.value.text });
      }
      return { messageId: record.messageId, createdAt: BigInt(now) };
    });
  }

  /**
   * Posts a message of the server (senderId 0, clientMessageId 0), e.g. a group change, at the
   * conversation's next id to its current participants.
   */
  async postSystemMessage(ctx: Context, conversationId: bigint, body: MessageBody, extraRecipients: number[], systemMessageId: bigint) {
    return this.writing(ctx, conversationId, async () => {
      await this.deps.fanOuts.settle(ctx, String(conversationId));
      const fence = await this.deps.ownership.fence(conversationKey(conversationId));
      // Posted already (the record goes with the message's write): a repeat after a crash or a sweep.
      if (!(await this.store.outbox.isSystemMessagePending(conversationId, systemMessageId))) return {};
      const now = this.deps.clock.now();
      const members = isGroupConversationId(conversationId) ? (await this.store.groups.listMembers(Number(conversationId))).map((m) => m.userId) : [];
      const recipients = [...new Set([...members, ...extraRecipients])];
      const { record } = await this.insert(ctx, {
        conversationId,
        senderId: 0,
        clientMessageId: 0n,
        body: toBinary(MessageBodySchema, body),
        replyTo: null,
        metadata: {},
        createdAt: now,
        updatedAt: null,
        edited: false,
      }, { fence, participants: members, recipients, related: await this.store.users.getUsers(groupEventUserIds(body)), postsSystemMessage: systemMessageId });
      return { messageId: record.messageId };
    });
  }

  private async replyContext(userId: number, access: ConversationAccess, messageId: bigint): Promise<Uint8Array> {
    // A message the sender deleted for themselves cannot be quoted: it does not exist for them.
    const target = await this.findVisible(userId, access.conversation.conversationId, messageId);
    if (!target) throw new ParleyError(Errors.replyTargetNotFound);
    const sender = (await this.account(target.senderId))?.user;
    const body = fromBinary(MessageBodySchema, target.body);
    return toBinary(
      ReplyContextSchema,
      create(ReplyContextSchema, { messageId, senderId: target.senderId, senderNickname: sender?.nickname ?? "", contentPreview: contentPreview(body) }),
    );
  }

  /** The message if the user may see it (it exists and they did not delete it), else undefined. */
  private async findVisible(userId: number, conversationId: bigint, messageId: bigint): Promise<MessageRecord | undefined> {
    const record = await this.store.messages.getMessage(conversationId, messageId);
    if (!record) return undefined;
    const state = await this.store.conversations.getUserState(userId, conversationId);
    if (messageId <= state.clearedUpTo || (await this.store.messages.isDeletedFor(userId, conversationId, messageId))) return undefined;
    return record;
  }

  /** The message a caller may see, or NOT_FOUND (missing, or deleted by this caller). */
  private async visibleMessage(userId: number, conversationId: bigint, messageId: bigint): Promise<MessageRecord> {
    const record = await this.findVisible(userId, conversationId, messageId);
    if (!record) throw new ParleyError(Errors.messageNotFound);
    return record;
  }

  /** Shared checks of EditMessage and RecallMessage. */
  private async ownChange(caller: Caller, conversationId: bigint, messageId: bigint, tooLate: CatalogueEntry) {
    const { fence, checks } = await this.enter(conversationId);
    const access = accessOf(checks, caller.userId);
    const record = await this.store.messages.getMessage(conversationId, messageId);
    if (!record) throw new ParleyError(Errors.messageNotFound);
    if (record.senderId !== caller.userId) throw new ParleyError(Errors.notSender);
    const body = fromBinary(MessageBodySchema, record.body);
    if (body.type === MessageType.RECALLED) throw new ParleyError(Errors.messageRecalled);
    if (this.deps.clock.now() - record.createdAt > MessagePolicy.editWindowMs) throw new ParleyError(tooLate);
    return { fence, access, record, body };
  }

  async edit(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint, newBody: MessageBody) {
    return this.writing(ctx, conversationId, async () => {
      await this.deps.fanOuts.settle(ctx, String(conversationId));
      const { fence, access, record, body } = await this.ownChange(caller, conversationId, messageId, Errors.editWindowClosed);
      if (newBody.type !== body.type) throw new ParleyError(Errors.bodyTypeChanged);
      if (body.type === MessageType.STREAM) throw new ParleyError(Errors.invalidBody, {}, "a stream is finished with EndStream, not edited");
      checkOutgoingBody(newBody, caller.kind === "agent");
      const updatedAt = this.deps.clock.now();
      const updated: MessageRecord = { ...record, body: toBinary(MessageBodySchema, newBody), updatedAt, edited: true };
      await this.update(ctx, access, updated, { fence });
      return { updatedAt: BigInt(updatedAt) };
    });
  }

  async recall(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint) {
    return this.writing(ctx, conversationId, async () => {
      await this.deps.fanOuts.settle(ctx, String(conversationId));
      const { fence, access, record, body } = await this.ownChange(caller, conversationId, messageId, Errors.recallWindowClosed);
      const updated: MessageRecord = { ...record, body: toBinary(MessageBodySchema, recalledBody()), updatedAt: this.deps.clock.now(), edited: false };
      await this.update(ctx, access, updated, { fence, closesStream: true });
      if (openStreamOf(body)) streamsRecalled.inc();
      return {};
    });
  }

  async getMessage(caller: Caller, conversationId: bigint, messageId: bigint) {
    accessOf((await this.enter(conversationId)).checks, caller.userId);
    const record = await this.visibleMessage(caller.userId, conversationId, messageId);
    return { message: envelopeOf(record, this.liveStreamIn(conversationId, messageId)) };
  }

  async history(caller: Caller, conversationId: bigint, before: bigint | undefined, after: bigint | undefined, limit: number) {
    accessOf((await this.enter(conversationId)).checks, caller.userId);
    if (before !== undefined && after !== undefined) {
      throw new ParleyError(Errors.invalidArgument, { field: "before_message_id" }, "give beforeMessageId or afterMessageId, not both");
    }
    const pageSize = limit || MessagePolicy.historyPageDefault;
    const state = await this.store.conversations.getUserState(caller.userId, conversationId);
    const rows =
      after !== undefined
        ? await this.store.messages.listVisible(caller.userId, conversationId, "after", after, state.clearedUpTo, pageSize + 1)
        : await this.store.messages.listVisible(caller.userId, conversationId, "before", before ?? BigInt(Number.MAX_SAFE_INTEGER) * 1024n, state.clearedUpTo, pageSize + 1);
    const page = rows.slice(0, pageSize);
    const messages = page.map((record) => envelopeOf(record, this.liveStreamIn(conversationId, record.messageId)));
    const relatedIds = new Set<number>();
    for (const message of messages) {
      if (message.senderId) relatedIds.add(message.senderId);
      if (message.replyTo?.senderId) relatedIds.add(message.replyTo.senderId);
    }
    const users = await this.store.users.getUsers([...relatedIds]);
    return { messages, hasMore: rows.length > pageSize, relatedUsers: users.map(userInfoView) };
  }

  /**
   * The live stream of a message the caller sent, or the reason there is none. A stream in memory
   * is open by construction (finishing or recalling removes it), so only a miss reads the message.
   */
  private async liveStream(caller: Caller, conversationId: bigint, messageId: bigint): Promise<{ fence: Fence; access: ConversationAccess; stream: LiveStream }> {
    const { fence, checks } = await this.enter(conversationId);
    const access = accessOf(checks, caller.userId);
    const actor = this.actor(conversationId);
    const live = actor.stream(messageId);
    if (live && live.senderId === caller.userId && live.epoch === fence.epoch) return { fence, access, stream: live };
    const record = await this.store.messages.getMessage(conversationId, messageId);
    const body = record && fromBinary(MessageBodySchema, record.body);
    if (!record || body?.content.case !== "stream" || record.senderId !== caller.userId) throw new ParleyError(Errors.streamNotFound);
    const open = openStreamOf(body);
    if (!open) throw new ParleyError(Errors.streamFinished);
    const stream = newLiveStream(record, open.contentType, 0, this.deps.clock.now(), fence);
    actor.openStream(messageId, stream);
    return { fence, access, stream };
  }

  async pushDelta(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint, seq: number, delta: string) {
    return this.owned(conversationId, async () => {
      const { access, stream } = await this.liveStream(caller, conversationId, messageId);
      stream.lastActivityAt = this.deps.clock.now();
      if (stream.nextSeq === 0) stream.nextSeq = seq;
      if (seq < stream.nextSeq || stream.waiting.has(seq)) return {}; // a retry of a delta already taken
      if (seq - stream.nextSeq >= MessagePolicy.streamReorderWindow) {
        throw new ParleyError(Errors.streamSequenceGap, { expectedSeq: String(stream.nextSeq) });
      }
      stream.waiting.set(seq, delta);
      const ready: [number, string][] = [];
      for (let next = stream.waiting.get(stream.nextSeq); next !== undefined; next = stream.waiting.get(stream.nextSeq)) {
        ready.push([stream.nextSeq, next]);
        stream.waiting.delete(stream.nextSeq);
        stream.text += next;
        stream.nextSeq += 1;
      }
      for (const [readySeq, readyDelta] of ready) {
        const envelope = create(MessageEnvelopeSchema, {
          messageId,
          conversationId,
          senderId: stream.senderId,
          body: { type: MessageType.STREAM, content: { case: "stream", value: { phase: StreamPhase.DELTA, seq: readySeq, delta: readyDelta, contentType: stream.contentType } } },
          createdAt: BigInt(stream.createdAt),
          clientMessageId: stream.clientMessageId,
        });
        sendEphemeral(this.deps.live, access.participants, { case: "messageEnvelope", value: envelope });
      }
      return {};
    });
  }

  async finishStream(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint, outcome: { text?: string; entities?: MessageEntity[]; error?: string }) {
    await this.finishStreamUnlessActiveSince(ctx, caller, conversationId, messageId, outcome, Infinity);
    (outcome.error === undefined ? streamsEndedByAgent : streamsFailedByAgent).inc();
    return {};
  }

  /**
   * Finishes the stream, unless a delta arrived after `activeSince` (checked inside the mailbox,
   * so a delta queued ahead of this call counts). Answers whether it finished the stream.
   */
  private async finishStreamUnlessActiveSince(
    ctx: Context,
    caller: Caller,
    conversationId: bigint,
    messageId: bigint,
    outcome: { text?: string; entities?: MessageEntity[]; error?: string },
    activeSince: number,
  ): Promise<boolean> {
    return this.writing(ctx, conversationId, async () => {
      await this.deps.fanOuts.settle(ctx, String(conversationId));
      const { fence, access, stream } = await this.liveStream(caller, conversationId, messageId);
      if (stream.lastActivityAt > activeSince) return false;
      const record = (await this.store.messages.getMessage(conversationId, messageId))!;
      const failed = outcome.error !== undefined;
      // The agent's final text is authoritative; without one, what the deltas built up is kept.
      const text = failed ? stream.text : outcome.text || stream.text;
      if (!failed) checkEntities(text, outcome.entities ?? []);
      const body = finishedStreamBody(stream.contentType, text, failed ? { error: outcome.error! } : { entities: outcome.entities ?? [] });
      const updated: MessageRecord = { ...record, body: toBinary(MessageBodySchema, body), updatedAt: this.deps.clock.now() };
      const sender = await this.update(ctx, access, updated, { fence, closesStream: true });
      // END is when a stream has its text; an ERROR is left for the user to find in the chat.
      if (!failed) this.offlinePush(ctx, access, updated, body, sender);
      return true;
    });
  }

  /**
   * Ends the streams of this node whose agent went silent: without it an agent that crashed
   * mid-stream would leave the message in START or DELTA for ever and its text in memory.
   * They end as ERROR with the text received so far, exactly as if the agent had called
   * ErrorStream. Answers how many were ended.
   */
  async endAbandonedStreams(ctx: Context): Promise<number> {
    const cutoff = this.deps.clock.now() - MessagePolicy.streamIdleTimeoutMs;
    // Streams whose owner restarted or died are in no node's memory. Their owners take them in
    // now, as if just active, so they end one idle period from now unless their agent comes back.
    // One node looks for them (they are listed across conversations); each owner ends its own.
    // Whatever keeps this node from looking (counted), it still ends its own below.
    const looking = await this.deps.ownership.leads("open-stream-sweep").catch((err: unknown) => {
      backgroundFailed("stream_sweep", err, ctx.broker.logger, "looking for streams no node holds");
      return false;
    });
    const adopting = looking ? await this.store.messages.listOpenStreams(cutoff, MessagePolicy.adoptedStreamsPerSweep) : [];
    for (const open of adopting) {
      if (this.liveStreamIn(open.conversationId, open.messageId)) continue;
      const params: AdoptStreamParams = { request: { conversationId: String(open.conversationId) }, messageId: String(open.messageId), senderId: open.senderId };
      await callEngine(ctx, "messages.adoptStream", params).catch(() => undefined);
    }
    let ended = 0;
    const open = [...this.actors.values()].flatMap((actor) => (actor.openStreams === 0 ? [] : actor.streams().map(([messageId, stream]) => ({ actor, messageId, stream }))));
    for (const { actor, messageId, stream } of open) {
      if (stream.lastActivityAt > cutoff) continue;
      const { conversationId } = actor;
      const sender: Caller = { kind: "agent", userId: stream.senderId, deviceId: "" };
      try {
        if (await this.finishStreamUnlessActiveSince(ctx, sender, conversationId, messageId, { error: abandonedStreamError }, cutoff)) {
          ended += 1;
          streamsAbandoned.inc();
        }
      } catch (err) {
        // The sender lost access meanwhile (left the group, was deleted): the stream can no longer
        // be finished in its name, so it is closed where it lies, without a push. Anything else
        // (a store failure) is retried at the next sweep.
        const code = parleyErrorParts(err)?.entry.code;
        if (code === Code.NotFound || code === Code.PermissionDenied || code === Code.FailedPrecondition) {
          await this.closeOrphanedStream(conversationId, messageId, stream);
          actor.closeStream(messageId);
        }
      }
    }
    return ended;
  }

  private async closeOrphanedStream(conversationId: bigint, messageId: bigint, stream: LiveStream): Promise<void> {
    await this.owned(conversationId, async () => {
      const fence = await this.deps.ownership.fence(conversationKey(conversationId));
      const record = await this.store.messages.getMessage(conversationId, messageId);
      if (!record || !openStreamOf(fromBinary(MessageBodySchema, record.body))) return;
      const body = finishedStreamBody(stream.contentType, stream.text, { error: abandonedStreamError });
      const change = { body: toBinary(MessageBodySchema, body), updatedAt: this.deps.clock.now(), edited: record.edited };
      await this.store.messages.updateMessage(conversationId, messageId, change, { closesStream: true, fence });
      streamsAbandoned.inc();
    });
  }

  /** Finishes the conversation's recorded fan-outs (the sweep found some cut short), in its mailbox. */
  async finishFanOuts(ctx: Context, conversationId: bigint): Promise<void> {
    await this.actor(conversationId).run(() => this.deps.fanOuts.finishScopeInOrder(ctx, String(conversationId)));
  }

  /** Takes a persisted open stream into memory (the owner restarted since it started). */
  async adoptStream(conversationId: bigint, messageId: bigint, senderId: number): Promise<void> {
    await this.owned(conversationId, async () => {
      const fence = await this.deps.ownership.fence(conversationKey(conversationId));
      const actor = this.actor(conversationId);
      if (actor.stream(messageId)?.epoch === fence.epoch) return;
      const record = await this.store.messages.getMessage(conversationId, messageId);
      const open = record && record.senderId === senderId ? openStreamOf(fromBinary(MessageBodySchema, record.body)) : undefined;
      if (open) actor.openStream(messageId, newLiveStream(record!, open.contentType, 0, this.deps.clock.now(), fence));
    });
  }

  async submitCardAction(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint, actionData: string, verb: string) {
    accessOf((await this.enter(conversationId)).checks, caller.userId);
    // The agent receives actionData as JSON; refuse what it could not parse.
    if (!isJson(actionData)) throw new ParleyError(Errors.invalidArgument, { field: "action_data" }, "actionData is not valid JSON");
    const record = await this.visibleMessage(caller.userId, conversationId, messageId);
    if (fromBinary(MessageBodySchema, record.body).type !== MessageType.CARD) throw new ParleyError(Errors.notACard);
    const actionId = randomBytes(16).toString("base64url");
    const action: CardAction = { conversationId: String(conversationId), messageId: String(messageId), agentUserId: record.senderId, submitterId: caller.userId };
    await this.deps.ephemeral.set(`card-action:${actionId}`, JSON.stringify(action), MessagePolicy.cardActionTtlMs);
    const submitter = (await this.account(caller.userId))?.user;
    await deliverCardAction(
      ctx,
      record.senderId,
      create(CardActionPayloadSchema, { actionId, conversationId, messageId, senderId: caller.userId, actionData, verb }),
      submitter ? userInfoView(submitter) : undefined,
    );
    return { actionId };
  }

  async answerCardAction(ctx: Context, caller: Caller, conversationId: bigint, messageId: bigint, actionId: string, text: string, showAlert: boolean) {
    const raw = await this.deps.ephemeral.get(`card-action:${actionId}`);
    const action = raw ? (JSON.parse(raw) as CardAction) : undefined;
    if (!action || action.agentUserId !== caller.userId || action.conversationId !== String(conversationId) || action.messageId !== String(messageId)) {
      throw new ParleyError(Errors.cardActionNotFound);
    }
    const agent = (await this.account(caller.userId))?.user;
    sendEphemeral(
      this.deps.live,
      [action.submitterId],
      { case: "cardActionAnswer", value: { $typeName: "shared.v1.CardActionAnswer", actionId, conversationId, messageId, agentUserId: caller.userId, text, showAlert } },
      agent ? [userInfoView(agent)] : [],
    );
    return {};
  }
}

interface Admitted {
  access: ConversationAccess;
  sender: UserRecord | undefined;
  replyTo: Uint8Array | null;
}
