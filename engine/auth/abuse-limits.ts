// Limits across identities, against abuse no per-identity limit sees: one address asking codes for
// many emails or phone numbers (email bombing, SMS pumping), many addresses together running up
// the cost of sending codes, and one address guessing secrets across many accounts.
//
// Each limit is a fixed window per subject: the first counted request opens a one-minute window,
// one atomic increment counts every request (refused ones too, which never lengthens the window),
// and the window's remaining time is the retry delay. Over Redis that is INCR, PEXPIRE on
// creation and PTTL in one script, with no node's clock involved, so nodes share one exact count.
import { isIP } from "node:net";
import type { AbuseLimitsConfig } from "../../shared/config.js";
import { Errors, ParleyError, type CatalogueEntry } from "../../shared/errors.js";
import { normalizeAddress } from "../../shared/ip.js";
import type { EphemeralState } from "../../ports/ephemeral/ephemeral-state.js";

const windowMs = 60_000;

export class AbuseLimits {
  constructor(
    private readonly ephemeral: EphemeralState,
    private readonly config: AbuseLimitsConfig,
  ) {}

  /** Counts a code requested from the address; RESOURCE_EXHAUSTED once the address used up its minute. */
  codeRequestedFrom(clientIp: string): Promise<void> {
    return this.count(`abuse:codes:${addressBucket(clientIp)}`, this.config.codesPerAddress, Errors.codeAddressRateLimited);
  }

  /** Counts a code about to be sent; RESOURCE_EXHAUSTED once the server sent its minute's worth. */
  codeAboutToBeSent(): Promise<void> {
    return this.count("abuse:codes-global", this.config.codesGlobal, Errors.codeGlobalRateLimited);
  }

  /** Counts a password or code check from the address; RESOURCE_EXHAUSTED once it used up its minute. */
  secretCheckedFrom(clientIp: string): Promise<void> {
    return this.count(`abuse:sign-in:${addressBucket(clientIp)}`, this.config.signInAttemptsPerAddress, Errors.signInRateLimited);
  }

  private async count(key: string, limit: number, refusal: CatalogueEntry): Promise<void> {
    if (limit === 0) return;
    const window = await this.ephemeral.increment(key, windowMs);
    if (window.count > limit) throw new ParleyError(refusal, { retryAfterSeconds: String(Math.ceil(window.ttlMs / 1000)) });
  }
}

/**
 * The subject of a per-address limit: an IPv4 address, or the /64 network of an IPv6 address.
 * A /64 is what one customer is given, so hopping between its addresses gains nothing.
 */
export function addressBucket(clientIp: string): string {
  const address = normalizeAddress(clientIp).replace(/%.*$/, "");
  const version = isIP(address);
  if (version === 4) return address;
  if (version === 0) return "unknown";
  const [head, tail = ""] = address.split("::");
  const groupsOf = (part: string) => (part === "" ? [] : part.split(":").flatMap((group) => (group.includes(".") ? ["0", "0"] : [group])));
  const [headGroups, tailGroups] = [groupsOf(head), groupsOf(tail)];
  const groups = [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill("0"), ...tailGroups];
  return `${groups
    .slice(0, 4)
    .map((group) => parseInt(group, 16).toString(16))
    .join(":")}::/64`;
}
