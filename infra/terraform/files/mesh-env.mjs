// Names this process on Parley's static TCP mesh and lists the peers it can find, for start.sh,
// which exports the answer as NODE_ID and TRANSPORTER and then execs the server. Prints one line:
// "<NODE_ID> tcp://<own address>:<port>/<NODE_ID>,<peer address>:<port>/<peer id>,…".
//
// A node is named after its pod's address, <role>-<pod IP>: Moleculer's TCP transporter ties a
// peer id to the address that peer first connected from and never lets go of it, so an id must
// never move to another address (infra/terraform/workloads.tf says more). Named so, every node is
// known from DNS alone: the headless Service of a role resolves to its pods' addresses, starting
// ones included.
//
// The server waits to hear from every node its list names before it serves; a node missing from
// the list joins when it greets one that has it. Nodes starting at the same moment (a fresh
// install) may not see each other in DNS yet, and nodes that all saw no one would form separate
// meshes for good. So this waits, MESH_WAIT_SECONDS at most, until DNS lists as many pods of each
// role as MESH_PEERS expects: the engines, which every node lists and so joins.
//
// Environment: POD_IP (the downward API's status.podIP), MESH_ROLE, MESH_PORT, MESH_WAIT_SECONDS
// and MESH_PEERS, a comma-separated list of <role>=<headless Service name>:<pods to wait for>.
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";
import { URL } from "node:url";

function fail(message) {
  process.stderr.write(`mesh-env: ${message}\n`);
  process.exit(1);
}

/** The one spelling of an address, so that a pod and its peers derive the same id from it. */
function canonical(ip) {
  return isIP(ip) === 6 ? new URL(`http://[${ip}]/`).hostname.slice(1, -1) : ip;
}

/** NODE_ID allows letters, digits, ".", "_" and "-" (shared/config.ts): an IPv6 address's ":" become "-". */
const nodeIdOf = (role, ip) => `${role}-${ip.replaceAll(":", "-")}`;

const env = process.env;
const podIp = canonical(env.POD_IP?.trim() ?? "");
if (!isIP(podIp)) fail(`POD_IP must be this pod's IP address; got ${JSON.stringify(env.POD_IP)}`);
const family = isIP(podIp);
const role = env.MESH_ROLE?.trim() ?? "";
if (!/^[a-z]+$/.test(role)) fail(`MESH_ROLE must be a role name; got ${JSON.stringify(env.MESH_ROLE)}`);
const port = Number(env.MESH_PORT);
if (!Number.isInteger(port) || port < 1 || port > 65535) fail(`MESH_PORT must be a port; got ${JSON.stringify(env.MESH_PORT)}`);
const waitSeconds = Number(env.MESH_WAIT_SECONDS ?? "30");
if (!Number.isFinite(waitSeconds) || waitSeconds < 0) fail(`MESH_WAIT_SECONDS must be a number of seconds; got ${JSON.stringify(env.MESH_WAIT_SECONDS)}`);

const peers = (env.MESH_PEERS ?? "")
  .split(",")
  .map((entry) => entry.trim())
  .filter((entry) => entry !== "")
  .map((entry) => {
    const match = /^([a-z]+)=([A-Za-z0-9.-]+):(\d+)$/.exec(entry);
    if (!match) fail(`MESH_PEERS entries are <role>=<host>:<pods to wait for>; got ${JSON.stringify(entry)}`);
    return { role: match[1], host: match[2], expected: Number(match[3]) };
  });
if (peers.length === 0) fail("MESH_PEERS lists no role");

const nodeId = nodeIdOf(role, podIp);
if (nodeId.length > 64) fail(`the node id ${nodeId} is longer than the 64 characters NODE_ID allows`);

let lastLookupError = "";

/** The addresses DNS gives for a role's Service now; none while it has no pods (NXDOMAIN). */
async function addressesOf(peer) {
  try {
    const answers = await lookup(peer.host, { all: true, family });
    return new Set(answers.map((answer) => canonical(answer.address)));
  } catch (error) {
    lastLookupError = `${peer.host}: ${error.code ?? error.message}`;
    return new Set();
  }
}

const deadline = Date.now() + waitSeconds * 1000;
let found;
for (;;) {
  found = await Promise.all(peers.map(async (peer) => ({ ...peer, addresses: await addressesOf(peer) })));
  // This pod counts among its own role's even before DNS lists it.
  for (const peer of found) if (peer.role === role) peer.addresses.add(podIp);
  const short = found.filter((peer) => peer.addresses.size < peer.expected);
  if (short.length === 0) break;
  if (Date.now() >= deadline) {
    const counts = short.map((peer) => `${peer.role} ${peer.addresses.size} of ${peer.expected}`).join(", ");
    process.stderr.write(`mesh-env: starting after ${waitSeconds} s with fewer pods in DNS than expected (${counts})${lastLookupError ? `; last lookup error ${lastLookupError}` : ""}\n`);
    break;
  }
  await sleep(1000);
}

const entries = [`${podIp}:${port}/${nodeId}`];
for (const peer of found) {
  for (const ip of [...peer.addresses].sort()) {
    if (ip !== podIp) entries.push(`${ip}:${port}/${nodeIdOf(peer.role, ip)}`);
  }
}
process.stdout.write(`${nodeId} tcp://${entries.join(",")}\n`);
