// The storage port: what the engine needs from a database, one interface per aggregate, each in
// its own file (<aggregate>-store.ts); this file composes them into the one Store handle and
// re-exports them, so code that uses the port imports it from here. Adapters: ./sqlite (the
// embedded default) and ./cassandra. Every adapter must pass test/store-conformance.test.ts.
//
// Every method is async so that networked adapters fit the same port. Values are plain data. Ids that are int64 in the protocol are bigint here; user ids are int32
// numbers. Timestamps are Unix milliseconds as numbers.
import type { AgentStore } from "./agent-store.js";
import type { ContactStore } from "./contact-store.js";
import type { ConversationStore } from "./conversation-store.js";
import type { GroupStore } from "./group-store.js";
import type { LeaseStore } from "./lease-store.js";
import type { MediaStore } from "./media-store.js";
import type { MessageStore } from "./message-store.js";
import type { OutboxStore } from "./outbox-store.js";
import type { PushTokenStore } from "./push-token-store.js";
import type { SessionStore } from "./session-store.js";
import type { UpdateStreamStore } from "./update-store.js";
import type { UserStore } from "./user-store.js";
import type { WebhookJobStore } from "./webhook-job-store.js";

export * from "./user-store.js";
export * from "./session-store.js";
export * from "./push-token-store.js";
export * from "./update-store.js";
export * from "./outbox-store.js";
export * from "./agent-store.js";
export * from "./webhook-job-store.js";
export * from "./contact-store.js";
export * from "./group-store.js";
export * from "./conversation-store.js";
export * from "./message-store.js";
export * from "./media-store.js";
export * from "./lease-store.js";

/** Everything the engine persists, behind one handle chosen at start-up. */
export interface Store {
  users: UserStore;
  sessions: SessionStore;
  pushTokens: PushTokenStore;
  updates: UpdateStreamStore;
  agents: AgentStore;
  contacts: ContactStore;
  groups: GroupStore;
  webhookJobs: WebhookJobStore;
  conversations: ConversationStore;
  messages: MessageStore;
  /** Events recorded with the changes they report, until delivered (see FanOutRecord, SystemMessageRecord). */
  outbox: OutboxStore;
  media: MediaStore;
  /** Who owns which shard of keys, and since which epoch (see Fence). */
  leases: LeaseStore;
  close(): Promise<void>;
}
