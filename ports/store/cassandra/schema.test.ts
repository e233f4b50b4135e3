import { expect } from "chai";
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { before, describe, it } from "mocha";
import { testCassandra } from "../../../test/support/cassandra.js";
import { Cql } from "./cql.js";
import { appliedVersions, cassandraMigrations, cassandraSchemaVersion, migrateKeyspace } from "./schema.js";
import { cassandraSettingsFromEnv } from "../../../shared/config.js";

const allVersions = cassandraMigrations.map((migration) => migration.version);

// Each fresh keyspace costs seconds (every table of the store is created), so there are three.
const keyspaces = { reused: "h_media_mig_1", concurrent: "h_media_mig_2", command: "h_media_mig_3", absent: "h_media_mig_absent" };
const root = resolve(import.meta.dirname, "../../..");

describe("Cassandra schema migrations", function () {
  this.timeout(300_000);
  let contactPoint: string;
  let admin: Cql;
  const opened: Cql[] = [];

  const connect = async (keyspace: string) => {
    const cql = await Cql.connect({ contactPoints: [contactPoint], keyspace });
    opened.push(cql);
    return cql;
  };
  const refusal = async (work: Promise<unknown>) => {
    try {
      await work;
    } catch (err) {
      return (err as Error).message;
    }
    throw new Error("expected a refusal");
  };
  const keyspaceExists = async (keyspace: string) =>
    (await admin.rows("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", [keyspace])).length > 0;
  const dropAll = () => Promise.all(Object.values(keyspaces).map((keyspace) => admin.client.execute(`DROP KEYSPACE IF EXISTS ${keyspace}`)));

  before(async () => {
    contactPoint = await testCassandra();
    admin = await connect("system");
    // A run that stopped early leaves its keyspaces behind.
    await dropAll();
  });

  after(async () => {
    await dropAll();
    for (const cql of opened) await cql.close();
  });

  describe("migrateKeyspace", () => {
    before(async () => {
      expect(await migrateKeyspace(await connect(keyspaces.reused))).to.deep.equal(allVersions);
    });

    it("applies nothing the second time", async () => {
      const again = await connect(keyspaces.reused);
      expect(await migrateKeyspace(again)).to.deep.equal([]);
      expect(await appliedVersions(again)).to.deep.equal(allVersions);
      // The session uses the keyspace afterwards.
      expect(await again.rows("SELECT shard FROM leases WHERE shard = 0")).to.deep.equal([]);
    });

    it("refuses a keyspace a newer build migrated, with or without migrating", async () => {
      const newer = cassandraSchemaVersion + 1;
      await admin.write(`INSERT INTO ${keyspaces.reused}.schema_version (component, version, applied_at) VALUES ('store', ?, 0)`, [newer]);
      try {
        for (const migrateIfBehind of [true, false]) {
          const message = await refusal(migrateKeyspace(await connect(keyspaces.reused), { migrateIfBehind }));
          expect(message).to.equal(
            `the Cassandra keyspace ${keyspaces.reused} has schema version ${newer}, newer than this build's ${cassandraSchemaVersion}: refusing it (run a build that knows it)`,
          );
        }
      } finally {
        await admin.write(`DELETE FROM ${keyspaces.reused}.schema_version WHERE component = 'store' AND version = ?`, [newer]);
      }
    });

    it("with migrateIfBehind false, refuses a keyspace behind this build and applies nothing", async () => {
      await admin.write(`DELETE FROM ${keyspaces.reused}.schema_version WHERE component = 'store' AND version = ?`, [cassandraSchemaVersion]);
      const message = await refusal(migrateKeyspace(await connect(keyspaces.reused), { migrateIfBehind: false }));
      expect(message).to.equal(
        `the Cassandra keyspace ${keyspaces.reused} lacks schema versions ${cassandraSchemaVersion} of this build: run \`npm run store -- migrate\` first`,
      );
      expect(await appliedVersions(await connect(keyspaces.reused))).to.deep.equal(allVersions.slice(0, -1));
      // Migrating then completes it again (every statement is idempotent).
      expect(await migrateKeyspace(await connect(keyspaces.reused))).to.deep.equal([cassandraSchemaVersion]);
    });

    it("with migrateIfBehind false, refuses a missing keyspace without creating it", async () => {
      const message = await refusal(migrateKeyspace(await connect(keyspaces.absent), { migrateIfBehind: false }));
      expect(message).to.equal(`the Cassandra keyspace ${keyspaces.absent} does not exist: run \`npm run store -- migrate\` first`);
      expect(await keyspaceExists(keyspaces.absent)).to.equal(false);
    });

    it("lets one of two runners on a new keyspace apply each version, and both succeed", async () => {
      const [first, second] = await Promise.all([connect(keyspaces.concurrent), connect(keyspaces.concurrent)]);
      const answers = await Promise.all([migrateKeyspace(first), migrateKeyspace(second)]);
      expect(answers.flat().sort((a, b) => a - b)).to.deep.equal(allVersions);
      expect(await appliedVersions(first)).to.deep.equal(allVersions);
      // The lock was released.
      expect(await first.rows("SELECT holder FROM schema_version WHERE component = 'lock'", [], { serial: true })).to.deep.equal([]);
    });
  });

  describe("npm run store", () => {
    const run = (args: string[], env: Record<string, string>) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolveRun, reject) => {
        const child = spawn("npm", ["run", "--silent", "store", "--", ...args], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
        child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
        child.on("error", reject);
        child.on("close", (code) => resolveRun({ code, stdout: stdout.trim(), stderr: stderr.trim() }));
      });
    const settings = () => ({ CASSANDRA_CONTACT_POINTS: contactPoint, CASSANDRA_KEYSPACE: keyspaces.command });

    it("migrates a new keyspace, then finds it up to date, and reports its version", async () => {
      expect(await run(["status"], settings())).to.include({
        code: 0,
        stdout: `keyspace ${keyspaces.command}: no schema (run npm run store -- migrate); this build's is ${cassandraSchemaVersion}`,
      });
      expect(await keyspaceExists(keyspaces.command)).to.equal(false);
      expect(await run(["migrate"], settings())).to.include({ code: 0, stdout: `keyspace ${keyspaces.command}: applied versions ${allVersions.join(", ")}` });
      expect(await run(["migrate"], settings())).to.include({ code: 0, stdout: `keyspace ${keyspaces.command}: up to date at version ${cassandraSchemaVersion}` });
      expect(await run(["status"], settings())).to.include({
        code: 0,
        stdout: `keyspace ${keyspaces.command}: schema version ${cassandraSchemaVersion} (up to date); this build's is ${cassandraSchemaVersion}`,
      });
    });

    it("refuses bad usage and bad settings with exit code 2 before connecting", async () => {
      const unknown = await run(["upgrade"], settings());
      expect(unknown.code).to.equal(2);
      expect(unknown.stderr).to.match(/^store: unknown arguments "upgrade"; usage: npm run store -- migrate \| status/);
      const noPort = await run(["migrate"], { ...settings(), CASSANDRA_CONTACT_POINTS: "127.0.0.1" });
      expect(noPort).to.include({ code: 2, stderr: `store: CASSANDRA_CONTACT_POINTS: "127.0.0.1" is not host:port (e.g. 127.0.0.1:9042, [::1]:9042)` });
      const badName = await run(["migrate"], { ...settings(), CASSANDRA_KEYSPACE: "parley-prod" });
      expect(badName.code).to.equal(2);
      expect(badName.stderr).to.match(/^store: CASSANDRA_KEYSPACE: keyspace name "parley-prod" must be/);
    });

    it("fails with exit code 1 when no node answers", async () => {
      const unreachable = await run(["status"], { ...settings(), CASSANDRA_CONTACT_POINTS: "127.0.0.1:9" });
      expect(unreachable.code).to.equal(1);
      expect(unreachable.stderr).to.match(/^store: cannot connect to Cassandra at 127\.0\.0\.1:9/);
    });
  });
});


describe("cassandraSettingsFromEnv", () => {
  it("answers the single-node defaults when nothing is set", () => {
    expect(cassandraSettingsFromEnv({})).to.deep.equal({
      settings: { contactPoints: ["127.0.0.1:9042"], keyspace: "parley", localDataCenter: "datacenter1", replication: undefined, migrate: true },
      problems: [],
    });
  });

  it("reads every setting", () => {
    const reading = cassandraSettingsFromEnv({
      CASSANDRA_CONTACT_POINTS: "10.0.0.1:9042, cass-2.internal:19042,[::1]:9042",
      CASSANDRA_KEYSPACE: "parley_eu",
      CASSANDRA_LOCAL_DC: "eu-west",
      CASSANDRA_REPLICATION: "{'class': 'NetworkTopologyStrategy', 'eu-west': 3}",
      CASSANDRA_MIGRATE: "false",
    });
    expect(reading).to.deep.equal({
      settings: {
        contactPoints: ["10.0.0.1:9042", "cass-2.internal:19042", "[::1]:9042"],
        keyspace: "parley_eu",
        localDataCenter: "eu-west",
        replication: "{'class': 'NetworkTopologyStrategy', 'eu-west': 3}",
        migrate: false,
      },
      problems: [],
    });
  });

  it("names every bad value", () => {
    const { problems } = cassandraSettingsFromEnv({
      CASSANDRA_CONTACT_POINTS: "db1,db2:0",
      CASSANDRA_KEYSPACE: "1st",
      CASSANDRA_REPLICATION: "3",
      CASSANDRA_MIGRATE: "yes",
    });
    expect(problems).to.deep.equal([
      `CASSANDRA_CONTACT_POINTS: "db1" is not host:port (e.g. 127.0.0.1:9042, [::1]:9042)`,
      `CASSANDRA_CONTACT_POINTS: port 0 of "db2:0" is not 1..65535`,
      `CASSANDRA_KEYSPACE: keyspace name "1st" must be lowercase letters, digits and _ (at most 48), starting with a letter`,
      `CASSANDRA_REPLICATION: "3" is not a CQL replication map, e.g. {'class': 'NetworkTopologyStrategy', 'datacenter1': 3}`,
      `CASSANDRA_MIGRATE: must be true or false; got "yes"`,
    ]);
  });
});
