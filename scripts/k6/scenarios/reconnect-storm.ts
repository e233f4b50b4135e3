// Reconnect storm: each VU is a pair of friends; the watcher's connection drops, the other sends
// MISSED messages (5) meanwhile, and the watcher reconnects and catches up with GetDifference from
// the last sn it saw: every missed message must come back, no sn skipped or repeated, and new
// messages arrive live again. All VUs do this together, so reconnects come in bursts.
// Trend: reconnect plus catch-up time. Size: VUS (50), DURATION (30s).
import { check } from "k6";
import type { Options } from "k6/options";
import { Trend } from "k6/metrics";
import { befriend, deliveryThresholds, envNumber, ExpectedMessages, Gateway, getDifference, messagesLost, pause, sendText, signIn, waitUntil, zeroDeliveryCounters, guarded, type Session, summaryTrendStats } from "../lib/parley.ts";

const catchUp = new Trend("parley_reconnect_catch_up_ms", true);

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    reconnectStorm: { executor: "constant-vus", vus: envNumber("VUS", 50), duration: __ENV.DURATION || "30s", gracefulStop: "15s" },
  },
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    "http_req_duration{name:SyncService/GetDifference}": ["p(95)<300", "p(99)<800"],
    parley_reconnect_catch_up_ms: ["p(95)<1000", "p(99)<2000"],
    ...deliveryThresholds,
  },
};

const missedPerDrop = envNumber("MISSED", 5);

let pair: { watcher: Session; sender: Session; conversationId: string; lastSn?: number } | undefined;

async function reconnectStormIteration(): Promise<void> {
  zeroDeliveryCounters();
  if (!pair) {
    const watcher = signIn("reconnect");
    const sender = signIn("reconnect");
    pair = { watcher, sender, conversationId: befriend(sender, watcher) };
  }
  const { watcher, sender, conversationId } = pair;

  // Connected, then dropped: the last sn seen is where the catch-up starts.
  const live = new ExpectedMessages();
  const first = new Gateway(watcher.accessToken, (pushed) => live.note(pushed), { afterSn: pair.lastSn });
  await first.ready;
  await sendText(sender, conversationId, "before the drop", [live]);
  await live.settle(5000);
  await first.close();
  const afterSn = first.lastSn ?? 0;

  const missed: string[] = [];
  for (let i = 0; i < missedPerDrop; i++) {
    const text = `missed ${__ITER}.${i}`;
    if (await sendText(sender, conversationId, text, [])) missed.push(text);
  }

  // A client takes what it missed from GetDifference and from its new connection together: an
  // update may come by both (its push raced the catch-up), and each counts once, by sn.
  const reconnectAt = Date.now();
  const again = new ExpectedMessages();
  const backLive = new Set<string>();
  const second = new Gateway(watcher.accessToken, (pushed) => {
    again.note(pushed);
    const text = pushed.envelope?.body?.text?.text;
    if (text !== undefined) backLive.add(text);
  });
  await second.ready;
  const caughtUp = getDifference(watcher, afterSn);
  const backByDifference = new Set(caughtUp.map((u) => u.messageEnvelope?.body?.text?.text));
  const notBack = () => missed.filter((text) => !backByDifference.has(text) && !backLive.has(text)).length;
  await waitUntil(() => notBack() === 0, 5000);
  catchUp.add(Date.now() - reconnectAt);
  messagesLost.add(notBack());
  check(notBack(), { "every missed message came back, by GetDifference or live": (n) => n === 0 });
  // The live socket's sn checks go on from what the catch-up returned.
  second.skipTo(caughtUp.length > 0 ? caughtUp[caughtUp.length - 1].sn : afterSn);
  await sendText(sender, conversationId, "after the catch-up", [again]);
  check(await again.settle(5000), { "messages arrive live again after reconnecting": (lost) => lost === 0 });
  pair.lastSn = second.lastSn;
  await second.close();
  await pause(100);
}

export default function reconnectStorm(): Promise<void> {
  return guarded(() => reconnectStormIteration());
}
