// Webhook agents: AGENTS agents (5) in WEBHOOK mode, each pointed at the sidecar's HTTPS receiver,
// which checks both signature header sets of every delivery with the agent's secret key. Each VU
// is a user writing to one agent; each message must reach the agent's endpoint, and the time from
// send to delivery is the parley_webhook_delivery_ms trend. Needs WEBHOOK_TLS_DIR (see run.ts).
// Size: VUS (5), DURATION (30s), PAUSE_MS between messages per user (200).
import { check, fail } from "k6";
import http from "k6/http";
import type { Options } from "k6/options";
import { Counter, Trend } from "k6/metrics";
import { createAgent, envNumber, messagesLost, nextClientMessageId, pause, rpc, rpcAsync, sidecarUrl, signIn, textBody, zeroDeliveryCounters, type Agent, guarded, type Session, summaryTrendStats } from "../lib/parley.ts";

const webhookDelivery = new Trend("parley_webhook_delivery_ms", true);
const badSignatures = new Counter("parley_webhook_bad_signatures");

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    webhookAgents: { executor: "constant-vus", vus: envNumber("VUS", 5), duration: __ENV.DURATION || "30s", gracefulStop: "30s" },
  },
  setupTimeout: "120s",
  thresholds: {
    checks: ["rate>0.99"],
    "http_req_failed{name:MessageService/SendMessage}": ["rate<0.01"],
    parley_webhook_delivery_ms: ["p(95)<1000", "p(99)<2000"],
    parley_webhook_bad_signatures: ["count==0"],
    parley_messages_lost: ["count==0"],
    parley_iteration_errors: ["count==0"],
  },
};

const agentCount = Math.max(1, envNumber("AGENTS", 5));
const pauseMs = envNumber("PAUSE_MS", 200);

interface Setup {
  owners: Session[];
  agents: Agent[];
}

/** Tells the sidecar which key the agent's deliveries are signed with from now on. */
function register(agentUserId: number, secretKey: string): void {
  http.post(`${sidecarUrl}/agents`, JSON.stringify({ agentUserId, secretKey }), { headers: { "Content-Type": "application/json" }, tags: { name: "sidecar" } });
}

export function setup(): Setup {
  const webhookUrl = __ENV.WEBHOOK_URL;
  if (!webhookUrl) fail("WEBHOOK_URL is empty: run with WEBHOOK_TLS_DIR set (see scripts/k6/run.ts)");
  const owners: Session[] = [];
  const agents: Agent[] = [];
  for (let i = 0; i < agentCount; i++) {
    const owner = signIn("webhook-owner");
    const agent = createAgent(owner, `webhook ${i}`);
    // The test request of the configuration is signed with the key the agent holds now.
    register(agent.userId, agent.secretKey);
    const configured = rpc<{ secretKey: string }>("AgentService/SetAgentConfig", { agentUserId: agent.userId, deliveryMode: "AGENT_DELIVERY_MODE_WEBHOOK", webhookUrl: `${webhookUrl}/${agent.userId}` }, owner.accessToken);
    register(agent.userId, configured.secretKey);
    owners.push(owner);
    agents.push({ ...agent, secretKey: configured.secretKey });
  }
  return { owners, agents };
}

async function deliveredAt(agent: Agent, messageId: string, timeoutMs: number): Promise<number | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const response = await http.asyncRequest("GET", `${sidecarUrl}/webhooks/seen?agent=${agent.userId}&message=${messageId}`, null, { tags: { name: "sidecar" }, responseCallback: http.expectedStatuses(200, 404) });
    if (response.status === 200) return (response.json() as { seenAt: number }).seenAt;
    await pause(25);
  }
  return undefined;
}

async function webhookAgentsIteration(data: Setup): Promise<void> {
  zeroDeliveryCounters();
  const index = (__VU - 1) % data.agents.length;
  const [owner, agent] = [data.owners[index], data.agents[index]];
  const sentAt = Date.now();
  const { messageId } = await rpcAsync<{ messageId: string }>("MessageService/SendMessage", { conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody("hello agent") }, owner.accessToken);
  const arrived = await deliveredAt(agent, messageId, 15_000);
  check(arrived, { "the message reached the agent's webhook, signed": (at) => at !== undefined });
  if (arrived === undefined) messagesLost.add(1);
  else webhookDelivery.add(arrived - sentAt);
  await pause(pauseMs);
}

export function teardown(): void {
  const counts = http.get(`${sidecarUrl}/webhooks`, { tags: { name: "sidecar" } }).json() as { valid: number; invalid: number; probes: number };
  badSignatures.add(counts.invalid);
  check(counts, { "every agent's webhook was checked before it was accepted": (c) => c.probes >= agentCount });
}

export default function webhookAgents(data: Setup): Promise<void> {
  return guarded(() => webhookAgentsIteration(data));
}
