// `npm run k6 -- <scenario> [k6 options]`: runs scripts/k6/scenarios/<scenario>.ts with k6 against
// BASE_URL (default http://127.0.0.1:8080), building k6 from the Go module proxy the first time.
// Accounts sign in with the codes the server writes to CODE_FILE (the server running with
// CODE_DELIVERY=file:$CODE_FILE), which the sidecar relays to k6. The webhook scenario also needs
// WEBHOOK_TLS_DIR: a folder with cert.pem and key.pem for localhost, whose CA the server trusts
// (NODE_EXTRA_CA_CERTS), the server allowing loopback webhooks (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true).
// The exit status is k6's: 0 when every threshold held.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { installGoTool, goToolPath, type GoTool } from "../services/go-install.js";
import { startSidecar } from "./sidecar.js";

export const k6: GoTool = {
  tool: "k6",
  packagePath: "go.k6.io/k6",
  version: "v1.8.1",
  binary: "k6",
  env: { CGO_ENABLED: "0" },
  needs: "k6 v1.8 builds with Go ≥ 1.24",
};

const scenariosDir = resolve(import.meta.dirname, "scenarios");

export function scenarioNames(): string[] {
  return readdirSync(scenariosDir)
    .filter((name) => name.endsWith(".ts"))
    .map((name) => name.slice(0, -3))
    .sort();
}

function usage(): string {
  return `usage: npm run k6 -- <scenario> [k6 run options]\nscenarios: ${scenarioNames().join(", ")}\nenvironment: BASE_URL (default http://127.0.0.1:8080), CODE_FILE (required), WEBHOOK_TLS_DIR (webhook-agents)`;
}

async function main(args: string[]): Promise<number> {
  const [scenario, ...k6Options] = args;
  if (!scenario || scenario === "--help" || !scenarioNames().includes(scenario)) {
    console.error(scenario && scenario !== "--help" ? `no scenario ${JSON.stringify(scenario)}\n${usage()}` : usage());
    return 2;
  }
  const codeFile = process.env.CODE_FILE;
  if (!codeFile) {
    console.error(`CODE_FILE is not set: the scenarios sign in with the codes the server writes there (CODE_DELIVERY=file:$CODE_FILE)\n${usage()}`);
    return 2;
  }
  const tlsDir = process.env.WEBHOOK_TLS_DIR;
  const tls = tlsDir ? { cert: readFileSync(join(tlsDir, "cert.pem")), key: readFileSync(join(tlsDir, "key.pem")) } : undefined;

  if (!existsSync(goToolPath(k6))) console.error(`building k6 ${k6.version} from the Go module proxy (once; a few minutes on two cores)…`);
  const binary = await installGoTool(k6);

  const sidecar = await startSidecar({ codeFile, tls });
  try {
    const env = {
      BASE_URL: (process.env.BASE_URL ?? "http://127.0.0.1:8080").replace(/\/$/, ""),
      SIDECAR_URL: sidecar.url,
      WEBHOOK_URL: sidecar.webhookUrl ?? "",
      // Distinct identities per run: a second run against the same server signs in new accounts.
      RUN_ID: `${Date.now().toString(36)}${process.pid.toString(36)}`,
    };
    const envFlags = Object.entries(env).flatMap(([name, value]) => ["--env", `${name}=${value}`]);
    const child = spawn(binary, ["run", ...envFlags, ...k6Options, join(scenariosDir, `${scenario}.ts`)], {
      stdio: "inherit",
      // k6 reads K6_* from the environment too; nothing else of ours leaks into the script.
      env: { ...process.env, K6_NO_USAGE_REPORT: "true" },
    });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on("SIGINT", forward);
    process.on("SIGTERM", forward);
    return await new Promise<number>((done) => child.on("close", (code, signal) => done(code ?? (signal ? 1 : 0))));
  } finally {
    await sidecar.close();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  process.exitCode = await main(process.argv.slice(2));
}
