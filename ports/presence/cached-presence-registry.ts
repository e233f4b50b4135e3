// An engine's copy of the presence answers it needed, so that a push costs no Redis round trip in
// the steady state: a conversation's messages ask about the same users again and again. The copy
// is kept true by the gateways, which announce every change they report (PresenceEvents.changed)
// before they answer the connection that caused it; a gateway the engine loses sight of, or that
// starts over, has its entries dropped. An answer is kept for `ttlMs` at most, so that a change
// whose announcement was lost (the engine was cut off from the gateway for a moment) costs at
// most that long; a lookup in flight while a change to one of its users is announced is answered
// but not kept, since it may have read the registry before the change.
import type { PresenceRegistry } from "./presence-registry.js";
import { presenceLookups } from "../../shared/metrics.js";

export interface PresenceCachePolicy {
  /** How long an answer is kept without an announcement confirming it. */
  ttlMs: number;
  /** Users kept; the least recently asked about go first. */
  maxUsers: number;
}

export const defaultPresenceCachePolicy: PresenceCachePolicy = { ttlMs: 10_000, maxUsers: 200_000 };

interface CachedUser {
  /** The gateway nodes holding a connection of the user (how many there is the gateways' business). */
  nodes: Set<string>;
  /** performance.now() until which the answer holds. */
  until: number;
}

const hits = presenceLookups.bind({ answered: "cache" });
const misses = presenceLookups.bind({ answered: "registry" });

export class CachedPresenceRegistry implements PresenceRegistry {
  private readonly users = new Map<number, CachedUser>();
  /** Announcements so far: a lookup keeps its answers only for users not announced since it began. */
  private changes = 0;
  /** userId → the number of the last announcement about it, oldest first, while a lookup began before it. */
  private readonly changedAt = new Map<number, number>();
  /** The announcement count at the start of each lookup in flight. */
  private readonly lookupsFrom = new Map<symbol, number>();

  constructor(
    private readonly registry: PresenceRegistry,
    private readonly policy: PresenceCachePolicy = defaultPresenceCachePolicy,
    private readonly now: () => number = () => performance.now(),
  ) {}

  async report(nodeId: string, counts: { userId: number; connections: number }[]): Promise<void> {
    await this.registry.report(nodeId, counts);
    this.changed(nodeId, counts);
  }

  async heartbeat(nodeId: string, ttlMs: number): Promise<boolean> {
    const alive = await this.registry.heartbeat(nodeId, ttlMs);
    if (!alive) this.nodeReset(nodeId);
    return alive;
  }

  async dropNode(nodeId: string): Promise<void> {
    await this.registry.dropNode(nodeId);
    this.nodeReset(nodeId);
  }

  close(): Promise<void> {
    return this.registry.close();
  }

  async gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    const now = this.now();
    const found = new Map<number, string[]>();
    const missing: number[] = [];
    for (const userId of userIds) {
      const cached = this.users.get(userId);
      if (!cached || cached.until <= now) {
        missing.push(userId);
        continue;
      }
      // Least recently asked about last: eviction takes from the front.
      this.users.delete(userId);
      this.users.set(userId, cached);
      if (cached.nodes.size > 0) found.set(userId, [...cached.nodes]);
    }
    hits.inc(userIds.length - missing.length);
    if (missing.length === 0) return found;
    misses.inc(missing.length);
    const lookup = Symbol();
    this.lookupsFrom.set(lookup, this.changes);
    try {
      const answered = await this.registry.gatewaysOf(missing);
      const from = this.lookupsFrom.get(lookup)!;
      const until = this.now() + this.policy.ttlMs;
      for (const userId of missing) {
        const nodes = answered.get(userId) ?? [];
        if (nodes.length > 0) found.set(userId, nodes);
        if ((this.changedAt.get(userId) ?? -1) >= from) continue;
        this.keep(userId, { nodes: new Set(nodes), until });
      }
      return found;
    } finally {
      this.lookupsFrom.delete(lookup);
      this.forgetSettledChanges();
    }
  }

  /** A gateway announced new connection counts (0: none left there). */
  changed(nodeId: string, counts: readonly { userId: number; connections: number }[]): void {
    const number = this.changes++;
    for (const { userId, connections } of counts) {
      if (this.lookupsFrom.size > 0) {
        this.changedAt.delete(userId);
        this.changedAt.set(userId, number);
      }
      const cached = this.users.get(userId);
      // An answer this engine never needed is not made up from one node's counts.
      if (!cached) continue;
      if (connections > 0) cached.nodes.add(nodeId);
      else cached.nodes.delete(nodeId);
    }
  }

  /** The gateway is gone, or starts over: none of its entries hold, and no lookup in flight may keep them. */
  nodeReset(nodeId: string): void {
    this.changes++;
    for (const [userId, cached] of this.users) if (cached.nodes.has(nodeId)) this.users.delete(userId);
    this.forgetLookupsInFlight();
  }

  /** Whatever a lookup in flight read may be out of date: its answers are not kept. */
  private forgetLookupsInFlight(): void {
    for (const lookup of this.lookupsFrom.keys()) this.lookupsFrom.set(lookup, -Infinity);
  }

  private keep(userId: number, user: CachedUser): void {
    this.users.delete(userId);
    this.users.set(userId, user);
    if (this.users.size <= this.policy.maxUsers) return;
    const oldest = this.users.keys().next();
    if (!oldest.done) this.users.delete(oldest.value);
  }

  /** Drops the announcements older than every lookup in flight: none of them can be affected any more. */
  private forgetSettledChanges(): void {
    if (this.lookupsFrom.size === 0) {
      this.changedAt.clear();
      return;
    }
    const oldestLookup = Math.min(...this.lookupsFrom.values());
    for (const [userId, number] of this.changedAt) {
      if (number >= oldestLookup) break;
      this.changedAt.delete(userId);
    }
  }
}
