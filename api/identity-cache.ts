// The caller's identity without a database read per request. Each process that serves RPCs or
// sockets keeps, per bearer token, what authentication decides with: whom the token names, until
// when, and for an agent its status and IP whitelist, so the whitelist is checked here too. A
// miss asks the engine once (shared/identity.ts); a hit asks nobody.
//
// Entries are keyed by the SHA-256 of the token: a raw token lives only as long as the request
// that carries it. At most `maxEntries` are kept (the least recently used go first) and none
// serves longer than `maxAgeMs` after it was cached.
//
// Revocation: the engine writes the change, then calls `identityCache.forget` on every process
// running this service and waits for their answers before it answers the call that made the
// change. A fill that was under way while its account was forgotten may carry facts read before
// the change: it is not cached, and the engine is asked once more.
import { createHash } from "node:crypto";
import type { BlockList } from "node:net";
import type { Context, ServiceBroker, ServiceSchema } from "moleculer";
import type { Caller } from "../shared/caller.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { IdentityCacheBounds, type ForgetIdentitiesParams, type TokenIdentity } from "../shared/identity.js";
import { addressList, isAddressRule, listContains } from "../shared/ip.js";
import { callAction, type Actions, type ActionsOf } from "../shared/actions.js";

export interface IdentityCachePolicy {
  /** Tokens remembered at once; about 0.4 KB each (50,000 ≈ 18 MB, measured). */
  maxEntries: number;
  /** The longest an entry serves before the engine is asked again. */
  maxAgeMs: number;
}

export const defaultIdentityCachePolicy: IdentityCachePolicy = { maxEntries: 50_000, maxAgeMs: IdentityCacheBounds.maxAgeMs };

interface Entry {
  key: string;
  /** Frozen: handed to every request the token makes, and passed by reference to local actions. */
  caller: Readonly<Caller>;
  expiresAt: number;
  active: boolean;
  /** An agent's whitelist, parsed once; undefined allows every address. */
  allowed: BlockList | undefined;
  cachedAt: number;
}

function cacheKey(token: string): string {
  return createHash("sha256").update(token).digest("base64");
}

export class IdentityCache {
  /** In order of use, least recent first: eviction takes from the front. */
  private readonly entries = new Map<string, Entry>();
  private readonly keysByUser = new Map<number, Set<string>>();
  /** Fills under way by key, so a burst of requests with one uncached token asks the engine once. */
  private readonly pending = new Map<string, Promise<Entry>>();

  // A fill that began before a forget of its account must not be cached. Each forget takes the
  // next number; a fill notes the number current when it began, and each account the number of
  // its latest forget. Those are kept only while a fill older than them is under way.
  private forgets = 0;
  private nextFillId = 0;
  /** Fills under way: id → forgets when it began. Ids grow, so the first is the oldest. */
  private readonly fillsUnderWay = new Map<number, number>();
  /** userId → its latest forget's number, oldest first. */
  private readonly forgottenAt = new Map<number, number>();

  constructor(
    private readonly fetch: (token: string) => Promise<TokenIdentity>,
    private readonly clock: { now(): number },
    private readonly policy: IdentityCachePolicy = defaultIdentityCachePolicy,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /**
   * The caller the token names, if it may make a request from `clientIp` now; otherwise throws
   * the catalogue's answer (UNAUTHENTICATED, TOKEN_EXPIRED, IP_NOT_ALLOWED, AGENT_NOT_ACTIVE).
   */
  async resolve(token: string, clientIp: string): Promise<Caller> {
    const key = cacheKey(token);
    const entry = this.lookup(key) ?? (await this.fill(key, token));
    return this.admit(entry, clientIp);
  }

  /** Forgets the account's cached tokens: those of these device sessions, or all of them. */
  forget(userId: number, deviceIds?: readonly string[]): void {
    this.forgets += 1;
    if (this.fillsUnderWay.size > 0) {
      this.forgottenAt.delete(userId);
      this.forgottenAt.set(userId, this.forgets);
    }
    const keys = this.keysByUser.get(userId);
    if (!keys) return;
    for (const key of [...keys]) {
      const { caller } = this.entries.get(key)!;
      if (!deviceIds || (caller.kind === "user" && deviceIds.includes(caller.deviceId))) this.remove(key);
    }
  }

  // Whitelist first: from an address the agent never allowed, a token says nothing about the
  // agent, its state included (the engine's order before this cache, kept).
  private admit(entry: Entry, clientIp: string): Caller {
    const { caller } = entry;
    if (caller.kind === "user") {
      if (this.clock.now() >= entry.expiresAt) throw new ParleyError(Errors.tokenExpired);
      return caller;
    }
    if (entry.allowed && !listContains(entry.allowed, clientIp)) throw new ParleyError(Errors.ipNotAllowed, { clientIp });
    if (!entry.active) throw new ParleyError(Errors.agentNotActive);
    return caller;
  }

  private lookup(key: string): Entry | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (this.clock.now() - entry.cachedAt >= this.policy.maxAgeMs) {
      this.remove(key);
      return undefined;
    }
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry;
  }

  private fill(key: string, token: string): Promise<Entry> {
    let pending = this.pending.get(key);
    if (!pending) {
      pending = this.ask(key, token).finally(() => this.pending.delete(key));
      this.pending.set(key, pending);
    }
    return pending;
  }

  /**
   * Asks the engine. An answer that raced a forget of its account is asked for again, once: the
   * second question left after the forget arrived, so after the change was written. Only an
   * answer that raced nothing, and that the engine could make this process forget, is cached.
   */
  private async ask(key: string, token: string): Promise<Entry> {
    for (let attempt = 1; ; attempt += 1) {
      const fillId = (this.nextFillId += 1);
      const began = this.forgets;
      this.fillsUnderWay.set(fillId, began);
      let facts: TokenIdentity;
      try {
        facts = await this.fetch(token);
      } catch (err) {
        this.fillDone(fillId);
        throw err;
      }
      const raced = (this.forgottenAt.get(facts.userId) ?? 0) > began;
      this.fillDone(fillId);
      if (raced && attempt === 1) continue;
      const entry = this.entryOf(key, facts);
      if (!raced && facts.cacheable) this.insert(entry);
      return entry;
    }
  }

  private fillDone(fillId: number): void {
    this.fillsUnderWay.delete(fillId);
    const oldest = this.fillsUnderWay.values().next();
    if (oldest.done) {
      this.forgottenAt.clear();
      return;
    }
    for (const [userId, at] of this.forgottenAt) {
      if (at > oldest.value) break;
      this.forgottenAt.delete(userId);
    }
  }

  private entryOf(key: string, facts: TokenIdentity): Entry {
    const caller: Caller = Object.freeze({ kind: facts.kind, userId: facts.userId, deviceId: facts.deviceId });
    // A stored entry that is no address rule (written before validation existed) matches nothing.
    const rules = facts.ipWhitelist.filter(isAddressRule);
    return {
      key,
      caller,
      expiresAt: facts.kind === "user" ? facts.expiresAt : Infinity,
      active: facts.active,
      allowed: facts.ipWhitelist.length > 0 ? addressList(rules) : undefined,
      cachedAt: this.clock.now(),
    };
  }

  private insert(entry: Entry): void {
    this.remove(entry.key);
    this.entries.set(entry.key, entry);
    const userId = entry.caller.userId;
    let keys = this.keysByUser.get(userId);
    if (!keys) this.keysByUser.set(userId, (keys = new Set()));
    keys.add(entry.key);
    while (this.entries.size > this.policy.maxEntries) this.remove(this.entries.keys().next().value!);
  }

  private remove(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    const keys = this.keysByUser.get(entry.caller.userId);
    keys?.delete(key);
    if (keys?.size === 0) this.keysByUser.delete(entry.caller.userId);
  }
}

const cachesByBroker = new WeakMap<ServiceBroker, IdentityCache>();

/**
 * The identity cache of the process this broker serves clients in. The RPC route tables are
 * built from the broker alone, so the cache is found through it (identityCacheService puts it there).
 */
export function identityCacheOf(broker: ServiceBroker): IdentityCache {
  const cache = cachesByBroker.get(broker);
  if (!cache) throw new Error("no identityCache service runs on this broker");
  return cache;
}

/** The process's identity cache, and the action through which the engine makes it forget. */
export function identityCacheService(clock: { now(): number }, policy: Partial<IdentityCachePolicy> = {}): ServiceSchema {
  let cache: IdentityCache;
  return {
    name: "identityCache",
    created() {
      const broker = this.broker;
      const fetch = (token: string) => callAction(broker, "auth.resolveToken", { token });
      cache = new IdentityCache(fetch, clock, { ...defaultIdentityCachePolicy, ...policy });
      cachesByBroker.set(broker, cache);
    },
    actions: {
      forget: {
        handler(ctx: Context<ForgetIdentitiesParams>) {
          cache.forget(ctx.params.userId, ctx.params.deviceIds);
        },
      },
    } satisfies ActionsOf<Actions, "identityCache">,
  };
}
