// `npm run store -- migrate` applies the Cassandra store's schema migrations to the keyspace the
// CASSANDRA_* settings name (shared/config.ts, as the server reads them), creating it when missing;
// `npm run store -- status` prints the keyspace's schema version beside this build's.
// Exit codes: 0 done, 1 failed, 2 bad usage or settings (nothing was attempted).
import { Cql } from "../ports/store/cassandra/cql.js";
import { appliedVersions, cassandraMigrations, cassandraSchemaVersion, migrateKeyspace } from "../ports/store/cassandra/schema.js";
import { cassandraSettingsFromEnv } from "../shared/config.js";

const usage = "usage: npm run store -- migrate | status   (settings: CASSANDRA_CONTACT_POINTS, CASSANDRA_KEYSPACE, CASSANDRA_LOCAL_DC, CASSANDRA_REPLICATION)";

class UsageError extends Error {}

const commands: Record<string, (cql: Cql, replication: string | undefined) => Promise<string>> = {
  async migrate(cql, replication) {
    const applied = await migrateKeyspace(cql, { replication });
    return applied.length > 0 ? `keyspace ${cql.keyspace}: applied versions ${applied.join(", ")}` : `keyspace ${cql.keyspace}: up to date at version ${cassandraSchemaVersion}`;
  },
  async status(cql) {
    const applied = await appliedVersions(cql);
    const build = `this build's is ${cassandraSchemaVersion}`;
    if (applied === undefined || applied.length === 0) return `keyspace ${cql.keyspace}: no schema (run npm run store -- migrate); ${build}`;
    const version = Math.max(...applied);
    const lacking = cassandraMigrations.map((migration) => migration.version).filter((known) => !applied.includes(known));
    const state = version > cassandraSchemaVersion ? "newer than this build" : lacking.length > 0 ? `lacks ${lacking.join(", ")}: run npm run store -- migrate` : "up to date";
    return `keyspace ${cql.keyspace}: schema version ${version} (${state}); ${build}`;
  },
};

async function main(argv: string[]): Promise<void> {
  const [name, ...extra] = argv;
  const command = name === undefined ? undefined : commands[name];
  if (!command || extra.length > 0) throw new UsageError(name === undefined ? usage : `unknown arguments ${JSON.stringify(argv.join(" "))}; ${usage}`);
  const { settings, problems } = cassandraSettingsFromEnv(process.env);
  if (problems.length > 0) throw new UsageError(problems.join("\n"));
  const cql = await Cql.connect(settings).catch((err: unknown) => {
    // The driver's own message spreads each host's stack over many lines.
    const reasons = Object.entries((err as { innerErrors?: Record<string, Error> }).innerErrors ?? {}).map(([host, inner]) => `${host}: ${inner.message}`);
    throw new Error(`cannot connect to Cassandra at ${settings.contactPoints.join(", ")}${reasons.length > 0 ? ` (${reasons.join("; ")})` : `: ${(err as Error).message}`}`);
  });
  try {
    console.log(await command(cql, settings.replication));
  } finally {
    await cql.close();
  }
}

try {
  await main(process.argv.slice(2));
} catch (error) {
  for (const line of (error as Error).message.split("\n")) console.error(`store: ${line}`);
  process.exitCode = error instanceof UsageError ? 2 : 1;
}
