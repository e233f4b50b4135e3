// One real Cassandra for the whole test run, started when a test first needs it (it stays running
// when it was already running before the run), and emptied between tests by truncating what they wrote.
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureCassandra } from "../../scripts/services/cassandra.js";
import { openCassandraStore, type CassandraStore } from "../../engine/store/cassandra/cassandra-store.js";

/** Where the test Cassandra keeps its data: outlives runs, so a second run starts warm. */
export const testServicesDir = join(tmpdir(), "parley-test-services");

let running: Promise<{ contactPoint: string; stop: () => Promise<void> }> | undefined;

export async function testCassandra(): Promise<string> {
  running ??= ensureCassandra(testServicesDir);
  return (await running).contactPoint;
}

/** Stops the test Cassandra if this run started it (the services test needs the ports to itself). */
export async function releaseTestCassandra(): Promise<void> {
  const instance = running;
  running = undefined;
  if (instance) await (await instance).stop();
}

/** Per keyspace, the tables handles wrote since it was last emptied; undefined: never emptied in this run. */
const dirty = new Map<string, Set<string>>();

/**
 * A store on the keyspace. `fresh` empties what earlier handles of this run wrote first (every
 * table the first time: an earlier run may have left data); otherwise it shares their data.
 */
export async function openTestCassandraStore(keyspace: string, options: { fresh: boolean }): Promise<CassandraStore> {
  const store = await openCassandraStore({ contactPoints: [await testCassandra()], keyspace });
  if (options.fresh) {
    const tables = dirty.get(keyspace) ?? (await allTables(store, keyspace));
    await Promise.all([...tables].map((table) => store.cql.client.execute(`TRUNCATE ${keyspace}.${table}`)));
  }
  // Every handle records into the keyspace's one set.
  const tables = (options.fresh ? undefined : dirty.get(keyspace)) ?? new Set<string>();
  dirty.set(keyspace, tables);
  (store.cql as { writtenTables: Set<string> }).writtenTables = tables;
  return store;
}

async function allTables(store: CassandraStore, keyspace: string): Promise<Set<string>> {
  const rows = await store.cql.client.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", [keyspace]);
  return new Set(rows.rows.map((row) => row.table_name as string).filter((table) => table !== "schema_version"));
}
