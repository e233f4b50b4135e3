// IP addresses and address lists (single addresses or CIDR blocks, IPv4 and IPv6): the agent IP
// whitelist, the trusted proxies, and the client address found behind those proxies. An IPv4
// address and its IPv4-mapped IPv6 form (::ffff:a.b.c.d) are the same client everywhere here.
import { BlockList, isIP } from "node:net";

type Family = "ipv4" | "ipv6";

interface AddressRule {
  address: string;
  family: Family;
  /** Absent for a single address. */
  prefix?: number;
}

const mappedIpv4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;
// The same in hex, as URL parsers write it: [::ffff:127.0.0.1] becomes [::ffff:7f00:1].
const mappedIpv4Hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i;

/** The address in its plain form: an IPv4-mapped IPv6 address (dotted or hex) becomes the IPv4 address. */
export function normalizeAddress(address: string): string {
  const trimmed = address.trim();
  const dotted = mappedIpv4.exec(trimmed)?.[1];
  if (dotted) return dotted;
  const hex = mappedIpv4Hex.exec(trimmed);
  if (!hex) return trimmed;
  const [high, low] = [parseInt(hex[1], 16), parseInt(hex[2], 16)];
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
}

function parseRule(raw: string): AddressRule | undefined {
  const text = raw.trim();
  const slash = text.indexOf("/");
  const address = normalizeAddress(slash < 0 ? text : text.slice(0, slash));
  const version = isIP(address);
  // Zone ids (fe80::1%eth0) name an interface of one host; they mean nothing in a shared list.
  if (version === 0 || address.includes("%")) return undefined;
  const family: Family = version === 4 ? "ipv4" : "ipv6";
  if (slash < 0) return { address, family };
  const prefixText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return undefined;
  let prefix = Number(prefixText);
  // A mapped block (::ffff:10.0.0.0/104) is the IPv4 block of the last 32 bits.
  if (family === "ipv4" && isIP(text.slice(0, slash)) === 6) prefix -= 96;
  if (prefix < 0 || prefix > (family === "ipv4" ? 32 : 128)) return undefined;
  return { address, family, prefix };
}

/** Whether the entry is an IP address or a CIDR block. */
export function isAddressRule(entry: string): boolean {
  return parseRule(entry) !== undefined;
}

/** The first entry that is neither an IP address nor a CIDR block, or undefined when all are. */
export function invalidAddressRule(entries: readonly string[]): string | undefined {
  return entries.find((entry) => !isAddressRule(entry));
}

/** A matcher for a list of addresses and CIDR blocks; throws on an entry that is neither. */
export function addressList(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const rule = parseRule(entry);
    if (!rule) throw new Error(`not an IP address or CIDR block: ${JSON.stringify(entry)}`);
    if (rule.prefix === undefined) list.addAddress(rule.address, rule.family);
    else list.addSubnet(rule.address, rule.prefix, rule.family);
  }
  return list;
}

/** Whether the address falls in the list; anything that is not an IP address does not. */
export function listContains(list: BlockList, address: string): boolean {
  const plain = normalizeAddress(address);
  const version = isIP(plain);
  if (version === 0) return false;
  return list.check(plain, version === 4 ? "ipv4" : "ipv6");
}

/**
 * The client's address. The TCP peer is the client unless it is a trusted proxy; then the
 * X-Forwarded-For chain is read from the right (each proxy appends the address it received the
 * request from), skipping trusted proxies, and the first untrusted address is the client. Entries
 * left of it were written by the client itself and prove nothing. When every hop is trusted the
 * leftmost one is the client; a malformed entry ends the walk at the last address known good.
 */
export function resolveClientAddress(peer: string, forwardedFor: string | undefined, trustedProxies: BlockList | undefined): string {
  let client = normalizeAddress(peer);
  if (!trustedProxies || !forwardedFor || !listContains(trustedProxies, client)) return client;
  const hops = forwardedFor.split(",").map((hop) => normalizeAddress(hop)).reverse();
  for (const hop of hops) {
    if (isIP(hop) === 0) return client;
    client = hop;
    if (!listContains(trustedProxies, hop)) return client;
  }
  return client;
}
