// infra/terraform/: formatted, valid against the hashicorp/kubernetes provider's schema, planning
// as tests/*.tftest.hcl expect, setting only variables the server reads, and its start-up script
// producing a NODE_ID and TRANSPORTER the server accepts. OpenTofu and the provider are built from
// the Go module proxy on a machine's first run (scripts/infra/tofu.ts): 9 min 42 s here (OpenTofu
// 6 min 29 s, the provider 3 min 12 s, their modules downloaded meanwhile) on two cores shared with
// other test runs; later runs reuse both builds and the file takes about 13 s.
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { expect } from "chai";
import { transporterOf } from "../moleculer.config.js";
import { imageTag } from "../scripts/image/build.js";
import { copyConfiguration, init, terraformDir, validated } from "../scripts/infra/check.js";
import { prepareTofu, type Tofu } from "../scripts/infra/tofu.js";
import { clusterConfig } from "../shared/config.js";

const run = promisify(execFile);
const files = join(terraformDir, "files");

describe("infra/terraform: the Kubernetes deployment (OpenTofu, hashicorp/kubernetes)", function () {
  this.timeout(10 * 60_000);
  let tofu: Tofu;
  let work: string;
  let dir: string;

  before(async function () {
    // A first run builds OpenTofu and the provider (see the top of this file).
    this.timeout(90 * 60_000);
    tofu = await prepareTofu();
    work = mkdtempSync(join(tmpdir(), "parley-infra-test-"));
    dir = copyConfiguration(work);
    const initialized = await init(tofu, dir);
    expect(initialized.code, initialized.stdout + initialized.stderr).to.equal(0);
  });

  after(() => {
    tofu?.dispose();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("is formatted as `tofu fmt` writes it", async () => {
    const result = await tofu.run(["fmt", "-check", "-recursive", "-diff", "-no-color", terraformDir]);
    expect(result.code, `tofu fmt would change:\n${result.stdout}${result.stderr}`).to.equal(0);
  });

  it("is valid against the provider's schema (tofu validate)", async () => {
    const result = await tofu.run([`-chdir=${dir}`, "validate", "-json", "-no-color"]);
    expect(validated(result), result.stdout + result.stderr).to.equal(true);
  });

  it("plans as tests/deployment.tftest.hcl expects: probes, grace period, environment, mesh, /ws, autoscalers, refusals (tofu test, mocked provider)", async () => {
    const result = await tofu.run([`-chdir=${dir}`, "test", "-no-color"]);
    expect(result.code, result.stdout + result.stderr).to.equal(0);
    expect(result.stdout).to.match(/Success! \d+ passed, 0 failed/);
  });

  it("fails validation once a resource carries an argument the provider does not know", async () => {
    const broken = join(work, "broken");
    cpSync(dir, broken, { recursive: true });
    // The Deployment's count is `replicas`: a misspelling must not pass as a valid configuration.
    writeFileSync(join(broken, "workloads.tf"), readFileSync(join(broken, "workloads.tf"), "utf8").replace("min_ready_seconds =", "min_ready_secs ="));
    const result = await tofu.run([`-chdir=${broken}`, "validate", "-json", "-no-color"]);
    expect(validated(result)).to.equal(false);
    expect(result.stdout).to.include("min_ready_secs");
  });

  it("defaults the image to the tag `npm run image` gives what it builds", () => {
    const variables = readFileSync(join(dir, "variables.tf"), "utf8");
    const block = variables.slice(variables.indexOf('variable "image" {'));
    expect(/default\s*=\s*"([^"]+)"/.exec(block)?.[1]).to.equal(imageTag());
  });

  it("sets only environment variables the server reads (or Node, or the start-up script)", async () => {
    const varFile = join(work, "all-options.tfvars.json");
    writeFileSync(
      varFile,
      JSON.stringify({
        image: "registry.example.com/parley:1",
        public_host: "chat.example.com",
        code_delivery: "smtps://parley:secret@smtp.example.com:465",
        cassandra_contact_points: ["scylla:9042"],
        cassandra_local_dc: "dc1",
        cassandra_replication: "{'class': 'NetworkTopologyStrategy', 'dc1': 3}",
        kafka_brokers: ["kafka:9092"],
        redis_url: "redis://redis:6379",
        s3_bucket: "parley-media",
        s3_endpoint: "https://minio:9000",
        s3_force_path_style: true,
        s3_access_key_id: "parley",
        s3_secret_access_key: "parley-secret",
        smtp_from: "Parley <no-reply@example.com>",
        extra_ca_certs_pem: "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n",
        push_notifier: ["apns", "fcm"],
        apns_key_pem: "-----BEGIN PRIVATE KEY-----\nMA==\n-----END PRIVATE KEY-----\n",
        apns_key_id: "ABC123DEFG",
        apns_team_id: "TEAM123456",
        apns_topic: "com.example.chat",
        fcm_service_account_json: '{"type":"service_account"}',
      }),
    );
    const expression = "jsonencode(concat(keys(local.config_env), keys(nonsensitive(local.secret_env)), local.pod_env_names))";
    const names = JSON.parse(JSON.parse((await consoleOutput(tofu, dir, varFile, expression)).trim())) as string[];
    expect(names).to.include.members(["ROLES", "NODE_ID", "TRANSPORTER", "REDIS_URL", "CASSANDRA_CONTACT_POINTS", "S3_SECRET_ACCESS_KEY", "NODE_EXTRA_CA_CERTS", "PUSH_NOTIFIER", "APNS_KEY", "FCM_SERVICE_ACCOUNT"]);

    const root = resolve(import.meta.dirname, "..");
    const serverSource = readFileSync(join(root, "shared", "config.ts"), "utf8");
    const read = new Set([...serverSource.matchAll(/"([A-Z][A-Z0-9_]+)"|env\.([A-Z][A-Z0-9_]+)/g)].map((match) => match[1] ?? match[2]));
    const script = readFileSync(join(files, "mesh-env.mjs"), "utf8");
    const unread = names.filter((name) => !read.has(name) && name !== "NODE_EXTRA_CA_CERTS" && !script.includes(`env.${name}`));
    expect(unread, "set by the deployment but read by nobody").to.deep.equal([]);
  });
});

/** What `tofu console` prints for one expression. */
async function consoleOutput(tofu: Tofu, dir: string, varFile: string, expression: string): Promise<string> {
  return new Promise((resolvePrinted, reject) => {
    const child = execFile(tofu.binary, [`-chdir=${dir}`, "console", `-var-file=${varFile}`], { env: tofu.env }, (error, stdout, stderr) => {
      if (error) reject(new Error(`tofu console failed: ${stdout}${stderr}`));
      else resolvePrinted(stdout);
    });
    child.stdin?.end(`${expression}\n`);
  });
}

describe("infra/terraform/files: naming a pod's process on the mesh", function () {
  // Each case starts node twice (the script, then the command it execs) and looks names up.
  this.timeout(60_000);
  const mesh = (env: Record<string, string>, ...command: string[]) =>
    run("sh", [join(files, "start.sh"), ...(command.length ? command : ["node", "-e", "process.stdout.write(JSON.stringify({ id: process.env.NODE_ID, mesh: process.env.TRANSPORTER }))"])], {
      env: { PATH: process.env.PATH, MESH_PORT: "4000", MESH_WAIT_SECONDS: "0", ...env },
    });

  it("names the node <role>-<pod IP>, lists the pods DNS gives for each role, and the server accepts both", async () => {
    const { stdout } = await mesh({ POD_IP: "10.0.0.5", MESH_ROLE: "gateway", MESH_PEERS: "engine=localhost:1,api=nonexistent.invalid:0" });
    const { id, mesh: transporter } = JSON.parse(stdout) as { id: string; mesh: string };
    expect(id).to.equal("gateway-10.0.0.5");
    expect(transporter).to.equal("tcp://10.0.0.5:4000/gateway-10.0.0.5,127.0.0.1:4000/engine-127.0.0.1");
    const config = clusterConfig({ ROLES: "gateway", NODE_ID: id, TRANSPORTER: transporter });
    expect(config.nodeId).to.equal(id);
    expect(transporterOf(config.transporter, config.nodeId)).to.deep.include({ type: "TCP" });
    const options = (transporterOf(config.transporter, config.nodeId) as { options: { port: number; urls: string[] } }).options;
    expect(options.port).to.equal(4000);
    expect(options.urls).to.deep.equal(["10.0.0.5:4000/gateway-10.0.0.5", "127.0.0.1:4000/engine-127.0.0.1"]);
  });

  it("spells an IPv6 pod address the one way every peer does, in an id NODE_ID allows", async () => {
    const { stdout } = await mesh({ POD_IP: "FD00:0:0::0a", MESH_ROLE: "engine", MESH_PEERS: "engine=nonexistent.invalid:0" });
    const { id, mesh: transporter } = JSON.parse(stdout) as { id: string; mesh: string };
    expect(id).to.equal("engine-fd00--a");
    expect(transporter).to.equal("tcp://fd00::a:4000/engine-fd00--a");
    const config = clusterConfig({ ROLES: "engine", NODE_ID: id, TRANSPORTER: transporter });
    expect((transporterOf(config.transporter, config.nodeId) as { options: { port: number } }).options.port).to.equal(4000);
  });

  it("waits for the engines DNS should list, then starts with those it found and says so", async () => {
    const started = performance.now();
    const { stdout, stderr } = await mesh({ POD_IP: "10.0.0.5", MESH_ROLE: "api", MESH_WAIT_SECONDS: "2", MESH_PEERS: "engine=localhost:2" });
    expect(performance.now() - started).to.be.at.least(1900);
    expect(JSON.parse(stdout).mesh).to.equal("tcp://10.0.0.5:4000/api-10.0.0.5,127.0.0.1:4000/engine-127.0.0.1");
    expect(stderr).to.include("engine 1 of 2");
  });

  it("does not start the server when the pod's address is missing", async () => {
    const failed = await mesh({ MESH_ROLE: "api", MESH_PEERS: "engine=localhost:1" }, "node", "-e", "process.stdout.write('started')").then(
      () => undefined,
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failed?.code).to.equal(1);
    expect(failed?.stdout).to.equal("");
    expect(failed?.stderr).to.include("POD_IP must be this pod's IP address");
  });
});
