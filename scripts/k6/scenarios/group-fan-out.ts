// Group fan-out: each VU is one group of GROUP_SIZE members (50), every member connected; members
// take turns to post, and every other member's socket must get each post once. The trend is the
// time from a send to each member's push. Size: VUS groups (2), DURATION (30s), MESSAGES per
// session (10), PAUSE_MS between posts (200).
import { check } from "k6";
import type { Options } from "k6/options";
import { deliveryThresholds, envNumber, ExpectedMessages, Gateway, pause, rpc, sendText, signIn, waitUntil, zeroDeliveryCounters, guarded, type Session, summaryTrendStats } from "../lib/parley.ts";

export const options: Options = {
  summaryTrendStats,
  scenarios: {
    groupFanOut: { executor: "constant-vus", vus: envNumber("VUS", 2), duration: __ENV.DURATION || "30s", gracefulStop: "30s" },
  },
  setupTimeout: "120s",
  thresholds: {
    checks: ["rate>0.99"],
    http_req_failed: ["rate<0.01"],
    "http_req_duration{name:MessageService/SendMessage}": ["p(95)<500", "p(99)<1000"],
    parley_send_to_push_ms: ["p(95)<1000", "p(99)<2000"],
    ...deliveryThresholds,
  },
};

const groupSize = Math.max(2, envNumber("GROUP_SIZE", 50));
const messagesPerSession = envNumber("MESSAGES", 10);
const pauseMs = envNumber("PAUSE_MS", 200);

let group: { members: Session[]; conversationId: string } | undefined;

function makeGroup(): { members: Session[]; conversationId: string } {
  const members = Array.from({ length: groupSize }, () => signIn("group"));
  const created = rpc<{ group: { groupId: string } }>("GroupService/CreateGroup", { name: `k6 ${__VU}`, memberIds: members.slice(1).map((m) => m.userId) }, members[0].accessToken);
  return { members, conversationId: created.group.groupId };
}

async function groupFanOutIteration(): Promise<void> {
  zeroDeliveryCounters();
  group ??= makeGroup();
  const { members, conversationId } = group;
  const inboxes = members.map(() => new ExpectedMessages());
  const sockets = members.map((member, i) => new Gateway(member.accessToken, (pushed) => inboxes[i].note(pushed)));
  await Promise.all(sockets.map((s) => s.ready));

  let accepted = 0;
  for (let i = 0; i < messagesPerSession; i++) {
    const senderIndex = i % members.length;
    const others = inboxes.filter((_, k) => k !== senderIndex);
    if (await sendText(members[senderIndex], conversationId, `group post ${i}`, others)) accepted++;
    await pause(pauseMs);
  }
  check(accepted, { "every post was accepted": (n) => n === messagesPerSession });
  await waitUntil(() => inboxes.every((inbox) => inbox.outstanding() === 0), 15_000);
  let lost = 0;
  for (const inbox of inboxes) lost += await inbox.settle(0);
  check(lost, { "every member's socket got every post": (n) => n === 0 });
  await Promise.all(sockets.map((s) => s.close()));
}

export default function groupFanOut(): Promise<void> {
  return guarded(() => groupFanOutIteration());
}
