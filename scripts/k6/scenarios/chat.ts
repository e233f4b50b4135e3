// Users exchanging private messages: each VU is a pair of friends, both connected, taking turns
// to send; each socket checks that every message sent to it arrives (once), and the time from
// send to push is the parley_send_to_push_ms trend. Size: VUS pairs (10), DURATION (30s),
// MESSAGES per session (20), PAUSE_MS between sends (100).
import { check } from "k6";
import type { Options } from "k6/options";
import { befriend, deliveryThresholds, envNumber, ExpectedMessages, Gateway, pause, sendText, signIn, zeroDeliveryCounters, guarded, type Session, summaryTrendStats } from "../lib/parley.ts";

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    chat: { executor: "constant-vus", vus: envNumber("VUS", 10), duration: __ENV.DURATION || "30s", gracefulStop: "15s" },
  },
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    "http_req_duration{name:MessageService/SendMessage}": ["p(95)<300", "p(99)<800"],
    parley_send_to_push_ms: ["p(95)<500", "p(99)<1000"],
    ...deliveryThresholds,
  },
};

const messagesPerSession = envNumber("MESSAGES", 20);
const pauseMs = envNumber("PAUSE_MS", 100);

let pair: { a: Session; b: Session; conversationId: string } | undefined;

async function chatIteration(): Promise<void> {
  zeroDeliveryCounters();
  if (!pair) {
    const a = signIn("chat");
    const b = signIn("chat");
    pair = { a, b, conversationId: befriend(a, b) };
  }
  const { a, b, conversationId } = pair;
  const toA = new ExpectedMessages();
  const toB = new ExpectedMessages();
  const socketA = new Gateway(a.accessToken, (pushed) => toA.note(pushed));
  const socketB = new Gateway(b.accessToken, (pushed) => toB.note(pushed));
  await Promise.all([socketA.ready, socketB.ready]);

  let accepted = 0;
  for (let i = 0; i < messagesPerSession; i++) {
    const [sender, receiver] = i % 2 === 0 ? [a, toB] : [b, toA];
    if (await sendText(sender, conversationId, `chat ${i}`, [receiver])) accepted++;
    await pause(pauseMs);
  }
  check(accepted, { "every send was accepted": (n) => n === messagesPerSession });
  const lost = (await toA.settle(10_000)) + (await toB.settle(10_000));
  check(lost, { "every accepted message reached its receiver's socket": (n) => n === 0 });
  await Promise.all([socketA.close(), socketB.close()]);
}

export default function chat(): Promise<void> {
  return guarded(() => chatIteration());
}
