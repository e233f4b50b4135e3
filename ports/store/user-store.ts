// Accounts, people and agents alike, with their profiles and passwords: one aggregate of the storage port (store.ts).
import type { EventsOf } from "./outbox-store.js";

export const AccountType = { user: 1, agent: 2 } as const;

export type AccountTypeValue = (typeof AccountType)[keyof typeof AccountType];

export interface UserRecord {
  userId: number;
  accountType: AccountTypeValue;
  username: string;
  /** True once the owner chose a username; the generated default does not count. */
  usernameCustom: boolean;
  phone: string | null;
  email: string | null;
  nickname: string;
  avatarUrl: string;
  signature: string;
  passwordHash: string | null;
  createdAt: number;
}

export interface NewUser {
  accountType: AccountTypeValue;
  phone: string | null;
  email: string | null;
  nickname: string;
  createdAt: number;
}

export interface ProfileChange {
  nickname?: string;
  avatarUrl?: string;
  signature?: string;
}

/** The password hash a conditional password write expects to replace; null for "no password set". */
export interface PasswordCondition {
  ifPasswordHash: string | null;
}

export interface UserStore {
  /** Public, active agents whose nickname, username or description contains the text (case-insensitive). */
  searchAgents(text: string, limit: number): Promise<UserRecord[]>;
  /** Creates an account with a generated default username (`u_<userId>`) and returns it. */
  createUser(user: NewUser): Promise<UserRecord>;
  /** The account with this id, or undefined. */
  getUser(userId: number): Promise<UserRecord | undefined>;
  /** The accounts among these ids that exist; order is not significant. */
  getUsers(userIds: readonly number[]): Promise<UserRecord[]>;
  /** The account whose email (already normalised) matches, or undefined. */
  findByEmail(email: string): Promise<UserRecord | undefined>;
  /** The account whose phone (already normalised) matches, or undefined. */
  findByPhone(phone: string): Promise<UserRecord | undefined>;
  /** The account with this username (exact, lowercase), or undefined. */
  findByUsername(username: string): Promise<UserRecord | undefined>;
  /** Applies the given profile fields (absent fields keep their values) with its events. Returns the new record. */
  updateProfile(userId: number, change: ProfileChange, events?: EventsOf<UserRecord>): Promise<UserRecord>;
  /**
   * Sets a custom username only if none was chosen before and the name is free, with its events.
   * Answers "taken" when another account holds it, "already-set" when this one chose one already.
   */
  setCustomUsername(userId: number, username: string, events?: EventsOf<"ok" | "taken" | "already-set">): Promise<"ok" | "taken" | "already-set">;
  /**
   * Sets the password hash; with `ifPasswordHash`, only while the stored hash is still that one
   * (null: no password set), so of writers that read the same hash exactly one applies. Answers
   * whether it applied (false also when the account does not exist).
   */
  setPasswordHash(userId: number, passwordHash: string, condition?: PasswordCondition): Promise<boolean>;
}
