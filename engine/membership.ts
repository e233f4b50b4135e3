// Who takes part in a conversation, and what a user may do in it.
import { Errors, ParleyError } from "../shared/errors.js";
import { privateParticipants } from "../shared/ids.js";
import type { ConversationRecord, Store } from "./store/store.js";

export interface ConversationAccess {
  conversation: ConversationRecord;
  participants: number[];
  /** PRIVATE: the other user; GROUP: the group id. */
  peerId: number;
}

/** The conversation and its participants; NOT_FOUND when it does not exist, PERMISSION_DENIED for outsiders. */
export async function requireParticipant(store: Store, conversationId: bigint, userId: number): Promise<ConversationAccess> {
  const conversation = await store.conversations.getConversation(conversationId);
  if (!conversation) throw new ParleyError(Errors.conversationNotFound);
  const pair = privateParticipants(conversationId);
  if (!pair) throw new ParleyError(Errors.conversationNotFound);
  if (!pair.includes(userId)) throw new ParleyError(Errors.notMember);
  return { conversation, participants: pair, peerId: pair[0] === userId ? pair[1] : pair[0] };
}

/** Whether the user may post: in a PRIVATE conversation both sides must still be contacts and neither blocked. */
export async function requireCanPost(store: Store, access: ConversationAccess, userId: number): Promise<void> {
  if (await store.social.isBlockedEitherWay(userId, access.peerId)) throw new ParleyError(Errors.blocked);
  const [mine, theirs] = await Promise.all([store.social.getContact(userId, access.peerId), store.social.getContact(access.peerId, userId)]);
  if (!mine || !theirs) throw new ParleyError(Errors.contactRemoved);
}
