// `npm run services` with Cassandra: a real Cassandra 5.0 on 127.0.0.1:9042 (needs Java 17 and
// Maven, or the jars already cached). Takes ~20-40 s: a first install resolves ~70 MB of jars,
// each start is a few seconds, each clean stop ~6 s. Port 9042 must be free.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { processesMentioning, runServices } from "../../test/support/services-cli.js";
import { releaseTestCassandra } from "../../test/support/cassandra.js";
import { cassandraPaths, ensureCassandra } from "./cassandra.js";
import { decodeSupported, probeCql } from "./cql-probe.js";
import { isAlive, portIsOpen, runningPid } from "./daemon.js";


const services = (dataDir: string, ...args: string[]) => runServices(dataDir, args, {}, 300_000);


function frame(opcode: number, body: Buffer): Buffer {
  const header = Buffer.from([0x84, 0, 0, 0, opcode, 0, 0, 0, 0]);
  header.writeInt32BE(body.length, 5);
  return Buffer.concat([header, body]);
}

function shortString(text: string): Buffer {
  const bytes = Buffer.from(text, "utf8");
  const length = Buffer.alloc(2);
  length.writeUInt16BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

describe("CQL readiness probe", () => {
  it("decodes a SUPPORTED multimap", () => {
    const body = Buffer.concat([Buffer.from([0, 2]), shortString("CQL_VERSION"), Buffer.from([0, 1]), shortString("3.4.7"), shortString("COMPRESSION"), Buffer.from([0, 2]), shortString("snappy"), shortString("lz4")]);
    const supported = decodeSupported(frame(0x06, body));
    expect(supported.get("CQL_VERSION")).to.deep.equal(["3.4.7"]);
    expect(supported.get("COMPRESSION")).to.deep.equal(["snappy", "lz4"]);
  });

  it("turns an ERROR answer into an error carrying the server's message", () => {
    const code = Buffer.alloc(4);
    code.writeInt32BE(0x000a);
    expect(() => decodeSupported(frame(0x00, Buffer.concat([code, shortString("Invalid or unsupported protocol version")])))).to.throw(/ERROR 0xa: Invalid or unsupported protocol version/);
  });
});

describe("services pid files", () => {
  it("ignore and remove a pid file naming a live process that is not the service", () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-pid-"));
    const pidFile = join(dir, "cassandra.pid");
    writeFileSync(pidFile, `${process.pid}\n`);
    expect(runningPid(pidFile, "CassandraDaemon-of-no-one")).to.equal(undefined);
    expect(existsSync(pidFile)).to.equal(false);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe("npm run services with cassandra (real Cassandra 5.0, ~30 s)", function () {
  this.timeout(300_000);
  let dataDir: string;

  // These tests start and stop their own server on the standard ports.
  before(releaseTestCassandra);

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-services-"));
  });

  afterEach(async () => {
    await services(dataDir, "down").catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("starts Cassandra answering CQL, reuses it on a second up, and leaves nothing after down", async () => {
    const paths = cassandraPaths(dataDir);
    expect(await services(dataDir, "up", "cassandra")).to.match(/started \(pid \d+\)/);
    const pid = Number(readFileSync(paths.pidFile, "utf8"));
    expect(isAlive(pid)).to.equal(true);
    const supported = await probeCql("127.0.0.1", 9042);
    expect(supported.get("CQL_VERSION")?.[0]).to.match(/^3\.\d+\.\d+$/);
    expect(existsSync(join(paths.logs, "system.log"))).to.equal(true);

    expect(await services(dataDir, "up", "cassandra")).to.include(`already running (pid ${pid})`);
    expect(Number(readFileSync(paths.pidFile, "utf8"))).to.equal(pid);

    expect(await services(dataDir, "down")).to.include("cassandra: stopped");
    expect(await portIsOpen("127.0.0.1", 9042)).to.equal(false);
    expect(isAlive(pid)).to.equal(false);
    expect(processesMentioning(paths.config)).to.deep.equal([]);
    expect(existsSync(paths.pidFile)).to.equal(false);
  });

  it("refuses a service it does not know, naming the ones it does", async () => {
    const failure = await services(dataDir, "up", "postgres").then(
      () => undefined,
      (error: { stderr: string }) => error.stderr,
    );
    expect(failure).to.include('unknown service "postgres"');
    expect(failure).to.include("cassandra, kafka, redis, s3, nginx");
  });

  it("gives tests a contact point through ensureCassandra and stops what it started", async () => {
    const cassandra = await ensureCassandra(dataDir);
    expect(cassandra.contactPoint).to.equal("127.0.0.1:9042");
    expect((await probeCql("127.0.0.1", 9042)).has("CQL_VERSION")).to.equal(true);
    await cassandra.stop();
    expect(await portIsOpen("127.0.0.1", 9042)).to.equal(false);
    expect(processesMentioning(cassandraPaths(dataDir).config)).to.deep.equal([]);
  });

  it("leaves running through ensureCassandra's stop a Cassandra that `up` started", async () => {
    await services(dataDir, "up", "cassandra");
    const pid = Number(readFileSync(cassandraPaths(dataDir).pidFile, "utf8"));
    const cassandra = await ensureCassandra(dataDir);
    await cassandra.stop();
    expect(isAlive(pid)).to.equal(true);
    expect(await probeCql("127.0.0.1", 9042)).to.be.instanceOf(Map);
  });
});
