// The "webhooks" service: checks that a webhook URL works before an agent's configuration points
// at it. The test request is an ordinary signed webhook POST whose body is `{}`, the JSON form of
// an empty api.v1.Update (no snUpdate, no nonSnUpdate): receivers recognise it by that and need
// do nothing but answer 2xx within the time limit.
import type { Context, ServiceSchema } from "moleculer";
import type { VerifyEndpointParams, VerifyEndpointResult } from "../shared/webhook-check.js";
import { WebhookClient, webhookTimeoutMs } from "./delivery.js";
import { webhookUrlProblem } from "./ssrf-guard.js";
import type { Actions, ActionsOf } from "../shared/actions.js";

/** The body of the reachability test request. */
export const verificationBody = "{}";

/** Low-level failure codes in words a developer can act on. */
const reasons: Record<string, string> = {
  EPRIVATE: "the URL resolves to a loopback or private address",
  ENOTFOUND: "the host name does not resolve",
  EAI_AGAIN: "the host name could not be resolved",
  ECONNREFUSED: "the connection was refused",
  ECONNRESET: "the connection was reset",
  EHOSTUNREACH: "the host is unreachable",
  UND_ERR_CONNECT_TIMEOUT: `no connection within ${webhookTimeoutMs / 1000} seconds`,
  UND_ERR_HEADERS_TIMEOUT: `no answer within ${webhookTimeoutMs / 1000} seconds`,
  UND_ERR_BODY_TIMEOUT: `no answer within ${webhookTimeoutMs / 1000} seconds`,
  UND_ERR_SOCKET: "the connection failed",
  DEPTH_ZERO_SELF_SIGNED_CERT: "the TLS certificate is self-signed",
  SELF_SIGNED_CERT_IN_CHAIN: "the TLS certificate chain is not trusted",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "the TLS certificate chain is not trusted",
  CERT_HAS_EXPIRED: "the TLS certificate has expired",
  ERR_TLS_CERT_ALTNAME_INVALID: "the TLS certificate does not match the host name",
};

export interface WebhookServiceOptions {
  allowPrivateNetworks: boolean;
}

export function webhookService(options: WebhookServiceOptions): ServiceSchema {
  let client: WebhookClient | undefined;
  return {
    name: "webhooks",
    created() {
      client = new WebhookClient({ allowPrivateNetworks: options.allowPrivateNetworks });
    },
    actions: {
      verifyEndpoint: {
        async handler(ctx: Context<VerifyEndpointParams>): Promise<VerifyEndpointResult> {
          const { url, secretKey } = ctx.params;
          const problem = webhookUrlProblem(url);
          if (problem) return { ok: false, reason: problem, invalidUrl: true };
          const outcome = await client!.post(url, secretKey, verificationBody);
          if (outcome.ok) return { ok: true };
          return { ok: false, reason: reasons[outcome.reason] ?? outcome.reason };
        },
      },
    } satisfies ActionsOf<Actions, "webhooks">,
    async stopped() {
      await client?.close();
    },
  };
}
