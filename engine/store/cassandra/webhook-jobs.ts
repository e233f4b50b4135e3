import type { WebhookJobStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function webhookJobStore(_ctx: CassandraContext): WebhookJobStore {
  return unbuilt<WebhookJobStore>("webhookJobStore");
}
