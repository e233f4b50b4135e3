// Groups and their members: one aggregate of the storage port (store.ts).
import type { FencedWrite } from "./lease-store.js";
import type { EventsOf } from "./outbox-store.js";

export const GroupStatus = { normal: 1, dissolved: 2 } as const;

export const MemberRole = { owner: 1, member: 2 } as const;

export interface GroupRecord {
  groupId: number;
  name: string;
  avatarUrl: string;
  description: string;
  ownerId: number;
  status: number;
  createdAt: number;
}

export interface MemberRecord {
  groupId: number;
  userId: number;
  role: number;
  joinedAt: number;
}

/**
 * A group change is its owner's write: the node holding the lease of the group's conversation
 * shard (the group id is its conversation id) passes that fence, and a stale one throws
 * OwnershipLostError with nothing written, events included. Creation takes none: its id is new,
 * so nobody else can write the group yet.
 */
export interface GroupStore {
  /**
   * Creates a NORMAL group with its members (the owner included), its GROUP conversation and their
   * state in it, with its events; answers it.
   */
  createGroup(group: Omit<GroupRecord, "groupId" | "status">, members: readonly Omit<MemberRecord, "groupId">[], events?: EventsOf<GroupRecord>): Promise<GroupRecord>;
  /** The group, or undefined. */
  getGroup(groupId: number): Promise<GroupRecord | undefined>;
  /** Replaces the given descriptive fields, with its events. */
  updateGroup(groupId: number, change: Partial<Pick<GroupRecord, "name" | "avatarUrl" | "description">>, events?: EventsOf<GroupRecord>, write?: FencedWrite): Promise<GroupRecord>;
  /** Marks the group DISSOLVED and removes every member, with its events; answers the removed member ids. */
  dissolveGroup(groupId: number, events?: EventsOf<number[]>, write?: FencedWrite): Promise<number[]>;
  /** The group's members, by join time then id. */
  listMembers(groupId: number): Promise<MemberRecord[]>;
  /** The member record, or undefined. */
  getMember(groupId: number, userId: number): Promise<MemberRecord | undefined>;
  /** Adds members not already present, with their state in the group's conversation and its events; answers the ids actually added. */
  addMembers(groupId: number, members: readonly Omit<MemberRecord, "groupId">[], events?: EventsOf<number[]>, write?: FencedWrite): Promise<number[]>;
  /** Removes a member, with its events; answers whether they were one. */
  removeMember(groupId: number, userId: number, events?: EventsOf<boolean>, write?: FencedWrite): Promise<boolean>;
  /** The NORMAL groups the user belongs to with id > afterId, ascending, at most `limit`. */
  listGroupsOf(userId: number, afterId: number, limit: number): Promise<GroupRecord[]>;
  /** The groups the user belongs to (any status). */
  groupIdsOf(userId: number): Promise<number[]>;
}
