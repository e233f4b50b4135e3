// Agent streaming: each VU is a user and the user's agent in WebSocket mode, both connected. The
// user asks; the agent, on seeing the question on its socket, streams a reply of TOKENS deltas
// (30), PAUSE_MS apart (20), and ends it; the user watches START, every delta in order, then END
// with the whole text. Trends: the first token's time from the question, and each delta's time
// from its push to the watcher's socket. Size: VUS (10), DURATION (30s).
import { check } from "k6";
import type { Options } from "k6/options";
import { Trend } from "k6/metrics";
import {
  createAgent,
  deliveryThresholds,
  envNumber,
  Gateway,
  guarded,
  messagesLost,
  nextClientMessageId,
  pause,
  rpcAsync,
  signIn,
  streamStartBody,
  textBody,
  waitUntil,
  zeroDeliveryCounters,
  type Agent,
  type MessageEnvelope,
  summaryTrendStats,
  type Session,
} from "../lib/parley.ts";

const firstToken = new Trend("parley_stream_first_token_ms", true);
const deltaToWatcher = new Trend("parley_stream_delta_push_ms", true);

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    agentStreaming: { executor: "constant-vus", vus: envNumber("VUS", 10), duration: __ENV.DURATION || "30s", gracefulStop: "30s" },
  },
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    "http_req_duration{name:MessageService/PushStreamDelta}": ["p(95)<200", "p(99)<500"],
    parley_stream_first_token_ms: ["p(95)<1000", "p(99)<2000"],
    parley_stream_delta_push_ms: ["p(95)<300", "p(99)<800"],
    ...deliveryThresholds,
  },
};

const tokens = envNumber("TOKENS", 30);
const pauseMs = envNumber("PAUSE_MS", 20);

let pair: { user: Session; agent: Agent } | undefined;

async function agentStreamingIteration(): Promise<void> {
  zeroDeliveryCounters();
  if (!pair) {
    const user = signIn("streaming");
    pair = { user, agent: createAgent(user, "streamer") };
  }
  const { user, agent } = pair;
  const watched: { envelope: MessageEnvelope; at: number }[] = [];
  const userSocket = new Gateway(user.accessToken, (pushed) => {
    if (pushed.envelope) watched.push({ envelope: pushed.envelope, at: Date.now() });
  });
  // The question's id, known once SendMessage answers; the agent's socket may show it before.
  const asked: { messageId?: string } = {};
  let answered: Promise<string> | undefined;
  const deltaSentAt = new Map<number, number>();

  const stream = async (): Promise<string> => {
    const { messageId } = await rpcAsync<{ messageId: string }>("MessageService/SendMessage", { conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: streamStartBody() }, agent.token);
    let text = "";
    for (let seq = 1; seq <= tokens; seq++) {
      const delta = `token${seq} `;
      deltaSentAt.set(seq, Date.now());
      await rpcAsync("MessageService/PushStreamDelta", { conversationId: agent.conversationId, messageId, seq, delta }, agent.token);
      text += delta;
      await pause(pauseMs);
    }
    await rpcAsync("MessageService/EndStream", { conversationId: agent.conversationId, messageId, accumulatedText: text }, agent.token);
    return messageId;
  };
  const agentSaw: string[] = [];
  const agentSocket = new Gateway(agent.token, (pushed) => {
    if (pushed.envelope) agentSaw.push(pushed.envelope.messageId);
    // The agent answers its question as soon as its socket shows it.
    if (!answered && asked.messageId !== undefined && pushed.envelope?.messageId === asked.messageId) answered = stream();
  });
  await Promise.all([userSocket.ready, agentSocket.ready]);

  const askedAt = Date.now();
  asked.messageId = (await rpcAsync<{ messageId: string }>("MessageService/SendMessage", { conversationId: agent.conversationId, clientMessageId: nextClientMessageId(), body: textBody("tell me a story") }, user.accessToken)).messageId;
  // The push may come before SendMessage answers (then it passed by unrecognised): look once more.
  if (!answered && agentSaw.includes(asked.messageId)) answered = stream();
  if (!answered) await waitUntil(() => answered !== undefined, 5000);
  check(answered, { "the agent's socket got the question": (a) => a !== undefined });
  if (!answered) return;
  const messageId = await answered;

  // Message ids count per conversation.
  const ofStream = () => watched.filter((w) => w.envelope.conversationId === agent.conversationId && w.envelope.messageId === messageId);
  await waitUntil(() => ofStream().some((w) => w.envelope.body?.stream?.phase === "STREAM_PHASE_END"), 10_000);
  const seen = ofStream();
  const deltas = seen.filter((w) => w.envelope.body?.stream?.phase === "STREAM_PHASE_DELTA");
  if (deltas.length > 0) firstToken.add(deltas[0].at - askedAt);
  for (const delta of deltas) {
    const sentAt = deltaSentAt.get(delta.envelope.body?.stream?.seq ?? 0);
    if (sentAt !== undefined) deltaToWatcher.add(delta.at - sentAt);
  }
  messagesLost.add(Math.max(0, tokens - deltas.length));
  const phases = seen.map((w) => w.envelope.body?.stream?.phase);
  const whole = check(phases, {
    "the user watched START, every delta, then END": (p) => p[0] === "STREAM_PHASE_START" && p.length === tokens + 2 && p[p.length - 1] === "STREAM_PHASE_END",
  });
  if (!whole) console.warn(`stream ${messageId} in ${agent.conversationId}: the user saw ${phases.map((p) => `${p?.replace("STREAM_PHASE_", "")}`).join(" ")}`);
  check(deltas.map((w) => w.envelope.body?.stream?.seq), { "deltas arrived in order": (seqs) => seqs.every((seq, i) => seq === i + 1) });
  check(seen[seen.length - 1]?.envelope.body?.stream?.accumulatedText ?? "", { "END carries the whole text": (text) => text.split(" ").filter(Boolean).length === tokens });
  await Promise.all([userSocket.close(), agentSocket.close()]);
}

export default function agentStreaming(): Promise<void> {
  return guarded(() => agentStreamingIteration());
}
