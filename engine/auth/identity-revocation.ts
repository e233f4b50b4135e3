// Makes a credential change take effect on the very next request in every process that serves
// clients: each keeps an identity cache (api/identity-cache.ts), and each is told to forget the
// account's entries, and answers, before the call that made the change is answered.
import type { ServiceBroker } from "moleculer";
import { IdentityCacheBounds, type ForgetIdentitiesParams } from "../../shared/identity.js";
import { callEngine } from "../engine-actions.js";

/**
 * Tells every process running an identity cache to forget the account's entries (all of them, or
 * the user tokens of `deviceIds`), and waits for each to acknowledge. Call it after the change is
 * written. A process that does not answer within the timeout is logged and not waited for: its
 * entries stop serving at most IdentityCacheBounds.maxAgeMs after they were cached.
 */
export async function forgetIdentities(broker: ServiceBroker, params: ForgetIdentitiesParams): Promise<void> {
  const endpoints = broker.registry.actions.get("identityCache.forget")?.endpoints ?? [];
  const nodeIds = endpoints.filter((endpoint) => endpoint.state).map((endpoint) => endpoint.id);
  const answers = await Promise.allSettled(
    nodeIds.map((nodeID) => callEngine(broker, "identityCache.forget", params, { nodeID, timeout: IdentityCacheBounds.forgetTimeoutMs, retries: 0 })),
  );
  answers.forEach((answer, index) => {
    if (answer.status === "rejected") {
      broker.logger.warn(`node ${nodeIds[index]} did not confirm forgetting the identities of account ${params.userId}; they expire within ${IdentityCacheBounds.maxAgeMs} ms`, answer.reason);
    }
  });
}

/** Whether forgetIdentities reaches the identity cache of this node (the engine has discovered it). */
export function reachesIdentityCache(broker: ServiceBroker, nodeID: string): boolean {
  const endpoints = broker.registry.actions.get("identityCache.forget")?.endpoints ?? [];
  return endpoints.some((endpoint) => endpoint.id === nodeID && endpoint.state);
}
