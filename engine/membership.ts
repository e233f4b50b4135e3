// Who takes part in a conversation, and what a user may do in it. A PRIVATE conversation's two
// users are in its id; a GROUP conversation's participants are the group's current members.
import { Errors, ParleyError } from "../shared/errors.js";
import { isGroupConversationId, privateParticipants } from "../shared/ids.js";
import { AgentStatus, ConversationKind, GroupStatus, type ConversationRecord, type GroupRecord, type Store } from "./store/store.js";

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
    const conversation = (await store.conversations.getConversation(conversationId)) ?? {
      conversationId,
      type: ConversationKind.group,
      lastMessageId: 0n,
      lastMessageTime: group.createdAt,
      createdAt: group.createdAt,
    };
    return { conversation, participants: members, peerId: group.groupId, group };
  }
  const conversation = await store.conversations.getConversation(conversationId);
  const pair = privateParticipants(conversationId);
  if (!conversation || !pair) throw new ParleyError(Errors.conversationNotFound);
  if (!pair.includes(userId)) throw new ParleyError(Errors.notMember);
  return { conversation, participants: pair, peerId: pair[0] === userId ? pair[1] : pair[0] };
}

/**
 * Whether the user may post. In a PRIVATE conversation both sides must still be contacts,
 * neither may have blocked the other, and an agent peer must still be active (a deleted agent's
 * conversations are read-only). Group members may always post.
 */
export async function requireCanPost(store: Store, access: ConversationAccess, userId: number): Promise<void> {
  if (access.group) return;
  if (await store.social.isBlockedEitherWay(userId, access.peerId)) throw new ParleyError(Errors.blocked);
  const [mine, theirs, peerAgent] = await Promise.all([
    store.social.getContact(userId, access.peerId),
    store.social.getContact(access.peerId, userId),
    store.agents.getAgent(access.peerId),
  ]);
  if (peerAgent && peerAgent.status !== AgentStatus.active) throw new ParleyError(Errors.conversationReadOnly);
  if (!mine || !theirs) throw new ParleyError(Errors.contactRemoved);
}
