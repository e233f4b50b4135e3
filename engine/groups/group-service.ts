// Groups: lifecycle, membership and settings. Every change is also told in the group
// conversation as a GROUP system message, posted through the conversation actor so message ids
// stay dense.
import { create } from "@bufbuild/protobuf";
import type { Context, ServiceSchema } from "moleculer";
import {
  CreateGroupRequestSchema,
  CreateGroupResponseSchema,
  DissolveGroupRequestSchema,
  DissolveGroupResponseSchema,
  GetGroupInfoRequestSchema,
  GetGroupInfoResponseSchema,
  InviteMembersRequestSchema,
  InviteMembersResponseSchema,
  LeaveGroupRequestSchema,
  LeaveGroupResponseSchema,
  ListGroupsRequestSchema,
  ListGroupsResponseSchema,
  RemoveMemberRequestSchema,
  RemoveMemberResponseSchema,
  UpdateGroupAvatarRequestSchema,
  UpdateGroupAvatarResponseSchema,
  UpdateGroupDescriptionRequestSchema,
  UpdateGroupDescriptionResponseSchema,
  UpdateGroupNameRequestSchema,
  UpdateGroupNameResponseSchema,
} from "../../shared/gen/api/v1/group_pb.js";
import { MemberInfoSchema } from "../../shared/gen/shared/v1/group_pb.js";
import { MessageBodySchema, MessageType, type GroupContent } from "../../shared/gen/shared/v1/message_pb.js";
import { Errors, ParleyError } from "../../shared/errors.js";
import type { Caller } from "../../shared/caller.js";
import type { EngineDeps } from "../deps.js";
import { accountScope, type EventBatch } from "../delivery/fan-out.js";
import { Mailboxes } from "../../shared/mailbox.js";
import { conversationKey } from "../../shared/shards.js";
import { routeToOwner } from "../shard-owners.js";

/** A group's changes go to the node owning its conversation (its id is the conversation id). */
const routeByGroup = routeToOwner("request.groupId", "conversation");
import { tellConversationActors } from "../membership.js";
import { requireCaller, requireUser, rpcAction } from "../rpc-action.js";
import {
  AccountType,
  AgentStatus,
  AgentVisibility,
  GroupStatus,
  MemberRole,
  OwnershipLostError,
  type FencedWrite,
  type GroupRecord,
  type MemberRecord,
  type UserRecord,
} from "../../ports/store/store.js";
import { groupInfoView, userInfoView } from "../views.js";
import type { EngineActions } from "../engine-actions.js";
import type { ActionsOf } from "../../shared/actions.js";

const maxMembers = 200;

export const GroupPolicy = {
  minMembers: 3,
  maxMembers,
  maxAgents: 20,
  /** Ids CreateGroup accepts besides the creator. */
  maxInitialIds: maxMembers - 1,
  listPageDefault: 50,
} as const;

export function groupsService(deps: EngineDeps): ServiceSchema {
  const { store, clock } = deps;
  const groups = store.groups;
  // Every change to one group runs after the previous one has finished, so two invites cannot
  // both pass the size checks, nothing is added to a group being dissolved, and the system
  // messages come in the order of the changes they announce. Across nodes, changes are routed to
  // the node owning the group's conversation, and run only while it holds that shard's lease: a
  // node that lost it (or was never given it) refuses with a retryable UNAVAILABLE. Every write
  // carries the lease's fence, so a node that paused past its lease and still believes it owns the
  // group is refused by the store, nothing written; it forgets the shard and answers as the
  // conversation actor does for a write refused the same way.
  const changes = new Mailboxes();
  const serialised = <T>(groupId: number, work: (write: FencedWrite) => Promise<T>) =>
    changes.run(groupId, async () => {
      const fence = await deps.ownership.fence(conversationKey(BigInt(groupId)));
      return work({ fence }).catch((err: unknown) => {
        if (!(err instanceof OwnershipLostError)) throw err;
        deps.ownership.lost(err.fence);
        throw new ParleyError(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: String(err.fence.shard) }, "another node took this conversation over; try again");
      });
    });
  /**
   * The group's conversation actor checks members and status from memory: it must drop them
   * after a change is written and before the caller hears of it (and before the change's system
   * message is posted).
   */
  const groupChanged = (ctx: Context, groupId: number) => tellConversationActors(ctx, { conversationIds: [String(groupId)] });

  async function requireGroup(groupId: number): Promise<GroupRecord> {
    const group = await groups.getGroup(groupId);
    if (!group) throw new ParleyError(Errors.groupNotFound);
    if (group.status === GroupStatus.dissolved) throw new ParleyError(Errors.groupDissolved);
    return group;
  }

  async function requireOwnedGroup(caller: Caller, groupId: number): Promise<GroupRecord> {
    const group = await requireGroup(groupId);
    if (group.ownerId !== caller.userId) throw new ParleyError(Errors.notGroupOwner);
    return group;
  }

  /** The users among `ids` the actor may bring in: existing, not blocked either way, active agents only. */
  async function eligible(actorId: number, ids: readonly number[]): Promise<UserRecord[]> {
    const unique = [...new Set(ids)].filter((id) => id !== actorId && id > 0);
    const found = await store.users.getUsers(unique);
    const blocked = await store.contacts.blockedAmong(actorId, found.map((u) => u.userId));
    const result: UserRecord[] = [];
    for (const user of found) {
      if (blocked.has(user.userId)) continue;
      if (user.accountType === AccountType.agent) {
        const agent = await store.agents.getAgent(user.userId);
        if (!agent || agent.status !== AgentStatus.active) continue;
        if (agent.visibility === AgentVisibility.private && agent.creatorId !== actorId) continue;
      }
      result.push(user);
    }
    return result;
  }

  /**
   * The GROUP system message announcing a change, added to the change's batch: the change's write
   * records it and the conversation actor posts it once the write committed (EventBatch).
   */
  const announce = (events: EventBatch, groupId: number, event: GroupContent["event"], extraRecipients: number[] = []) =>
    events.systemMessage(BigInt(groupId), create(MessageBodySchema, { type: MessageType.GROUP, content: { case: "group", value: { groupId, event } } }), extraRecipients);

  /** A member as group events name them (their UserInfo travels in the update's users). */
  const memberInfo = (member: Omit<MemberRecord, "groupId">) =>
    create(MemberInfoSchema, { userId: member.userId, role: member.role, joinedAt: BigInt(member.joinedAt) });
  /** The member record of a current member, as group events name them. */
  const currentMember = async (groupId: number, userId: number) => {
    const member = await groups.getMember(groupId, userId);
    return member && memberInfo(member);
  };

  function changeInfo(ctx: Context, caller: Caller, groupId: number, change: Parameters<typeof groups.updateGroup>[1], field: string) {
    return serialised(groupId, async (write) => {
      await requireOwnedGroup(caller, groupId);
      const operator = await currentMember(groupId, caller.userId);
      const events = await deps.fanOuts.batch();
      await groups.updateGroup(groupId, change, () => [announce(events, groupId, { case: "groupInfoChanged", value: { $typeName: "shared.v1.GroupInfoChangedEvent", operator, field } })], write);
      await groupChanged(ctx, groupId);
      await events.deliver(ctx);
      return {};
    });
  }

  return {
    name: "groups",
    actions: {
      createGroup: rpcAction(CreateGroupRequestSchema, CreateGroupResponseSchema, async ({ request, caller, ctx }) => {
        const creator = requireUser(caller);
        if (request.name.trim().length === 0) throw new ParleyError(Errors.invalidArgument, { field: "name" }, "the group name cannot be blank");
        // The id list's bound is checked here rather than in the schema so that an oversized
        // group answers RESOURCE_EXHAUSTED, before any id is looked up.
        if (request.memberIds.length > GroupPolicy.maxInitialIds) throw new ParleyError(Errors.groupTooLarge, { members: String(request.memberIds.length + 1) });
        const members = await eligible(creator.userId, request.memberIds);
        const size = members.length + 1;
        if (size < GroupPolicy.minMembers) throw new ParleyError(Errors.groupTooSmall, { members: String(size) });
        if (size > GroupPolicy.maxMembers) throw new ParleyError(Errors.groupTooLarge, { members: String(size) });
        if (members.filter((m) => m.accountType === AccountType.agent).length > GroupPolicy.maxAgents) throw new ParleyError(Errors.tooManyAgents);
        const now = clock.now();
        const events = await deps.fanOuts.batch();
        const initial = [{ userId: creator.userId, role: MemberRole.owner, joinedAt: now }, ...members.map((m) => ({ userId: m.userId, role: MemberRole.member, joinedAt: now }))];
        // The group's conversation and every member's state in it come with the group (GroupStore.createGroup).
        const group = await groups.createGroup(
          { name: request.name, avatarUrl: request.avatarUrl, description: request.description, ownerId: creator.userId, createdAt: now },
          initial,
          (created) => [announce(events, created.groupId, { case: "memberJoined", value: { $typeName: "shared.v1.MemberJoinedEvent", members: initial.map(memberInfo) } })],
        );
        await events.deliver(ctx);
        return { group: groupInfoView(group) };
      }),
      dissolveGroup: { ...routeByGroup, handler: rpcAction(DissolveGroupRequestSchema, DissolveGroupResponseSchema, ({ request, caller, ctx }) => {
        const owner = requireUser(caller);
        return serialised(request.groupId, async (write) => {
          const group = await requireOwnedGroup(owner, request.groupId);
          const info = groupInfoView({ ...group, status: GroupStatus.dissolved });
          const events = await deps.fanOuts.batch();
          await groups.dissolveGroup(
            group.groupId,
            (removed) => [
              events.add(accountScope(owner.userId), removed, { case: "groupDissolved", value: { $typeName: "shared.v1.GroupDissolvedEvent", operatorId: owner.userId, groupId: group.groupId } }, [], [info]),
            ],
            write,
          );
          await groupChanged(ctx, group.groupId);
          await events.deliver(ctx);
          return {};
        });
      }) },
      updateGroupName: { ...routeByGroup, handler: rpcAction(UpdateGroupNameRequestSchema, UpdateGroupNameResponseSchema, ({ request, caller, ctx }) => {
        if (request.name.trim().length === 0) throw new ParleyError(Errors.invalidArgument, { field: "name" }, "the group name cannot be blank");
        return changeInfo(ctx, requireUser(caller), request.groupId, { name: request.name }, "name");
      }) },
      updateGroupAvatar: { ...routeByGroup, handler: rpcAction(UpdateGroupAvatarRequestSchema, UpdateGroupAvatarResponseSchema, ({ request, caller, ctx }) =>
        changeInfo(ctx, requireUser(caller), request.groupId, { avatarUrl: request.avatarUrl }, "avatar"),
      ) },
      updateGroupDescription: { ...routeByGroup, handler: rpcAction(UpdateGroupDescriptionRequestSchema, UpdateGroupDescriptionResponseSchema, ({ request, caller, ctx }) =>
        changeInfo(ctx, requireUser(caller), request.groupId, { description: request.description }, "description"),
      ) },
      inviteMembers: { ...routeByGroup, handler: rpcAction(InviteMembersRequestSchema, InviteMembersResponseSchema, ({ request, caller, ctx }) => {
        const inviter = requireUser(caller);
        return serialised(request.groupId, async (write) => {
          const group = await requireOwnedGroup(inviter, request.groupId);
          const current = await groups.listMembers(group.groupId);
          const currentIds = new Set(current.map((m) => m.userId));
          const candidates = (await eligible(inviter.userId, request.memberIds)).filter((u) => !currentIds.has(u.userId));
          if (candidates.length === 0) return {};
          if (current.length + candidates.length > GroupPolicy.maxMembers) throw new ParleyError(Errors.groupTooLarge, { members: String(current.length + candidates.length) });
          const currentAgents = (await store.users.getUsers([...currentIds])).filter((u) => u.accountType === AccountType.agent).length;
          if (currentAgents + candidates.filter((u) => u.accountType === AccountType.agent).length > GroupPolicy.maxAgents) throw new ParleyError(Errors.tooManyAgents);
          const now = clock.now();
          const inviterInfo = await currentMember(group.groupId, inviter.userId);
          const events = await deps.fanOuts.batch();
          const invited = candidates.map((u) => ({ userId: u.userId, role: MemberRole.member, joinedAt: now }));
          await groups.addMembers(
            group.groupId,
            invited,
            (addedIds) => {
              const added = new Set(addedIds);
              if (added.size === 0) return [];
              const joined = invited.filter((m) => added.has(m.userId)).map(memberInfo);
              return [announce(events, group.groupId, { case: "memberJoined", value: { $typeName: "shared.v1.MemberJoinedEvent", members: joined, inviter: inviterInfo } })];
            },
            write,
          );
          await groupChanged(ctx, group.groupId);
          await events.deliver(ctx);
          return {};
        });
      }) },
      removeMember: { ...routeByGroup, handler: rpcAction(RemoveMemberRequestSchema, RemoveMemberResponseSchema, ({ request, caller, ctx }) => {
        const owner = requireUser(caller);
        return serialised(request.groupId, async (write) => {
          const group = await requireOwnedGroup(owner, request.groupId);
          if (request.targetId === group.ownerId) throw new ParleyError(Errors.cannotRemoveOwner);
          // The removed member is told by RemovedFromGroupEvent, the entry the spec gives them, recorded
          // with the removal; the announcement goes to those who remain.
          const events = await deps.fanOuts.batch();
          const removedFromGroup = { case: "removedFromGroup", value: { $typeName: "shared.v1.RemovedFromGroupEvent", groupId: group.groupId, operatorId: owner.userId } } as const;
          const memberRemoved = { $typeName: "shared.v1.MemberRemovedEvent", member: await currentMember(group.groupId, request.targetId), operator: await currentMember(group.groupId, owner.userId) } as const;
          const removed = await groups.removeMember(
            group.groupId,
            request.targetId,
            (done) =>
              done
                ? [
                    events.add(accountScope(owner.userId), [request.targetId], removedFromGroup, [], [groupInfoView(group)]),
                    announce(events, group.groupId, { case: "memberRemoved", value: memberRemoved }),
                  ]
                : [],
            write,
          );
          if (!removed) throw new ParleyError(Errors.memberNotFound);
          await groupChanged(ctx, group.groupId);
          await events.deliver(ctx);
          return {};
        });
      }) },
      leaveGroup: { ...routeByGroup, handler: rpcAction(LeaveGroupRequestSchema, LeaveGroupResponseSchema, ({ request, caller, ctx }) => {
        const member = requireCaller(caller);
        return serialised(request.groupId, async (write) => {
          const group = await groups.getGroup(request.groupId);
          if (!group) throw new ParleyError(Errors.groupNotFound);
          if (group.status === GroupStatus.dissolved) throw new ParleyError(Errors.groupDissolved);
          const leaver = await groups.getMember(group.groupId, member.userId);
          if (!leaver) throw new ParleyError(Errors.memberNotFound);
          if (group.ownerId === member.userId) throw new ParleyError(Errors.ownerCannotLeave);
          // The leaver gets the announcement too: it is the only entry on their stream that tells
          // their other devices they left.
          const memberLeft = { $typeName: "shared.v1.MemberLeftEvent", member: memberInfo(leaver) } as const;
          const events = await deps.fanOuts.batch();
          await groups.removeMember(group.groupId, member.userId, (done) => (done ? [announce(events, group.groupId, { case: "memberLeft", value: memberLeft }, [member.userId])] : []), write);
          await groupChanged(ctx, group.groupId);
          await events.deliver(ctx);
          return {};
        });
      }) },
      getGroupInfo: rpcAction(GetGroupInfoRequestSchema, GetGroupInfoResponseSchema, async ({ request, caller }) => {
        const viewer = requireCaller(caller);
        const group = await requireGroup(request.groupId);
        const members = await groups.listMembers(group.groupId);
        if (!members.some((m) => m.userId === viewer.userId)) throw new ParleyError(Errors.notGroupMember);
        const users = await store.users.getUsers(members.map((m) => m.userId));
        return {
          group: groupInfoView(group),
          members: members.map((m) => ({ userId: m.userId, role: m.role, joinedAt: BigInt(m.joinedAt) })),
          users: users.map(userInfoView),
        };
      }),
      listGroups: rpcAction(ListGroupsRequestSchema, ListGroupsResponseSchema, async ({ request, caller }) => {
        const member = requireCaller(caller);
        const limit = request.limit || GroupPolicy.listPageDefault;
        const rows = await groups.listGroupsOf(member.userId, request.afterId ?? 0, limit + 1);
        return { groups: rows.slice(0, limit).map(groupInfoView), hasMore: rows.length > limit };
      }),
    } satisfies ActionsOf<EngineActions, "groups">,
  };
}
