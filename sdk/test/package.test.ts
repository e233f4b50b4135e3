// The SDK as a package: `tsc -p sdk` builds it into sdk/dist (its own code, the generated protocol
// from shared/gen and the error catalogue), plain Node (no TypeScript loader) loads it by its name
// through the root's npm workspace, and what it loads needs nothing outside sdk/dist but the
// published packages its package.json declares.
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { expect } from "chai";

const root = resolve(import.meta.dirname, "../..");
const sdk = join(root, "sdk");
const dist = join(sdk, "dist");

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** The name of the package a bare specifier imports ("@scope/name/sub" → "@scope/name"). */
const packageOf = (specifier: string) => specifier.split("/").slice(0, specifier.startsWith("@") ? 2 : 1).join("/");

describe("sdk: the package", () => {
  before(function () {
    this.timeout(180_000);
    execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", join(sdk, "tsconfig.json")], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  });

  it("loads by its name in plain Node and exposes the client, the stream, the agent kit and the protocol", () => {
    const probe = `
      const sdk = await import("@parley/sdk");
      const services = Object.values(sdk.parleyServices);
      console.log(JSON.stringify({
        resolved: import.meta.resolve("@parley/sdk"),
        services: services.map((s) => s.typeName).sort(),
        methods: services.reduce((n, s) => n + s.methods.length, 0),
        exports: ["createParleyClient", "UpdateStream", "verifyWebhook", "createWebhookHandler", "streamMessage", "CardActions", "MessageType", "StreamPhase"].filter((name) => name in sdk),
      }));`;
    const env = { ...process.env };
    delete env.NODE_OPTIONS;
    const loaded = JSON.parse(execFileSync(process.execPath, ["--input-type=module", "-e", probe], { cwd: root, env, encoding: "utf8" })) as {
      resolved: string;
      services: string[];
      methods: number;
      exports: string[];
    };
    expect(loaded.resolved).to.equal(pathToFileURL(join(dist, "sdk/src/index.js")).href);
    expect(loaded.services).to.have.length(10);
    expect(loaded.methods).to.equal(79);
    expect(loaded.exports).to.deep.equal(["createParleyClient", "UpdateStream", "verifyWebhook", "createWebhookHandler", "streamMessage", "CardActions", "MessageType", "StreamPhase"]);
  });

  it("imports nothing outside sdk/dist but Node's modules and the dependencies it declares", () => {
    const manifest = JSON.parse(readFileSync(join(sdk, "package.json"), "utf8")) as { dependencies: Record<string, string> };
    const declared = new Set(Object.keys(manifest.dependencies));
    const builtins = new Set(builtinModules.flatMap((name) => [name, `node:${name}`]));
    const built = filesUnder(dist).filter((file) => file.endsWith(".js"));
    expect(built.map((file) => relative(dist, file))).to.include.members(["sdk/src/index.js", "sdk/src/update-stream.js", "shared/gen/api/v1/message_pb.js", "shared/error-catalogue.js"]);
    for (const file of built) {
      const source = readFileSync(file, "utf8");
      for (const [, specifier] of source.matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)) {
        if (specifier.startsWith(".")) {
          const target = resolve(dirname(file), specifier);
          expect(relative(dist, target).startsWith(".."), `${relative(dist, file)} imports ${specifier}`).to.equal(false);
        } else if (!builtins.has(specifier)) {
          expect(declared.has(packageOf(specifier)), `${relative(dist, file)} imports ${specifier}, not declared`).to.equal(true);
        }
      }
    }
  });
});
