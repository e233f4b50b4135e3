// Agents: their records, delivery mode, webhook and Mini App, and the conditions their changes carry: one aggregate of the storage port (store.ts).
import type { EventsOf } from "./outbox-store.js";
import type { NewUser, UserRecord } from "./user-store.js";

export const AgentStatus = { active: 1, deleted: 2 } as const;

export const AgentVisibility = { public: 1, private: 2 } as const;

export const DeliveryMode = { webhook: 1, websocket: 2 } as const;

export interface MiniAppConfig {
  enabled: boolean;
  url: string;
  allowedOrigins: string[];
  permissions: number;
}

/** A Mini App that was never set up. */
export const noMiniApp: Readonly<MiniAppConfig> = Object.freeze({ enabled: false, url: "", allowedOrigins: [], permissions: 0 });

export interface AgentRecord {
  agentUserId: number;
  creatorId: number;
  status: number;
  visibility: number;
  isSystem: boolean;
  tokenHash: string;
  tokenPrefix: string;
  /** The HMAC key for webhook signatures; kept because the server must sign with it. */
  secretKey: string;
  deliveryMode: number;
  webhookUrl: string;
  ipWhitelist: string[];
  commands: { command: string; description: string }[];
  miniApp: MiniAppConfig;
  createdAt: number;
  updatedAt: number;
}

export interface AgentStore {
  /**
   * Creates the agent's account and agent record together; answers both. A reserved account
   * (the system agent) passes its fixed `userId`; others get the next id.
   */
  createAgent(
    user: Omit<NewUser, "email" | "phone"> & { username: string; signature: string; userId?: number },
    agent: Omit<AgentRecord, "agentUserId">,
  ): Promise<{ user: UserRecord; agent: AgentRecord }>;
  /** The agent record, or undefined. */
  getAgent(agentUserId: number): Promise<AgentRecord | undefined>;
  /** The agent whose current token has this hash, or undefined. */
  findByTokenHash(tokenHash: string): Promise<AgentRecord | undefined>;
  /** DELETED agents still members of a NORMAL group (a deletion cut short), up to `limit`. */
  listDeletedInGroups(limit: number): Promise<number[]>;
  /** The agents a user created, oldest first. */
  listByCreator(creatorId: number): Promise<AgentRecord[]>;
  /** Up to `limit` public, active agents in random order (a new sample each call). */
  sampleFeatured(limit: number): Promise<AgentRecord[]>;
  /**
   * Replaces the given fields of the agent record, with its events, and answers the record written.
   * `updatedAt` moves forward on every write: to the value given, or one past the stored one when
   * that is not later (two writes in one millisecond, a clock that stands still), so it versions the
   * record. With a `condition`, the write applies only while the stored record meets it, checked
   * atomically with the write across every process on the store; otherwise nothing is written, no
   * event is recorded and AgentChangeRefused is thrown with the record as it stands.
   */
  updateAgent(agentUserId: number, change: AgentChange, events?: EventsOf<AgentRecord>, condition?: AgentCondition): Promise<AgentRecord>;
}

/** The fields of an agent record a change may set. */
export type AgentChange = Partial<Omit<AgentRecord, "agentUserId" | "creatorId" | "createdAt">>;

/** What the stored agent record must be for a conditional updateAgent to apply (every field given must hold). */
export interface AgentCondition {
  /** The record is still the version read (compare-and-set). */
  ifUpdatedAt?: number;
  ifStatus?: AgentStatusValue;
}

export type AgentStatusValue = (typeof AgentStatus)[keyof typeof AgentStatus];

/** Whether the stored agent record (undefined: none) meets the condition. */
export function meetsAgentCondition(agent: AgentRecord | undefined, condition: AgentCondition): agent is AgentRecord {
  if (!agent) return false;
  if (condition.ifUpdatedAt !== undefined && agent.updatedAt !== condition.ifUpdatedAt) return false;
  return condition.ifStatus === undefined || agent.status === condition.ifStatus;
}

/** The `updatedAt` a write stores: the one asked for, kept strictly past the stored one. */
export const nextAgentVersion = (stored: number, asked: number | undefined): number => Math.max(asked ?? 0, stored + 1);

/**
 * A conditional updateAgent met a record that no longer meets its condition (another writer, in
 * this process or another, changed or deleted it first): nothing was written. `current` is the
 * record as the refusal saw it (undefined when there is none), for the caller to re-check and retry
 * or to refuse.
 */
export class AgentChangeRefused extends Error {
  constructor(
    readonly agentUserId: number,
    readonly current: AgentRecord | undefined,
  ) {
    super(`agent ${agentUserId}: the record changed before the write (now ${current ? `updatedAt ${current.updatedAt}, status ${current.status}` : "missing"})`);
    this.name = "AgentChangeRefused";
  }
}
