// `npm run services` with Redis: a real Redis 7.0 from Debian's packages, on port 6391 here so that
// neither a developer's Redis on 6379 nor the tests' own on 6390 is touched. Each start takes well
// under a second once the packages are cached.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { processesMentioning, runServices } from "../../test/support/services-cli.js";
import { Redis } from "ioredis";
import { isAlive, portIsOpen } from "./daemon.js";
import { ensureRedis, pingRedis, redisPaths, restartRedis, startRedis, stopRedis } from "./redis.js";

const port = 6391;

const services = (dataDir: string, ...args: string[]) => runServices(dataDir, args, { REDIS_PORT: String(port) }, 300_000);


describe("npm run services with redis (real Redis 7.0)", function () {
  this.timeout(120_000);
  let dataDir: string;

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "parley-services-"));
  });

  afterEach(async () => {
    await stopRedis(dataDir).catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("starts Redis answering PING, reuses it on a second up, and leaves nothing after down", async () => {
    const paths = redisPaths(dataDir);
    expect(await services(dataDir, "up", "redis")).to.match(new RegExp(`redis 127\\.0\\.0\\.1:${port} started \\(pid \\d+\\).*Debian package 7\\.`));
    const pid = Number(readFileSync(paths.pidFile, "utf8"));
    expect(isAlive(pid)).to.equal(true);
    expect(await pingRedis("127.0.0.1", port)).to.equal("+PONG");

    expect(await services(dataDir, "up", "redis")).to.include(`already running (pid ${pid})`);
    expect(Number(readFileSync(paths.pidFile, "utf8"))).to.equal(pid);

    expect(await services(dataDir, "down", "redis")).to.include("redis: stopped");
    expect(await portIsOpen("127.0.0.1", port)).to.equal(false);
    expect(isAlive(pid)).to.equal(false);
    expect(processesMentioning(paths.config)).to.deep.equal([]);
    expect(existsSync(paths.pidFile)).to.equal(false);
    expect(await services(dataDir, "down", "redis")).to.include("redis: was not running");
  });

  it("keeps what was written across a stop and a start (append-only file)", async () => {
    await startRedis(dataDir, { port });
    const client = new Redis({ port, lazyConnect: true });
    await client.connect();
    await client.set("kept", "across restarts");
    client.disconnect();
    await stopRedis(dataDir);
    expect(readdirSync(join(redisPaths(dataDir).data, "appendonly")).some((name) => name.endsWith(".aof"))).to.equal(true);

    await startRedis(dataDir, { port });
    const again = new Redis({ port, lazyConnect: true });
    await again.connect();
    expect(await again.get("kept")).to.equal("across restarts");
    expect(await again.config("GET", "appendfsync")).to.deep.equal(["appendfsync", "everysec"]);
    again.disconnect();
  });

  it("restarts on the same port and data with a new process", async () => {
    const first = await startRedis(dataDir, { port });
    const second = await restartRedis(dataDir, { port });
    expect(second.started).to.equal(true);
    expect(second.port).to.equal(port);
    expect(second.pid).to.not.equal(first.pid);
    expect(isAlive(first.pid)).to.equal(false);
    expect(await pingRedis("127.0.0.1", port)).to.equal("+PONG");
  });

  it("refuses a second port for a data directory whose Redis already runs", async () => {
    await startRedis(dataDir, { port });
    const failure = await startRedis(dataDir, { port: port + 1 }).then(
      () => undefined,
      (error: Error) => error.message,
    );
    expect(failure).to.include(`already runs on port ${port}, not ${port + 1}`);
  });

  it("refuses a port another process holds", async () => {
    await startRedis(dataDir, { port });
    const other = mkdtempSync(join(tmpdir(), "parley-services-"));
    try {
      const failure = await startRedis(other, { port }).then(
        () => undefined,
        (error: Error) => error.message,
      );
      expect(failure).to.include(`127.0.0.1:${port} is taken`);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("gives tests a URL through ensureRedis and stops only what it started", async () => {
    await services(dataDir, "up", "redis");
    const pid = Number(readFileSync(redisPaths(dataDir).pidFile, "utf8"));
    const reused = await ensureRedis(dataDir, { port });
    expect(reused.url).to.equal(`redis://127.0.0.1:${port}/0`);
    await reused.stop();
    expect(isAlive(pid)).to.equal(true);

    await stopRedis(dataDir);
    const owned = await ensureRedis(dataDir, { port });
    expect(await pingRedis("127.0.0.1", port)).to.equal("+PONG");
    await owned.stop();
    expect(await portIsOpen("127.0.0.1", port)).to.equal(false);
  });
});
