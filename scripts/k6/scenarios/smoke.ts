// One pass over the paths every deployment needs, run by CI: sign-in, friends, private messages
// both ways seen over the WebSocket, an agent streaming a reply token by token to its watching
// creator, and a dropped connection caught up with GetDifference. Every check must hold.
import { check } from "k6";
import type { Options } from "k6/options";
import {
  befriend,
  createAgent,
  currentSn,
  deliveryThresholds,
  ExpectedMessages,
  Gateway,
  getDifference,
  guarded,
  rpc,
  rpcAsync,
  sendText,
  signIn,
  streamStartBody,
  waitUntil,
  zeroDeliveryCounters,
  type MessageEnvelope,
  summaryTrendStats,
  type Pushed,
} from "../lib/parley.ts";

export const options: Options = {
  summaryTrendStats,
  vus: 1,
  iterations: 1,
  thresholds: {
    checks: ["rate==1"],
    http_req_failed: ["rate==0"],
    parley_send_to_push_ms: ["p(95)<1000"],
    ...deliveryThresholds,
  },
};

const tokens = ["Hello", ", ", "I am ", "a streaming ", "agent."];

async function smokeIteration(): Promise<void> {
  zeroDeliveryCounters();
  const alice = signIn("alice");
  const bob = signIn("bob");
  check(alice, { "signed in with a code": (s) => s.userId > 0 && s.accessToken !== "" });
  const conversationId = befriend(alice, bob);

  const toAlice = new ExpectedMessages();
  const toBob = new ExpectedMessages();
  const aliceSees: MessageEnvelope[] = [];
  const aliceSocket = new Gateway(alice.accessToken, (pushed: Pushed) => {
    toAlice.note(pushed);
    if (pushed.envelope) aliceSees.push(pushed.envelope);
  });
  const bobSocket = new Gateway(bob.accessToken, (pushed) => toBob.note(pushed));
  await Promise.all([aliceSocket.ready, bobSocket.ready]);

  check(await sendText(alice, conversationId, "hi bob", [toBob]), { "alice's message is accepted": (ok) => ok });
  check(await sendText(bob, conversationId, "hi alice", [toAlice]), { "bob's message is accepted": (ok) => ok });
  check(await toBob.settle(5000), { "bob's socket got alice's message": (lost) => lost === 0 });
  check(await toAlice.settle(5000), { "alice's socket got bob's message": (lost) => lost === 0 });

  // An agent in WebSocket mode streams its answer to a message from its creator.
  const agent = createAgent(alice, "smoke");
  const agentInbox: MessageEnvelope[] = [];
  const agentSocket = new Gateway(agent.token, (pushed) => {
    if (pushed.envelope) agentInbox.push(pushed.envelope);
  });
  await agentSocket.ready;
  const asked = await rpcAsync<{ messageId: string }>("MessageService/SendMessage", { conversationId: agent.conversationId, clientMessageId: "1", body: { type: "MESSAGE_TYPE_TEXT", text: { text: "stream me something" } } }, alice.accessToken);
  check(await waitUntil(() => agentInbox.some((e) => e.conversationId === agent.conversationId && e.messageId === asked.messageId), 5000), { "the agent's socket got the question": (got) => got });
  const { messageId } = await rpcAsync<{ messageId: string }>("MessageService/SendMessage", { conversationId: agent.conversationId, clientMessageId: "1", body: streamStartBody() }, agent.token);
  for (let seq = 1; seq <= tokens.length; seq++) {
    await rpcAsync("MessageService/PushStreamDelta", { conversationId: agent.conversationId, messageId, seq, delta: tokens[seq - 1] }, agent.token);
  }
  const answer = tokens.join("");
  await rpcAsync("MessageService/EndStream", { conversationId: agent.conversationId, messageId, accumulatedText: answer }, agent.token);
  // Message ids count per conversation: the stream is known by both.
  const ofStream = () => aliceSees.filter((e) => e.conversationId === agent.conversationId && e.messageId === messageId);
  const phasesOf = () => ofStream().map((e) => e.body?.stream?.phase);
  await waitUntil(() => phasesOf().includes("STREAM_PHASE_END"), 5000);
  check(phasesOf(), {
    "the creator watched START, every delta, then END": (phases) =>
      phases.length === tokens.length + 2 && phases[0] === "STREAM_PHASE_START" && phases.slice(1, -1).every((p) => p === "STREAM_PHASE_DELTA") && phases[phases.length - 1] === "STREAM_PHASE_END",
  });
  const deltas = ofStream()
    .filter((e) => e.body?.stream?.phase === "STREAM_PHASE_DELTA")
    .map((e) => e.body?.stream?.delta ?? "");
  check(deltas.join(""), { "the deltas spell the answer in order": (text) => text === answer });
  const stored = rpc<{ message?: MessageEnvelope }>("MessageService/GetMessage", { conversationId: agent.conversationId, messageId }, alice.accessToken);
  check(stored.message?.body?.stream, { "the stored stream ended with its text": (s) => s?.phase === "STREAM_PHASE_END" && s.accumulatedText === answer });

  // Bob drops his connection; what he missed comes back by GetDifference, without a gap.
  await bobSocket.close();
  const bobSn = bobSocket.lastSn ?? currentSn(bob);
  const missed = [];
  for (let i = 1; i <= 3; i++) missed.push(await sendText(alice, conversationId, `while you were away ${i}`, []));
  const caughtUp = getDifference(bob, bobSn);
  const texts = caughtUp.map((u) => u.messageEnvelope?.body?.text?.text);
  check(texts, { "GetDifference brings the three missed messages in order": (t) => JSON.stringify(t.slice(-3)) === JSON.stringify(["while you were away 1", "while you were away 2", "while you were away 3"]) });
  check(missed, { "the missed messages were accepted": (m) => m.every(Boolean) });

  await Promise.all([aliceSocket.close(), agentSocket.close()]);
}

export default function smoke(): Promise<void> {
  return guarded(() => smokeIteration());
}
