// The OCI image, proven by running it (`npm run test:image`, not in `npm test`'s passes: the first
// build takes minutes). The image is built (scripts/image/build.ts), unpacked into a runtime
// bundle and started with bubblewrap from its own root filesystem, read-only, as its own user,
// with its own Node and modules (scripts/image/run.ts): one server with every role, then the api
// and the engine in two processes. Each signs users in, carries a message to a socket and stops
// on SIGTERM with exit 0.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { toJsonString } from "@bufbuild/protobuf";
import { expect } from "chai";
import { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { ServerFrameSchema, type ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import { buildImage, cacheDir, imageSource, root, serverUid, type BuiltImage } from "../../scripts/image/build.js";
import { startFromImage, unpackImage, type Bundle, type ImageProcess } from "../../scripts/image/run.js";
import { signInWithCode } from "../support/accounts.js";
import { client, freePort } from "../support/harness.js";
import { nextClientMessageId, textBody } from "../support/messaging.js";
import { befriend } from "../support/social.js";
import { GatewayClient } from "../support/ws-client.js";

async function healthy(url: string, process: ImageProcess, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await fetch(`${url}/healthz`)).status === 200) return;
    } catch {
      // Not listening yet.
    }
    if (process.child.exitCode !== null) throw new Error(`the server exited with ${process.child.exitCode}:\n${process.output()}`);
    if (Date.now() > deadline) throw new Error(`no healthy /healthz at ${url} within ${timeoutMs / 1000} s:\n${process.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Signs two people in through `url`, befriends them, and answers the frame bob's socket gets for alice's message. */
async function messageArrives(url: string, codesFile: string): Promise<ServerFrame> {
  const server = { url, codesFile };
  const [alice, bob] = [await signInWithCode(server), await signInWithCode(server)];
  const conversationId = await befriend(server, alice, bob);
  const socket = await GatewayClient.connect(url, "json");
  try {
    await socket.authenticate(bob.accessToken);
    const text = `hello from the image ${Date.now()}`;
    await client(server, MessageService, "json", alice.accessToken).sendMessage({ conversationId, clientMessageId: nextClientMessageId(), body: textBody(text) });
    return await socket.next((frame) => frame.payload.case === "update" && toJsonString(ServerFrameSchema, frame).includes(text), 10_000);
  } finally {
    socket.close();
  }
}

async function stopWithSigterm(process: ImageProcess): Promise<number | null> {
  globalThis.process.kill(process.serverPid(), "SIGTERM");
  return process.exited;
}

describe("the OCI image", function () {
  this.timeout(20 * 60_000);
  let image: BuiltImage;
  let bundle: Bundle;
  let work: string;

  before(() => {
    image = buildImage();
    work = mkdtempSync(join(tmpdir(), "parley-image-"));
    bundle = unpackImage(image.layout, join(work, "bundle"));
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it("says what it is: labels, a non-root user, the command npm start runs, and three layers, the code last", () => {
    const revision = execFileSync("git", ["-C", root, "rev-parse", "HEAD"], { encoding: "utf8" }).trim();
    const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;
    const { config } = bundle.image;
    expect(config.Labels).to.include({ "org.opencontainers.image.version": version, "org.opencontainers.image.revision": revision });
    expect(config.Labels["org.opencontainers.image.source"]).to.equal(imageSource());
    expect(config.Labels["org.opencontainers.image.created"]).to.equal(new Date(Number(execFileSync("git", ["-C", root, "log", "-1", "--format=%ct"], { encoding: "utf8" })) * 1000).toISOString());
    expect(config.User).to.equal(`${serverUid}:${serverUid}`);
    expect(config.Cmd).to.deep.equal(["node", "--import", "tsx", "main.ts"]);
    expect(config.WorkingDir).to.equal("/app");
    expect(config.Env).to.include.members(["HOST=0.0.0.0", "PORT=8080", "DATA_DIR=/data"]);
    expect(image.layers.map((layer) => layer.createdBy)).to.satisfy((steps: string[]) => steps[0].startsWith("mmdebstrap") && steps[1].startsWith("npm ci") && steps[2].startsWith("git archive"));
    expect(image.tag).to.equal(`parley:${version}`);
  });

  it("is an archive skopeo reads both as an OCI archive and as a docker archive (what docker load reads)", () => {
    for (const transport of ["oci-archive", "docker-archive"]) {
      const inspected = JSON.parse(execFileSync("skopeo", ["inspect", `${transport}:${image.archive}`], { encoding: "utf8" })) as { Layers: string[]; Labels: Record<string, string> };
      expect(inspected.Layers, transport).to.have.length(3);
      expect(inspected.Labels["org.opencontainers.image.revision"], transport).to.equal(bundle.image.config.Labels["org.opencontainers.image.revision"]);
    }
    const oci = JSON.parse(execFileSync("skopeo", ["inspect", `oci-archive:${image.archive}`], { encoding: "utf8" })) as { Digest: string };
    expect(oci.Digest).to.equal(image.digest);
  });

  it("holds Debian's Node and the production dependencies, and no tests, dev tools, dev dependencies or secrets", async () => {
    const inImage = (path: string) => existsSync(join(bundle.rootfs, path));
    const version = startFromImage(bundle, mkdtempSync(join(work, "version-")), {}, ["node", "--version"]);
    expect(await version.exited, version.output()).to.equal(0);
    expect(version.output()).to.match(/^v20\.(19|[2-9]\d)\./);
    for (const present of ["app/main.ts", "app/shared/gen", "app/node_modules/tsx", "app/node_modules/better-sqlite3/build/Release/better_sqlite3.node", "etc/ssl/certs/ca-certificates.crt"]) {
      expect(inImage(present), present).to.equal(true);
    }
    for (const absent of ["usr/bin/npm", "usr/bin/gcc", "usr/bin/g++", "usr/bin/make", "usr/bin/python3", "app/test", "app/docs", "app/scripts", "app/infra", "app/node_modules/mocha", "app/node_modules/eslint", "app/node_modules/typescript", "app/.git", "run/machine-ca.crt"]) {
      expect(inImage(absent), absent).to.equal(false);
    }
    const files = execFileSync("find", [join(bundle.rootfs, "app"), "-path", "*/node_modules", "-prune", "-o", "-type", "f", "-print"], { encoding: "utf8" }).split("\n");
    expect(files.filter((file) => /\.test\.ts$|conformance/.test(file))).to.deep.equal([]);
    expect(files.filter((file) => /\.(pem|p8|key)$|\.env$|npmrc/.test(file))).to.deep.equal([]);
  });

  it("builds again to the same digest from the same commit", () => {
    // The commit's own layer, made again from nothing (the base and the dependencies are made of
    // what the lock file and Debian's packages are, and kept by that key).
    const revision = execFileSync("git", ["-C", root, "rev-parse", "HEAD"], { encoding: "utf8" }).trim();
    const appLayer = image.layers[2];
    rmSync(join(cacheDir, "layers", `app-${revision}.tar`));
    rmSync(join(cacheDir, "layers", `${appLayer.diffId.slice("sha256:".length)}.tar.gz`));
    const again = buildImage();
    expect(again.layers[2].digest).to.equal(appLayer.digest);
    expect(again.digest).to.equal(image.digest);
  });

  it("serves from its own root filesystem, read-only, as its user: sign-in, a message pushed to a socket, SIGTERM exits 0", async () => {
    const data = mkdtempSync(join(work, "data-"));
    const port = await freePort();
    const server = startFromImage(bundle, data, { PORT: String(port), HOST: "127.0.0.1", GRPC_PORT: "off", CODE_DELIVERY: "file:/data/codes.jsonl", LOG_LEVEL: "warn" });
    try {
      const url = `http://127.0.0.1:${port}`;
      await healthy(url, server);
      const frame = await messageArrives(url, join(data, "codes.jsonl"));
      expect(frame.payload.case).to.equal("update");
      // Its data went where the image says, written by its user.
      expect(existsSync(join(data, "codes.jsonl"))).to.equal(true);
      expect(await stopWithSigterm(server), server.output()).to.equal(0);
    } finally {
      server.child.kill("SIGKILL");
    }
  });

  it("starts the cluster's roles apart: api and gateway in one process, engine and webhooks in another", async () => {
    const [apiPort, enginePort, apiMesh, engineMesh] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const mesh = `tcp://127.0.0.1:${apiMesh}/api-1,127.0.0.1:${engineMesh}/engine-1`;
    const common = { HOST: "127.0.0.1", GRPC_PORT: "off", LOG_LEVEL: "warn", TRANSPORTER: mesh, CODE_DELIVERY: "file:/data/codes.jsonl" };
    const engineData = mkdtempSync(join(work, "engine-"));
    const apiData = mkdtempSync(join(work, "api-"));
    const engine = startFromImage(bundle, engineData, { ...common, ROLES: "engine,webhooks", NODE_ID: "engine-1", PORT: String(enginePort) });
    const api = startFromImage(bundle, apiData, { ...common, ROLES: "api,gateway", NODE_ID: "api-1", PORT: String(apiPort) });
    try {
      const url = `http://127.0.0.1:${apiPort}`;
      // The api node is healthy only once it reaches an engine that holds its keys.
      await healthy(url, api);
      await healthy(`http://127.0.0.1:${enginePort}`, engine);
      const frame = await messageArrives(url, join(engineData, "codes.jsonl"));
      expect(frame.payload.case).to.equal("update");
      expect(await stopWithSigterm(api), api.output()).to.equal(0);
      expect(await stopWithSigterm(engine), engine.output()).to.equal(0);
    } finally {
      api.child.kill("SIGKILL");
      engine.child.kill("SIGKILL");
    }
  });
});
