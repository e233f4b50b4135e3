// Shard arithmetic: which shard a key falls in. Every role and every store driver computes it the
// same way, so it depends on nothing but the key.

/**
 * Fixed for the life of a deployment (a key's shard must never change): 1024 spreads keys evenly
 * over tens of nodes and keeps the leases one node renews small enough for one write.
 */
export const shardCount = 1024;

export const conversationKey = (conversationId: bigint) => `c:${conversationId}`;
export const userStreamKey = (userId: number) => `u:${userId}`;

/** The key's shard: FNV-1a (32 bits) of the key, modulo the shard count; stable across processes and versions. */
export function shardOf(key: string, shards: number = shardCount): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % shards;
}
