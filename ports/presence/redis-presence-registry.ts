// The presence registry in Redis, for a cluster: gateways write it, any engine reads it.
//
// Keys, under the configured prefix:
//   presence:user:<userId>         hash   nodeId → connections of the user on that node
//   presence:node:<nodeId>:users   set    the users the node has entries for (so a node can be dropped)
//   presence:node:<nodeId>:alive   string present while the node's heartbeat lasts (PX ttl)
// Every operation is one Lua script, so a node's entries and its user set never disagree.
//
// A node that dies leaves its entries behind; readers ignore them once its liveness key has expired
// and clean them up afterwards (a separate script that checks again that the node is still dead, so
// it never removes a node that came back meanwhile). The node itself, should it come back, finds its
// liveness key gone at its next heartbeat, drops whatever is left and is told to report again.
//
// The scripts reach keys they compute (a node's users' hashes), which a single Redis (or one with
// replicas) allows and Redis Cluster does not: this driver wants one primary.
import type { Redis } from "ioredis";
import { closeRedis, connectRedis, type RedisConnectionOptions } from "../redis-connection.js";
import type { PresenceRegistry } from "./presence-registry.js";

/** Removes every entry of the node ARGV[2] and its user set (prefix ARGV[1]). */
const dropEntries = `
local function dropEntries(prefix, node)
  local users = prefix .. 'node:' .. node .. ':users'
  for _, user in ipairs(redis.call('SMEMBERS', users)) do
    redis.call('HDEL', prefix .. 'user:' .. user, node)
  end
  redis.call('DEL', users)
end`;

/** ARGV: prefix, nodeId, then userId, connections pairs. */
const reportScript = `
local prefix, node = ARGV[1], ARGV[2]
local users = prefix .. 'node:' .. node .. ':users'
for i = 3, #ARGV, 2 do
  local user, connections = ARGV[i], tonumber(ARGV[i + 1])
  local key = prefix .. 'user:' .. user
  if connections > 0 then
    redis.call('HSET', key, node, connections)
    redis.call('SADD', users, user)
  else
    redis.call('HDEL', key, node)
    redis.call('SREM', users, user)
  end
end
return 0`;

/** ARGV: prefix, nodeId, ttl ms. Answers 1 when the node was alive; otherwise drops what it left first. */
const heartbeatScript = `${dropEntries}
local prefix, node = ARGV[1], ARGV[2]
local alive = prefix .. 'node:' .. node .. ':alive'
local was = redis.call('EXISTS', alive)
if was == 0 then dropEntries(prefix, node) end
redis.call('SET', alive, '1', 'PX', ARGV[3])
return was`;

/** ARGV: prefix, nodeId. */
const dropNodeScript = `${dropEntries}
local prefix, node = ARGV[1], ARGV[2]
dropEntries(prefix, node)
redis.call('DEL', prefix .. 'node:' .. node .. ':alive')
return 0`;

/** ARGV: prefix, nodeId. Drops a dead node's leftovers, unless it beat again since a reader saw it dead. */
const reapScript = `${dropEntries}
local prefix, node = ARGV[1], ARGV[2]
if redis.call('EXISTS', prefix .. 'node:' .. node .. ':alive') == 1 then return 0 end
dropEntries(prefix, node)
return 1`;

/**
 * ARGV: prefix, then user ids. Answers {found, dead}: found holds {userId, nodeId...} for each user
 * with a live node; dead the nodes seen without a liveness key.
 */
const gatewaysOfScript = `
local prefix = ARGV[1]
local alive, found, dead = {}, {}, {}
for i = 2, #ARGV do
  local user = ARGV[i]
  local entry
  for _, node in ipairs(redis.call('HKEYS', prefix .. 'user:' .. user)) do
    local live = alive[node]
    if live == nil then
      live = redis.call('EXISTS', prefix .. 'node:' .. node .. ':alive') == 1
      alive[node] = live
      if not live then dead[#dead + 1] = node end
    end
    if live then
      if entry == nil then
        entry = {user}
        found[#found + 1] = entry
      end
      entry[#entry + 1] = node
    end
  end
end
return {found, dead}`;

interface PresenceScripts {
  presenceReport(...args: string[]): Promise<number>;
  presenceHeartbeat(prefix: string, nodeId: string, ttlMs: number): Promise<number>;
  presenceDropNode(prefix: string, nodeId: string): Promise<number>;
  presenceReap(prefix: string, nodeId: string): Promise<number>;
  presenceGatewaysOf(...args: string[]): Promise<[string[][], string[]]>;
}

/** Users per script run: a lookup of any size stays one round trip (one pipeline), and no script holds Redis long. */
const usersPerScript = 1_000;

export interface RedisPresenceRegistryOptions extends RedisConnectionOptions {
  /** Put before every key, e.g. "parley:". */
  prefix: string;
}

export class RedisPresenceRegistry implements PresenceRegistry {
  private readonly redis: Redis & PresenceScripts;
  private readonly keyPrefix: string;
  /** Clean-ups of dead nodes under way, so one node is reaped once at a time and close() can wait for them. */
  private readonly reaping = new Map<string, Promise<void>>();

  /** Takes over `client` (close() closes it). */
  constructor(client: Redis, prefix: string) {
    // Scripts run by digest; ioredis sends one again when a restarted Redis answers NOSCRIPT.
    client.defineCommand("presenceReport", { numberOfKeys: 0, lua: reportScript });
    client.defineCommand("presenceHeartbeat", { numberOfKeys: 0, lua: heartbeatScript });
    client.defineCommand("presenceDropNode", { numberOfKeys: 0, lua: dropNodeScript });
    client.defineCommand("presenceReap", { numberOfKeys: 0, lua: reapScript });
    client.defineCommand("presenceGatewaysOf", { numberOfKeys: 0, lua: gatewaysOfScript });
    this.redis = client as Redis & PresenceScripts;
    this.keyPrefix = `${prefix}presence:`;
  }

  static async open(options: RedisPresenceRegistryOptions): Promise<RedisPresenceRegistry> {
    return new RedisPresenceRegistry(await connectRedis(options), options.prefix);
  }

  async report(nodeId: string, counts: { userId: number; connections: number }[]): Promise<void> {
    if (counts.length === 0) return;
    const pairs = counts.flatMap(({ userId, connections }) => [String(userId), String(connections)]);
    await this.redis.presenceReport(this.keyPrefix, nodeId, ...pairs);
  }

  async heartbeat(nodeId: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.presenceHeartbeat(this.keyPrefix, nodeId, ttlMs)) === 1;
  }

  async dropNode(nodeId: string): Promise<void> {
    await this.redis.presenceDropNode(this.keyPrefix, nodeId);
  }

  async gatewaysOf(userIds: readonly number[]): Promise<Map<number, string[]>> {
    const found = new Map<number, string[]>();
    if (userIds.length === 0) return found;
    const pipeline = this.redis.pipeline() as unknown as PresenceScripts & { exec(): Promise<[Error | null, unknown][] | null> };
    for (let start = 0; start < userIds.length; start += usersPerScript) {
      void pipeline.presenceGatewaysOf(this.keyPrefix, ...userIds.slice(start, start + usersPerScript).map(String));
    }
    const results = (await pipeline.exec()) ?? [];
    const dead = new Set<string>();
    for (const [error, answer] of results) {
      if (error) throw error;
      const [users, deadNodes] = answer as [string[][], string[]];
      for (const [userId, ...nodes] of users) found.set(Number(userId), nodes);
      for (const node of deadNodes) dead.add(node);
    }
    for (const node of dead) this.reap(node);
    return found;
  }

  /** Cleans a dead node's leftovers in the background: answering the lookup does not wait for it. */
  private reap(nodeId: string): void {
    if (this.reaping.has(nodeId)) return;
    const done = this.redis
      .presenceReap(this.keyPrefix, nodeId)
      // A failed clean-up is tried again by the next lookup that meets the node.
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => this.reaping.delete(nodeId));
    this.reaping.set(nodeId, done);
  }

  async close(): Promise<void> {
    await Promise.all(this.reaping.values());
    await closeRedis(this.redis);
  }
}
