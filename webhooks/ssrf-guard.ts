// Webhook targets must not reach into the platform's own network: loopback, private, link-local,
// unique-local, CGNAT and unspecified addresses are refused unless the operator allowed them
// (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true). The check runs on the resolved addresses at connect
// time, so a DNS answer that changes after configuration (rebinding) is caught as well.
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";
import { httpsUrlProblem } from "../shared/https-url.js";
import { normalizeAddress } from "../shared/ip.js";

const privateRanges = new BlockList();
for (const [network, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  privateRanges.addSubnet(network, prefix, "ipv4");
}
for (const [network, prefix] of [
  // The unspecified and loopback addresses, and IPv4-compatible addresses (::a.b.c.d).
  ["::", 96],
  ["::1", 128],
  // NAT64 and 6to4 embed an IPv4 address, private ones included.
  ["64:ff9b::", 96],
  ["64:ff9b:1::", 48],
  ["2002::", 16],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  privateRanges.addSubnet(network, prefix, "ipv6");
}

export function isPrivateAddress(address: string): boolean {
  const plain = normalizeAddress(address);
  const family = isIP(plain);
  if (family === 0) return true;
  return privateRanges.check(plain, family === 4 ? "ipv4" : "ipv6");
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** A dns.lookup for outgoing webhook connections that refuses private targets. */
export function guardedLookup(allowPrivate: boolean) {
  return (hostname: string, options: object, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const list = addresses as LookupAddress[];
      const refused = !allowPrivate && list.some((a) => isPrivateAddress(a.address));
      if (refused || list.length === 0) {
        const error: NodeJS.ErrnoException = new Error(`webhook target ${hostname} resolves to a private address`);
        error.code = "EPRIVATE";
        return callback(error, []);
      }
      if ((options as { all?: boolean }).all) return callback(null, list);
      callback(null, list[0].address, list[0].family);
    });
  };
}

/** Whether the URL's host is an IP address (not a name) in a private range. */
export function privateLiteralHost(raw: string): boolean {
  let hostname: string;
  try {
    hostname = new URL(raw).hostname;
  } catch {
    return false;
  }
  const address = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  return isIP(address) !== 0 && isPrivateAddress(address);
}

/** Checks that a webhook URL is an absolute HTTPS URL; answers the reason when it is not. */
export function webhookUrlProblem(raw: string): string | undefined {
  return httpsUrlProblem(raw, "webhook URL");
}
