// Id arithmetic fixed by the protocol. A PRIVATE conversation id packs both user ids:
// (larger << 32) | smaller, so either user computes it without a lookup. A GROUP conversation id
// is the group id itself, which fits in 31 bits: the two kinds never collide.

export function privateConversationId(a: number, b: number): bigint {
  const [larger, smaller] = a > b ? [a, b] : [b, a];
  return (BigInt(larger) << 32n) | BigInt(smaller);
}

/** The two users of a PRIVATE conversation id, or undefined when the id is not a PRIVATE one. */
export function privateParticipants(conversationId: bigint): [number, number] | undefined {
  const larger = conversationId >> 32n;
  const smaller = conversationId & 0xffffffffn;
  if (larger <= 0n || larger > 0x7fffffffn || smaller <= 0n || smaller >= larger) return undefined;
  return [Number(larger), Number(smaller)];
}

export function isGroupConversationId(conversationId: bigint): boolean {
  return conversationId > 0n && conversationId <= 0x7fffffffn;
}
