// Where the Cassandra store is and how it is opened, from the environment: read the same way by the
// `npm run store` command and the server, and checked before anything connects.
import type { CassandraStoreSettings } from "./cassandra-store.js";
import { keyspaceNameProblem } from "./schema.js";

export const defaultContactPoint = "127.0.0.1:9042";
export const defaultKeyspace = "parley";
export const defaultLocalDataCenter = "datacenter1";

export interface CassandraSettingsReading {
  settings: CassandraStoreSettings;
  /** One line per bad value (empty when every value is usable); the settings then must not be used. */
  problems: string[];
}

// host:port, the host a name or IPv4 address, or an IPv6 address in brackets.
const contactPointPattern = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

/**
 * CASSANDRA_CONTACT_POINTS (comma-separated host:port), CASSANDRA_KEYSPACE, CASSANDRA_LOCAL_DC,
 * CASSANDRA_REPLICATION (a CQL map literal for a keyspace the migration creates) and
 * CASSANDRA_MIGRATE (true: apply missing migrations on open; false: refuse a keyspace behind).
 */
export function cassandraSettingsFromEnv(env: NodeJS.ProcessEnv): CassandraSettingsReading {
  const problems: string[] = [];
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === "" ? undefined : raw;
  };

  const contactPoints = (value("CASSANDRA_CONTACT_POINTS") ?? defaultContactPoint).split(",").map((point) => point.trim());
  for (const point of contactPoints) {
    const port = contactPointPattern.exec(point)?.[1];
    if (port === undefined) problems.push(`CASSANDRA_CONTACT_POINTS: ${JSON.stringify(point)} is not host:port (e.g. 127.0.0.1:9042, [::1]:9042)`);
    else if (Number(port) < 1 || Number(port) > 65535) problems.push(`CASSANDRA_CONTACT_POINTS: port ${port} of ${JSON.stringify(point)} is not 1..65535`);
  }

  const keyspace = value("CASSANDRA_KEYSPACE") ?? defaultKeyspace;
  const keyspaceProblem = keyspaceNameProblem(keyspace);
  if (keyspaceProblem) problems.push(`CASSANDRA_KEYSPACE: ${keyspaceProblem}`);

  const localDataCenter = value("CASSANDRA_LOCAL_DC") ?? defaultLocalDataCenter;

  const replication = value("CASSANDRA_REPLICATION");
  if (replication !== undefined && !/^\{.*'class'\s*:.*\}$/s.test(replication)) {
    problems.push(`CASSANDRA_REPLICATION: ${JSON.stringify(replication)} is not a CQL replication map, e.g. {'class': 'NetworkTopologyStrategy', 'datacenter1': 3}`);
  }

  const migrateRaw = value("CASSANDRA_MIGRATE") ?? "true";
  if (migrateRaw !== "true" && migrateRaw !== "false") problems.push(`CASSANDRA_MIGRATE: must be true or false; got ${JSON.stringify(migrateRaw)}`);

  return { settings: { contactPoints, keyspace, localDataCenter, replication, migrate: migrateRaw !== "false" }, problems };
}
