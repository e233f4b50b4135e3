// The presence registry of one process (embedded mode, and brokers sharing a process in tests).
// Liveness runs on the monotonic clock, like Redis's own expiry: the engine's clock is business time,
// which tests move by hours.
import type { PresenceRegistry } from "./presence-registry.js";

export class MemoryPresenceRegistry implements PresenceRegistry {
  /** userId → (nodeId → connections there). */
  private readonly byUser = new Map<number, Map<string, number>>();
  /** nodeId → users it reported, so dropping a node finds them. */
  private readonly byNode = new Map<string, Set<number>>();
  /** nodeId → clock time its last heartbeat lasts until; a node that never beat counts as alive. */
  private readonly aliveUntil = new Map<string, number>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  async report(nodeId: string, counts: { userId: number; connections: number }[]): Promise<void> {
    for (const { userId, connections } of counts) this.set(nodeId, userId, connections);
  }

  async heartbeat(nodeId: string, ttlMs: number): Promise<boolean> {
    const now = this.now();
    const alive = (this.aliveUntil.get(nodeId) ?? -Infinity) > now;
    // As in Redis, where a lapsed node's entries may already have been cleaned up by a reader.
    if (!alive) await this.dropNode(nodeId);
    this.aliveUntil.set(nodeId, now + ttlMs);
    return alive;
  }

  async dropNode(nodeId: string): Promise<void> {
    for (const userId of this.byNode.get(nodeId) ?? []) this.set(nodeId, userId, 0);
    this.byNode.delete(nodeId);
    this.aliveUntil.delete(nodeId);
  }

  async gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    const now = this.now();
    const found = new Map<number, string[]>();
    for (const userId of userIds) {
      const nodes = this.byUser.get(userId);
      if (!nodes) continue;
      const alive = [...nodes.keys()].filter((nodeId) => (this.aliveUntil.get(nodeId) ?? Infinity) > now);
      if (alive.length > 0) found.set(userId, alive);
    }
    return found;
  }

  async close(): Promise<void> {}

  private set(nodeId: string, userId: number, connections: number): void {
    let nodes = this.byUser.get(userId);
    let users = this.byNode.get(nodeId);
    if (connections > 0) {
      if (!nodes) this.byUser.set(userId, (nodes = new Map()));
      if (!users) this.byNode.set(nodeId, (users = new Set()));
      nodes.set(nodeId, connections);
      users.add(userId);
      return;
    }
    nodes?.delete(nodeId);
    if (nodes?.size === 0) this.byUser.delete(userId);
    users?.delete(userId);
  }
}
