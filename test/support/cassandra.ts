// One real Cassandra for the whole test run, started when a test first needs it (it stays running
// when it was already running before the run), and emptied between tests by truncating what they wrote.
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import cassandra from "cassandra-driver";
import { join } from "node:path";
import { ensureCassandra } from "../../scripts/services/cassandra.js";
import { createHash } from "node:crypto";
import { openCassandraStore, type CassandraStore } from "../../ports/store/cassandra/cassandra-store.js";
import { cassandraMigrations } from "../../ports/store/cassandra/schema.js";

/** Where the test Cassandra keeps its data: outlives runs, so a second run starts warm. */
export const testServicesDir = join(tmpdir(), "parley-test-services");

/**
 * Test keyspaces carry a digest of the schema in their names: the test server outlives runs and
 * branches, and a keyspace made by a build with another schema would not match this one.
 */
export const schemaDigest = createHash("sha256").update(JSON.stringify(cassandraMigrations)).digest("hex").slice(0, 8);

/** The name of a test keyspace for `purpose` (letters and digits), on this build's schema. */
export const testKeyspace = (purpose: string) => `t${schemaDigest}_${purpose}`;

/** The keyspace of the adapter's own tests; PARLEY_TEST_KEYSPACE gives a run its own when several share the server. */
export const adapterTestKeyspace = testKeyspace(process.env.PARLEY_TEST_KEYSPACE ?? "conformance");

let running: Promise<{ contactPoint: string; stop: () => Promise<void> }> | undefined;

export async function testCassandra(): Promise<string> {
  running ??= ensureCassandra(testServicesDir);
  return (await running).contactPoint;
}

/** Stops the test Cassandra if this run started it (the services test needs the ports to itself). */
export async function releaseTestCassandra(): Promise<void> {
  await closeTestKeyspaces();
  const instance = running;
  running = undefined;
  if (instance) await (await instance).stop();
}

// In a mocha run the end of the run stops what the run started. Registered here, by the module the
// tests themselves load: mocha loads test files through require, so a module imported by the
// runner script would be a second instance that never saw the server start.
if (typeof after === "function") after(releaseTestCassandra);

/** Per keyspace, the tables handles wrote since it was last emptied; undefined: never emptied in this run. */
const dirty = new Map<string, Set<string>>();

/**
 * For a test file of the Cassandra drivers, as `before(cassandraStarts)` at its top level: starts
 * the test Cassandra with the time a cold start takes here (30-60 s), before any test's hook, whose
 * 30 s it would otherwise spend; a hook cut off by its timeout goes on in the background and
 * empties the keyspace under the next test.
 */
export async function cassandraStarts(this: Mocha.Context): Promise<void> {
  this.timeout(300_000);
  await testCassandra();
}

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

/**
 * Black-box servers on Cassandra (PARLEY_TEST_STORE=cassandra): each data directory gets a keyspace
 * of a pool. A keyspace is free again once its data directory is gone (tests remove theirs when
 * done) and no server of this process still runs on it (two servers on one keyspace would take
 * each other's shard leases), so a run needs as many keyspaces as servers alive at once, and one
 * more: a freed keyspace is emptied in the background (TRUNCATE of its 48 tables took 1-1.6 s),
 * while the next server starts on a spare emptied before.
 */
const keyspaceOfDataDir = new Map<string, string>();
const serversOn = new Map<string, number>();
/** Freed keyspaces, each with its emptying (settled: ready to take). */
const spares: { keyspace: string; emptied: Promise<void>; ready: boolean }[] = [];
let pooled = 0;
/** Keyspaces in the pool beyond those in use that may be made rather than wait for one being emptied. */
const extraKeyspaces = 1;

/** The harness counts the servers it starts on a data directory, until each stops. */
export function serverStarted(dataDir: string): void {
  serversOn.set(dataDir, (serversOn.get(dataDir) ?? 0) + 1);
}

export function serverStopped(dataDir: string): void {
  const left = (serversOn.get(dataDir) ?? 1) - 1;
  if (left > 0) serversOn.set(dataDir, left);
  else serversOn.delete(dataDir);
}

/** Starts emptying the keyspaces whose data directory is gone and which no server runs on. */
function reclaimFreedKeyspaces(): void {
  for (const [dir, keyspace] of keyspaceOfDataDir) {
    if (existsSync(dir) || serversOn.has(dir)) continue;
    keyspaceOfDataDir.delete(dir);
    const spare = { keyspace, emptied: emptyKeyspace(keyspace), ready: false };
    // A failed emptying surfaces when the keyspace is taken (awaited there), not here.
    spare.emptied.then(
      () => (spare.ready = true),
      () => (spare.ready = true),
    );
    spares.push(spare);
  }
}

/** The harness tells when it removed a data directory, so its keyspace is emptied at once. */
export function dataDirRemoved(): void {
  if (keyspaceOfDataDir.size > 0) reclaimFreedKeyspaces();
}

export async function testKeyspaceFor(dataDir: string): Promise<string> {
  const known = keyspaceOfDataDir.get(dataDir);
  if (known) return known;
  reclaimFreedKeyspaces();
  // No TRUNCATE may run while a server starts: Cassandra holds every Paxos round (a lease, the
  // schema check, the fan-out id slot) until a TRUNCATE of any table ends, measured at 0.5-0.9 s
  // per round behind one keyspace's emptying here, and in CI a server's nodes were still opening
  // their store after 27 s. So a start waits for the emptyings under way, on top of its own.
  await Promise.all(spares.map((spare) => spare.emptied.catch(() => undefined)));
  const readyAt = spares.findIndex((spare) => spare.ready);
  // A new keyspace costs its schema (made by the server) once; waiting costs the rest of an emptying.
  const mayMakeOne = pooled < keyspaceOfDataDir.size + 1 + extraKeyspaces;
  if (readyAt >= 0 || (spares.length > 0 && !mayMakeOne)) {
    const [spare] = spares.splice(Math.max(readyAt, 0), 1);
    keyspaceOfDataDir.set(dataDir, spare.keyspace);
    await spare.emptied;
    return spare.keyspace;
  }
  const keyspace = testKeyspace(`bb${pooled++}`);
  keyspaceOfDataDir.set(dataDir, keyspace);
  await emptyKeyspace(keyspace);
  return keyspace;
}

/**
 * Pool keyspaces given their schema in the run's first hook rather than in a test's: on a machine
 * that never ran this build, a server made its keyspace's schema (55 DDL statements, each awaiting
 * schema agreement) inside a test hook, which took most of its 30 s, and once all of it.
 */
const keyspacesMadeUpFront = 4;

export async function prepareTestKeyspaces(): Promise<void> {
  const contactPoint = await testCassandra();
  for (let i = 0; i < keyspacesMadeUpFront; i++) {
    const store = await openCassandraStore({ contactPoints: [contactPoint], keyspace: testKeyspace(`bb${i}`) });
    await store.close();
  }
}

let admin: Promise<cassandra.Client> | undefined;

/**
 * Truncates every table but the schema's version of a keyspace left by an earlier test or run.
 * Every table, even one that reads empty: a table may hold only tombstones, and a range tombstone
 * written at a stream's epoch timestamp (far in the future) would hide the next server's rows.
 */
async function emptyKeyspace(keyspace: string): Promise<void> {
  admin ??= testCassandra().then(async (contactPoint) => {
    const client = new cassandra.Client({ contactPoints: [contactPoint], localDataCenter: "datacenter1" });
    await client.connect();
    return client;
  });
  const client = await admin;
  const tables = await client.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", [keyspace]);
  await Promise.all(tables.rows.filter((row) => row.table_name !== "schema_version").map((row) => client.execute(`TRUNCATE ${keyspace}.${row.table_name as string}`)));
}

/** Closes the pool's session (the run's end). */
export async function closeTestKeyspaces(): Promise<void> {
  const client = admin;
  admin = undefined;
  if (client) await (await client).shutdown();
}
