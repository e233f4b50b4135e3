// `npm run services` with s3: a real MinIO on a non-default port (9020, so neither a developer's
// server on 9000 nor the tests' on 9010 is in the way). A machine's first run builds MinIO from
// source through the Go module proxy (minutes); later runs reuse the cached binary, ~1 s a start.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ListBucketsCommand, S3Client } from "@aws-sdk/client-s3";
import { expect } from "chai";
import { processesMentioning, runServices } from "../../test/support/services-cli.js";
import { isAlive, portIsOpen } from "./daemon.js";
import { ensureS3, installS3, s3Paths } from "./s3.js";

const port = 9020;
const endpoint = `http://127.0.0.1:${port}`;

const services = (dataDir: string, ...args: string[]) => runServices(dataDir, args, { S3_PORT: String(port) }, 120_000);


function client(secretAccessKey = "parley-secret"): S3Client {
  return new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials: { accessKeyId: "parley", secretAccessKey } });
}

describe("npm run services with s3 (real MinIO)", function () {
  this.timeout(120_000);
  let dataDir: string;

  before(async function () {
    this.timeout(40 * 60_000);
    await installS3();
  });

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-services-"));
  });

  afterEach(async () => {
    await services(dataDir, "down", "s3").catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("starts MinIO checking signatures, with no bucket, reuses it on a second up, and leaves nothing after down", async () => {
    const paths = s3Paths(dataDir);
    expect(await services(dataDir, "up", "s3")).to.match(new RegExp(`s3 ${endpoint} started \\(pid \\d+\\)`));
    const pid = Number(readFileSync(paths.pidFile, "utf8"));
    expect(isAlive(pid)).to.equal(true);
    expect((await fetch(`${endpoint}/minio/health/live`)).status).to.equal(200);

    const good = client();
    const wrong = client("not-the-secret");
    try {
      expect((await good.send(new ListBucketsCommand({}))).Buckets ?? []).to.deep.equal([]);
      const refused = await wrong.send(new ListBucketsCommand({})).then(
        () => undefined,
        (error: Error) => error.name,
      );
      expect(refused).to.equal("SignatureDoesNotMatch");
    } finally {
      good.destroy();
      wrong.destroy();
    }
    expect(existsSync(paths.data)).to.equal(true);

    expect(await services(dataDir, "up", "s3")).to.include(`already running (pid ${pid})`);
    expect(Number(readFileSync(paths.pidFile, "utf8"))).to.equal(pid);

    expect(await services(dataDir, "down", "s3")).to.include("s3: stopped");
    expect(await portIsOpen("127.0.0.1", port)).to.equal(false);
    expect(isAlive(pid)).to.equal(false);
    expect(processesMentioning(paths.data)).to.deep.equal([]);
    expect(existsSync(paths.pidFile)).to.equal(false);
    expect(await services(dataDir, "down", "s3")).to.include("s3: was not running");
  });

  it("refuses to start on a port another process holds", async () => {
    const other = mkdtempSync(join(tmpdir(), "parley-services-"));
    try {
      await services(other, "up", "s3");
      const failure = await services(dataDir, "up", "s3").then(
        () => undefined,
        (error: { stderr: string }) => error.stderr,
      );
      expect(failure).to.include(`127.0.0.1:${port} is taken`);
    } finally {
      await services(other, "down", "s3");
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("gives tests an endpoint through ensureS3, stopping only what it started", async () => {
    const s3 = await ensureS3(dataDir, { port });
    expect(s3.endpoint).to.equal(endpoint);
    expect(s3.credentials).to.deep.equal({ accessKeyId: "parley", secretAccessKey: "parley-secret" });
    await s3.stop();
    expect(await portIsOpen("127.0.0.1", port)).to.equal(false);

    await services(dataDir, "up", "s3");
    const pid = Number(readFileSync(s3Paths(dataDir).pidFile, "utf8"));
    const reused = await ensureS3(dataDir, { port });
    await reused.stop();
    expect(isAlive(pid)).to.equal(true);
  });
});
