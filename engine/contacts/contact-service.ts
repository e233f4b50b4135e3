// The social graph: friend requests, contacts (one record per side), aliases, blocks, search.
import { create } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import {
  AcceptFriendRequestRequestSchema,
  AcceptFriendRequestResponseSchema,
  AddContactRequestSchema,
  AddContactResponseSchema,
  BlockUserRequestSchema,
  BlockUserResponseSchema,
  DeleteContactRequestSchema,
  DeleteContactResponseSchema,
  ListBlockedRequestSchema,
  ListBlockedResponseSchema,
  ListContactsRequestSchema,
  ListContactsResponseSchema,
  ListPendingRequestsRequestSchema,
  ListPendingRequestsResponseSchema,
  RejectFriendRequestRequestSchema,
  RejectFriendRequestResponseSchema,
  SearchAccountType,
  SearchUsersRequestSchema,
  SearchUsersResponseSchema,
  SendFriendRequestRequestSchema,
  SendFriendRequestResponseSchema,
  UnblockUserRequestSchema,
  UnblockUserResponseSchema,
  UpdateContactAliasRequestSchema,
  UpdateContactAliasResponseSchema,
} from "../../shared/gen/api/v1/contact_pb.js";
import { PendingRequestItemSchema, type PendingRequestItem } from "../../shared/gen/shared/v1/contact_pb.js";
import type { SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import { Errors, ParleyError, type CatalogueEntry } from "../../shared/errors.js";
import { privateConversationId } from "../../shared/ids.js";
import type { Caller } from "../../shared/caller.js";
import type { EngineDeps } from "../deps.js";
import { accountScope, type EventBatch } from "../delivery/fan-out.js";
import { tellConversationActors } from "../membership.js";
import { requireCaller, requireUser, rpcAction } from "../rpc-action.js";
import { AccountType, AgentStatus, AgentVisibility, FriendRequestStatus, type FriendRequestRecord, type UserRecord } from "../../ports/store/store.js";
import { normalizeIdentity } from "../auth/auth-service.js";
import { IdentityType } from "../../shared/gen/api/v1/common_pb.js";
import { userInfoView } from "../views.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

export const SocialPolicy = {
  pendingPageDefault: 20,
  contactsPageDefault: 50,
  agentSearchResults: 10,
} as const;

type Event = SnUpdate["update"];

function requestItem(request: FriendRequestRecord): PendingRequestItem {
  return create(PendingRequestItemSchema, {
    requestId: BigInt(request.requestId),
    fromUserId: request.fromUserId,
    toUserId: request.toUserId,
    message: request.message,
    createdAt: BigInt(request.createdAt),
  });
}

export function contactsService(deps: EngineDeps): ServiceSchema {
  const { store, clock } = deps;
  const contacts = store.contacts;

  async function requireTarget(caller: Caller, targetUserId: number, self: CatalogueEntry = Errors.cannotTargetSelf): Promise<UserRecord> {
    if (targetUserId === caller.userId) throw new ParleyError(self);
    const target = await store.users.getUser(targetUserId);
    if (!target) throw new ParleyError(Errors.userNotFound);
    return target;
  }

  /** The event of a change `actorId` made, to `recipients`, added to the change's batch: recorded with the change, delivered after it. */
  const event = (events: EventBatch, actorId: number, recipients: number[], update: Event, users: UserRecord[] = []) =>
    events.add(accountScope(actorId), recipients, update, users.map(userInfoView));
  /** The pair's conversation actor checks contacts and blocks from memory: it must drop them before the caller hears of the change. */
  const pairChanged = (ctx: Context, a: number, b: number) => tellConversationActors(ctx, { conversationIds: [String(privateConversationId(a, b))] });
  const contactDeleted = (events: EventBatch, ownerId: number, peer: UserRecord) =>
    event(events, ownerId, [ownerId], { case: "contactDeleted", value: { $typeName: "shared.v1.ContactDeletedEvent", peerUserId: peer.userId } }, [peer]);

  async function handleRequest(ctx: Context, caller: Caller, requestId: bigint, status: typeof FriendRequestStatus.accepted | typeof FriendRequestStatus.rejected) {
    const request = requestId <= BigInt(Number.MAX_SAFE_INTEGER) ? await contacts.getFriendRequest(Number(requestId)) : undefined;
    // Only the addressee may answer; to anyone else the request does not exist.
    if (!request || request.toUserId !== caller.userId) throw new ParleyError(Errors.friendRequestNotFound);
    if (request.status !== FriendRequestStatus.pending) throw new ParleyError(Errors.friendRequestHandled);
    const users = await store.users.getUsers([request.fromUserId, request.toUserId]);
    const update: Event =
      status === FriendRequestStatus.accepted
        ? { case: "friendRequestAccepted", value: { $typeName: "shared.v1.FriendRequestAcceptedEvent", request: requestItem(request) } }
        : { case: "friendRequestRejected", value: { $typeName: "shared.v1.FriendRequestRejectedEvent", requestId: BigInt(request.requestId), rejectorId: caller.userId } };
    // Accepting connects the two users in the same write (ContactStore.resolveFriendRequest).
    const events = await deps.fanOuts.batch();
    const resolved = await contacts.resolveFriendRequest(request.requestId, status, clock.now(), (done) =>
      done ? [event(events, caller.userId, [request.fromUserId, request.toUserId], update, users)] : [],
    );
    if (!resolved) throw new ParleyError(Errors.friendRequestHandled);
    if (status === FriendRequestStatus.accepted) await pairChanged(ctx, request.fromUserId, request.toUserId);
    await events.deliver(ctx);
    return {};
  }

  return {
    name: "contacts",
    actions: {
      sendFriendRequest: rpcAction(SendFriendRequestRequestSchema, SendFriendRequestResponseSchema, async ({ request, caller, ctx }) => {
        const sender = requireUser(caller);
        const target = await requireTarget(sender, request.targetUserId);
        if (await contacts.isBlockedEitherWay(sender.userId, target.userId)) throw new ParleyError(Errors.blocked);
        if (target.accountType === AccountType.agent) throw new ParleyError(Errors.invalidArgument, { field: "target_user_id" }, "agents are added with AddContact");
        const [mine, theirs] = await Promise.all([contacts.getContact(sender.userId, target.userId), contacts.getContact(target.userId, sender.userId)]);
        // Contacts on both sides: nothing to request. One side deleted: a new request re-friends.
        if (mine && theirs) throw new ParleyError(Errors.alreadyContacts);
        if (await contacts.findPendingBetween(sender.userId, target.userId)) throw new ParleyError(Errors.friendRequestPending);
        const senderRecord = (await store.users.getUser(sender.userId))!;
        const events = await deps.fanOuts.batch();
        const created = await contacts.createFriendRequest(sender.userId, target.userId, request.message, clock.now(), (made) => [
          event(events, sender.userId, [target.userId], { case: "friendRequestReceived", value: { $typeName: "shared.v1.FriendRequestReceivedEvent", request: requestItem(made) } }, [senderRecord]),
          event(
            events,
            sender.userId,
            [sender.userId],
            { case: "friendRequestSent", value: { $typeName: "shared.v1.FriendRequestSentEvent", requestId: BigInt(made.requestId), targetUserId: target.userId } },
            [target],
          ),
        ]);
        await events.deliver(ctx);
        return { requestId: BigInt(created.requestId) };
      }),
      listPendingRequests: rpcAction(ListPendingRequestsRequestSchema, ListPendingRequestsResponseSchema, async ({ request, caller }) => {
        const owner = requireCaller(caller);
        const limit = request.limit || SocialPolicy.pendingPageDefault;
        const before = request.beforeTime !== undefined ? Number(request.beforeTime) : Number.MAX_SAFE_INTEGER;
        const rows = await contacts.listPendingRequests(owner.userId, before, limit + 1);
        const page = rows.slice(0, limit);
        const senders = await store.users.getUsers([...new Set(page.map((r) => r.fromUserId))]);
        return { items: page.map(requestItem), hasMore: rows.length > limit, users: senders.map(userInfoView) };
      }),
      acceptFriendRequest: rpcAction(AcceptFriendRequestRequestSchema, AcceptFriendRequestResponseSchema, ({ request, caller, ctx }) =>
        handleRequest(ctx, requireUser(caller), request.requestId, FriendRequestStatus.accepted),
      ),
      rejectFriendRequest: rpcAction(RejectFriendRequestRequestSchema, RejectFriendRequestResponseSchema, ({ request, caller, ctx }) =>
        handleRequest(ctx, requireUser(caller), request.requestId, FriendRequestStatus.rejected),
      ),
      addContact: rpcAction(AddContactRequestSchema, AddContactResponseSchema, async ({ request, caller, ctx }) => {
        const owner = requireUser(caller);
        const target = await requireTarget(owner, request.targetUserId);
        if (target.accountType !== AccountType.agent) throw new ParleyError(Errors.targetIsRegularUser);
        const agent = await store.agents.getAgent(target.userId);
        if (!agent) throw new ParleyError(Errors.userNotFound);
        if (agent.status !== AgentStatus.active) throw new ParleyError(Errors.agentNotActive);
        if (agent.visibility === AgentVisibility.private && agent.creatorId !== owner.userId) throw new ParleyError(Errors.privateAgent);
        if (await contacts.isBlockedEitherWay(owner.userId, target.userId)) throw new ParleyError(Errors.blocked);
        if (await contacts.getContact(owner.userId, target.userId)) throw new ParleyError(Errors.contactAlreadyExists);
        // The agent hears of it on its own stream (delivered by webhook or socket, per its mode).
        const ownerRecord = (await store.users.getUser(owner.userId))!;
        const events = await deps.fanOuts.batch();
        await contacts.connect(owner.userId, target.userId, privateConversationId(owner.userId, target.userId), clock.now(), () => [
          event(events, owner.userId, [owner.userId], { case: "contactAdded", value: { $typeName: "shared.v1.ContactAddedEvent", peerUserId: target.userId } }, [target]),
          event(events, owner.userId, [target.userId], { case: "contactAdded", value: { $typeName: "shared.v1.ContactAddedEvent", peerUserId: owner.userId } }, [ownerRecord]),
        ]);
        await pairChanged(ctx, owner.userId, target.userId);
        await events.deliver(ctx);
        return {};
      }),
      listContacts: rpcAction(ListContactsRequestSchema, ListContactsResponseSchema, async ({ request, caller }) => {
        const owner = requireCaller(caller);
        const limit = request.limit || SocialPolicy.contactsPageDefault;
        const rows = await contacts.listContacts(owner.userId, request.afterId ?? 0, limit + 1);
        const page = rows.slice(0, limit);
        const users = new Map((await store.users.getUsers(page.map((c) => c.contactId))).map((u) => [u.userId, u]));
        return {
          contacts: page.flatMap((contact) => {
            const user = users.get(contact.contactId);
            if (!user) return [];
            const alias = user.accountType === AccountType.user && contact.alias !== null ? contact.alias : undefined;
            return [{ user: userInfoView(user), alias, createdAt: BigInt(contact.createdAt) }];
          }),
          totalContacts: await contacts.countContacts(owner.userId),
          hasMore: rows.length > limit,
        };
      }),
      deleteContact: rpcAction(DeleteContactRequestSchema, DeleteContactResponseSchema, async ({ request, caller, ctx }) => {
        const owner = requireCaller(caller);
        const peer = await store.users.getUser(request.contactUserId);
        const events = await deps.fanOuts.batch();
        if (!peer || !(await contacts.removeContact(owner.userId, peer.userId, (existed) => (existed ? [contactDeleted(events, owner.userId, peer)] : [])))) {
          throw new ParleyError(Errors.contactNotFound);
        }
        await pairChanged(ctx, owner.userId, peer.userId);
        await events.deliver(ctx);
        return {};
      }),
      updateContactAlias: rpcAction(UpdateContactAliasRequestSchema, UpdateContactAliasResponseSchema, async ({ request, caller, ctx }) => {
        const owner = requireCaller(caller);
        const peer = await store.users.getUser(request.contactUserId);
        if (!peer) throw new ParleyError(Errors.contactNotFound);
        const alias = request.alias ? request.alias : null;
        if (alias !== null && peer.accountType === AccountType.agent) {
          throw new ParleyError(Errors.invalidArgument, { field: "alias" }, "agent contacts cannot have an alias");
        }
        const aliasUpdated: Event = { case: "contactAliasUpdated", value: { $typeName: "shared.v1.ContactAliasUpdatedEvent", contactUserId: peer.userId, newAlias: alias ?? "" } };
        const events = await deps.fanOuts.batch();
        if (!(await contacts.setAlias(owner.userId, peer.userId, alias, (set) => (set ? [event(events, owner.userId, [owner.userId], aliasUpdated, [peer])] : [])))) {
          throw new ParleyError(Errors.contactNotFound);
        }
        await events.deliver(ctx);
        return {};
      }),
      searchUsers: rpcAction(SearchUsersRequestSchema, SearchUsersResponseSchema, async ({ request, caller }) => {
        const searcher = requireCaller(caller);
        const query = request.query.trim();
        const found: UserRecord[] = [];
        if (request.accountType !== SearchAccountType.AGENT) {
          const human = await findHuman(query);
          if (human) found.push(human);
        }
        if (request.accountType !== SearchAccountType.USER) {
          found.push(...(await store.users.searchAgents(query.replace(/^@/, ""), SocialPolicy.agentSearchResults + 1)));
        }
        const blocked = await contacts.blockedAmong(searcher.userId, found.map((u) => u.userId));
        const visible = found.filter((u) => u.userId !== searcher.userId && !blocked.has(u.userId));
        const humans = visible.filter((u) => u.accountType === AccountType.user).slice(0, 1);
        const agents = visible.filter((u) => u.accountType === AccountType.agent).slice(0, SocialPolicy.agentSearchResults);
        return { items: [...humans, ...agents].map(userInfoView) };
      }),
      blockUser: rpcAction(BlockUserRequestSchema, BlockUserResponseSchema, async ({ request, caller, ctx }) => {
        const blocker = requireCaller(caller);
        const target = await requireTarget(blocker, request.targetUserId, Errors.cannotBlockSelf);
        const blocked: Event = { case: "userBlockToggled", value: { $typeName: "shared.v1.UserBlockToggledEvent", targetUserId: target.userId, isBlocked: true } };
        // The blocker's contact side and the pending requests between them go in the same write.
        const events = await deps.fanOuts.batch();
        const outcome = await contacts.block(blocker.userId, target.userId, clock.now(), ({ blocked: done, contactRemoved }) =>
          done ? [...(contactRemoved ? [contactDeleted(events, blocker.userId, target)] : []), event(events, blocker.userId, [blocker.userId], blocked, [target])] : [],
        );
        if (!outcome.blocked) throw new ParleyError(Errors.alreadyBlocked);
        await pairChanged(ctx, blocker.userId, target.userId);
        await events.deliver(ctx);
        return {};
      }),
      unblockUser: rpcAction(UnblockUserRequestSchema, UnblockUserResponseSchema, async ({ request, caller, ctx }) => {
        const blocker = requireCaller(caller);
        const target = await store.users.getUser(request.targetUserId);
        if (!target) throw new ParleyError(Errors.notBlocked);
        const unblocked: Event = { case: "userBlockToggled", value: { $typeName: "shared.v1.UserBlockToggledEvent", targetUserId: target.userId, isBlocked: false } };
        const events = await deps.fanOuts.batch();
        if (!(await contacts.unblock(blocker.userId, target.userId, (done) => (done ? [event(events, blocker.userId, [blocker.userId], unblocked, [target])] : [])))) {
          throw new ParleyError(Errors.notBlocked);
        }
        await pairChanged(ctx, blocker.userId, target.userId);
        await events.deliver(ctx);
        return {};
      }),
      listBlocked: rpcAction(ListBlockedRequestSchema, ListBlockedResponseSchema, async ({ caller }) => {
        const blocker = requireCaller(caller);
        const rows = await contacts.listBlocked(blocker.userId);
        const users = new Map((await store.users.getUsers(rows.map((r) => r.blockedId))).map((u) => [u.userId, u]));
        return {
          blocked: rows.flatMap((row) => {
            const user = users.get(row.blockedId);
            return user ? [{ user: userInfoView(user), blockedAt: BigInt(row.blockedAt) }] : [];
          }),
        };
      }),
    } satisfies ActionsOf<EngineActions, "contacts">,
  };

  /** Exact match on email, phone or username; at most one human. */
  async function findHuman(query: string): Promise<UserRecord | undefined> {
    const candidates: (UserRecord | undefined)[] = [];
    const attempt = async (lookup: () => Promise<UserRecord | undefined>) => {
      try {
        candidates.push(await lookup());
      } catch {
        // Not of that identity's shape; try the next.
      }
    };
    if (query.includes("@") && !query.startsWith("@")) {
      await attempt(() => store.users.findByEmail(normalizeIdentity(IdentityType.EMAIL, query).value));
    }
    if (/^[+\d][\d\s\-().]*$/.test(query)) await attempt(() => store.users.findByPhone(normalizeIdentity(IdentityType.PHONE, query).value));
    await attempt(() => store.users.findByUsername(query.replace(/^@/, "").toLowerCase()));
    return candidates.find((user) => user?.accountType === AccountType.user);
  }
}
