import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { expect } from "chai";
import { generate } from "../scripts/generate.js";

function listFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? listFiles(path) : [path];
  });
}

function expectSameTree(committed: string, fresh: string): void {
  const freshFiles = listFiles(fresh).map((f) => relative(fresh, f)).sort();
  const committedFiles = listFiles(committed).map((f) => relative(committed, f)).sort();
  expect(committedFiles, `generated file list of ${committed}`).to.deep.equal(freshFiles);
  for (const file of freshFiles) {
    expect(readFileSync(join(committed, file), "utf8"), `${relative(resolve(import.meta.dirname, ".."), join(committed, file))} is stale: run npm run generate`).to.equal(
      readFileSync(join(fresh, file), "utf8"),
    );
  }
}

describe("shared/gen", () => {
  it("is exactly what `npm run generate` produces from shared/proto", function () {
    this.timeout(120_000);
    const fresh = mkdtempSync(join(tmpdir(), "parley-gen-"));
    try {
      generate(fresh);
      expectSameTree(resolve(import.meta.dirname, "../shared/gen"), fresh);
    } finally {
      rmSync(fresh, { recursive: true, force: true });
    }
  });

  it("is the only generated protocol code in the repository (the SDK compiles this copy into its package)", () => {
    const root = resolve(import.meta.dirname, "..");
    const tracked = execFileSync("git", ["ls-files"], { cwd: root, encoding: "utf8" }).split("\n");
    const generated = tracked.filter((file) => /_pb\.(ts|js)$/.test(file));
    expect(generated.length, "generated files tracked").to.be.greaterThan(20);
    expect(generated.filter((file) => !file.startsWith("shared/gen/"))).to.deep.equal([]);
  });

  it("covers all 10 services and 79 RPCs of the spec", async () => {
    const services = await Promise.all(
      ["agent", "user", "auth", "contact", "conversation", "group", "media", "message", "push", "sync"].map(async (name) => {
        const module = (await import(`../shared/gen/api/v1/${name}_pb.js`)) as Record<string, unknown>;
        return Object.values(module).find((v): v is { kind: string; typeName: string; methods: unknown[] } => (v as { kind?: string })?.kind === "service")!;
      }),
    );
    const counts = Object.fromEntries(services.map((s) => [s.typeName, s.methods.length]));
    expect(counts).to.deep.equal({
      "api.v1.AgentService": 12,
      "api.v1.UserService": 7,
      "api.v1.AuthService": 12,
      "api.v1.ContactService": 12,
      "api.v1.ConversationService": 4,
      "api.v1.GroupService": 10,
      "api.v1.MediaService": 5,
      "api.v1.MessageService": 12,
      "api.v1.PushService": 3,
      "api.v1.SyncService": 2,
    });
  });
});
