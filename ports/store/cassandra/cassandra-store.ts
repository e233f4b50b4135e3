// The Cassandra/ScyllaDB adapter of the store port: the card's database (DATA-MODEL.md).
import type { Store } from "../store.js";
import { agentStore } from "./agents.js";
import { cassandraContext } from "./context.js";
import { conversationStore } from "./conversations.js";
import { Cql, type CqlSettings } from "./cql.js";
import { groupStore } from "./groups.js";
import { leaseStore } from "./leases.js";
import { mediaStore } from "./media.js";
import { messageStore } from "./messages.js";
import { outboxStore } from "./outbox.js";
import { migrateKeyspace } from "./schema.js";
import { pushTokenStore, sessionStore } from "./sessions.js";
import { contactStore } from "./contacts.js";
import { updateLogStore } from "./updates.js";
import { userStore } from "./users.js";
import { webhookJobStore } from "./webhook-jobs.js";

export interface CassandraStoreSettings extends CqlSettings {
  /** Apply missing schema migrations on open (CASSANDRA_MIGRATE); otherwise a keyspace behind this build is refused. */
  migrate?: boolean;
  /** Replication of a keyspace the migration creates (CQL map literal). */
  replication?: string;
}

/** The store as the adapter opened it, with the session (for tests that empty what they wrote). */
export type CassandraStore = Store & { readonly cql: Cql };

export async function openCassandraStore(settings: CassandraStoreSettings): Promise<CassandraStore> {
  const cql = await Cql.connect(settings);
  try {
    await migrateKeyspace(cql, { replication: settings.replication, migrateIfBehind: settings.migrate ?? true });
  } catch (err) {
    await cql.close();
    throw err;
  }
  const ctx = cassandraContext(cql);
  return {
    cql,
    users: userStore(ctx),
    sessions: sessionStore(ctx),
    pushTokens: pushTokenStore(ctx),
    updates: updateLogStore(ctx),
    agents: agentStore(ctx),
    contacts: contactStore(ctx),
    groups: groupStore(ctx),
    webhookJobs: webhookJobStore(ctx),
    conversations: conversationStore(ctx),
    messages: messageStore(ctx),
    outbox: outboxStore(ctx),
    media: mediaStore(ctx),
    leases: leaseStore(ctx),
    async close() {
      try {
        await ctx.close();
      } finally {
        await cql.close();
      }
    },
  };
}
