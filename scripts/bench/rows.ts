// The benchmark's rows. Each fan-out row runs, in order: Parley in a closed loop, the relay in a
// closed loop moving the very bytes Parley pushed (a captured push, marker rewritten) to the same
// number of sockets, then Parley in an open loop at the row's fixed rate.
import type WebSocket from "ws";
import type { Fixture } from "./fixture.js";
import { closedLoop, marker, median, openLoop, percentile, writeMarker, type Timing, type Tracker, type WindowFigures, type Workload } from "./load.js";
import { rssKb, type BackingPids } from "./processes.js";
import type { LocalPushProviders, PushFixture } from "./push-fixture.js";
import { closeAll, openGatewaySocket, paths, protoHeaders, relayHeader, sendMessageBody, streamDeltaBody, type Headers, type PushRouter, type RpcClient } from "./wire.js";

export type RowName = "private" | "group" | "delta" | "rpc" | "rss" | "push";
export const rowNames: RowName[] = ["private", "group", "delta", "rpc", "rss", "push"];

/** One run's figures of one row, by name; `median` folds several runs. */
export type Figures = Record<string, number>;

export interface BenchContext {
  fixture: Fixture;
  wsUrl: string;
  parley: RpcClient;
  echo: RpcClient;
  router: PushRouter;
  /** Relay socket i stands for fixture.users[i], as gateway socket i does. */
  relaySockets: WebSocket[];
  serverPids: number[];
  /** The backing services' processes (none for the server on SQLite): their CPU per operation is reported beside Parley's. */
  backingPids: BackingPids;
  relayPid: number;
  echoPid: number;
  /** Asks the server to collect garbage, when it was started by the benchmark. */
  collectGarbage?: () => void;
  concurrency: number;
  closed: Timing;
  open: Timing;
  rates: { private: number; group: number; delta: number };
  idleSockets: number;
  /** The push row's providers and recipients; only when it runs (the benchmark started the server pointed at those providers). */
  push?: { providers: LocalPushProviders; fixture: PushFixture };
}

/** Who sends and who receives each lane's operations, as socket indices. */
interface Route {
  fanOut: number;
  sender(lane: number): number;
  recipients(lane: number): number[];
  /** Lanes beyond this repeat earlier ones (for caching relay headers). */
  distinctLanes: number;
}

const log = (text: string) => process.stderr.write(`bench: ${text}\n`);

function routes(fixture: Fixture): Record<"private" | "group" | "delta", Route> {
  const { pairs, group, streams } = fixture;
  return {
    private: { fanOut: 2, sender: (lane) => pairs[lane % pairs.length].a, recipients: (lane) => [pairs[lane % pairs.length].a, pairs[lane % pairs.length].b], distinctLanes: pairs.length },
    group: { fanOut: group.members.length, sender: (lane) => group.members[lane % group.members.length], recipients: () => group.members, distinctLanes: group.members.length },
    // The agent streaming has no socket; on the relay the owner's friend's socket stands in as the sender.
    delta: { fanOut: 1, sender: () => -1, recipients: (lane) => [streams[lane % streams.length].owner], distinctLanes: streams.length },
  };
}

function parleyWorkload(row: "private" | "group" | "delta", context: BenchContext, route: Route): Workload {
  const { fixture, parley } = context;
  const headers: Headers[] = fixture.users.map((u) => protoHeaders(u.accessToken));
  const base = { fanOut: route.fanOut, echoSocket: (lane: number) => route.sender(lane) };
  if (row !== "delta") {
    const { pairs, group } = fixture;
    const conversation = row === "private" ? (lane: number) => pairs[lane % pairs.length].conversationId : () => group.conversationId;
    return {
      ...base,
      prepare: (id, lane) => sendMessageBody(conversation(lane), marker(id)),
      post: (lane, body) => parley.post(paths.sendMessage, headers[route.sender(lane)], body),
    };
  }
  const { streams } = fixture;
  const agentHeaders = streams.map((s) => protoHeaders(s.agentToken));
  return {
    ...base,
    // The seq is taken when the body is made, in lane order, which is the order of sending.
    prepare: (id, lane) => {
      const stream = streams[lane % streams.length];
      return streamDeltaBody(stream.conversationId, stream.messageId, ++stream.seq, `${marker(id)} `);
    },
    post: (lane, body) => parley.post(paths.pushStreamDelta, agentHeaders[lane % streams.length], body),
  };
}

function relayWorkload(context: BenchContext, route: Route, sample: NonNullable<Tracker["sample"]>): Workload {
  const headers = Array.from({ length: route.distinctLanes }, (_, lane) => relayHeader(route.recipients(lane)));
  const senders = Array.from({ length: route.distinctLanes }, (_, lane) => {
    const sender = route.sender(lane);
    return context.relaySockets[sender >= 0 ? sender : route.recipients(lane)[0] ^ 1];
  });
  const { frame, markerAt } = sample;
  return {
    fanOut: route.fanOut,
    echoSocket: (lane) => route.sender(lane),
    prepare: (id, lane) => {
      const header = headers[lane % route.distinctLanes];
      const bytes = Buffer.allocUnsafe(header.length + frame.length);
      header.copy(bytes, 0);
      frame.copy(bytes, header.length);
      writeMarker(bytes, header.length + markerAt, id);
      return bytes;
    },
    post: (lane, body) => {
      senders[lane % route.distinctLanes].send(body);
      return Promise.resolve(true);
    },
  };
}

const perSecond = (w: WindowFigures) => w.operations / w.seconds;
/** Figure names of a backing service's CPU per operation: `backing:<service>` (ms). */
export const backingFigure = (service: string) => `backing:${service}`;
/**
 * Names, among the backing processes, of a group of Parley's own processes (the cluster's roles):
 * measured the same way, reported apart (they are part of Parley's own CPU, not beside it).
 */
export const roleFigure = (role: string) => `role:${role}`;
const backingPerOp = (w: WindowFigures): Figures => Object.fromEntries(Object.entries(w.backingCpuMs).map(([service, ms]) => [backingFigure(service), ms / w.operations]));
const cpuPercent = (w: WindowFigures) => (w.clientCpuMs / (w.seconds * 1000)) * 100;

async function measureFanOut(row: "private" | "group" | "delta", context: BenchContext): Promise<Figures> {
  const route = routes(context.fixture)[row];
  const parleyClosed = await closedLoop(parleyWorkload(row, context, route), context.concurrency, context.closed, context.serverPids, context.router, context.backingPids);
  const figures: Figures = {
    ...backingPerOp(parleyClosed.window),
    opsPerSec: perSecond(parleyClosed.window),
    cpuPerOpMs: parleyClosed.window.serverCpuMs / parleyClosed.window.operations,
    cpuPerDeliveryUs: (parleyClosed.window.serverCpuMs * 1000) / parleyClosed.window.deliveries,
    loopbackBytesPerOp: parleyClosed.window.loopbackBytes / parleyClosed.window.operations,
    clientCpuPct: cpuPercent(parleyClosed.window),
    closedFailed: parleyClosed.tracker.errors + parleyClosed.tracker.lost,
  };
  log(`${row}: closed loop ${figures.opsPerSec.toFixed(0)} op/s, ${figures.cpuPerOpMs.toFixed(3)} ms server CPU/op`);

  const sample = parleyClosed.tracker.sample;
  if (sample) {
    const relay = await closedLoop(relayWorkload(context, route, sample), context.concurrency, context.closed, [context.relayPid], context.router);
    figures.relayOpsPerSec = perSecond(relay.window);
    figures.relayCpuPerDeliveryUs = (relay.window.serverCpuMs * 1000) / relay.window.deliveries;
    figures.relayClientCpuPct = cpuPercent(relay.window);
    log(`${row}: relay ${figures.relayOpsPerSec.toFixed(0)} op/s, ${figures.relayCpuPerDeliveryUs.toFixed(1)} µs relay CPU/delivery`);
  } else log(`${row}: no push arrived, so the relay has no frame to move`);

  const rate = context.rates[row];
  const open = await openLoop(parleyWorkload(row, context, route), rate, context.open, context.serverPids, context.router);
  Object.assign(figures, {
    rate,
    sentRate: open.sentRate,
    p50Ms: percentile(open.tracker.deliveryLatencies, 50),
    p99Ms: percentile(open.tracker.deliveryLatencies, 99),
    messageP99Ms: percentile(open.tracker.messageLatencies, 99),
    openCpuPerOpMs: open.window.serverCpuMs / open.window.operations,
    late: open.late,
    maxLateMs: open.maxLateMs,
    openFailed: open.tracker.errors + open.tracker.lost,
    openClientCpuPct: cpuPercent(open.window),
  });
  log(`${row}: open loop at ${rate}/s, p50 ${figures.p50Ms.toFixed(2)} ms, p99 ${figures.p99Ms.toFixed(2)} ms, ${open.late} late sends, at most ${open.tracker.maxInFlight} in flight`);
  return figures;
}

async function measureRpc(context: BenchContext): Promise<Figures> {
  const { fixture, parley, echo } = context;
  const headers = fixture.users.map((u) => protoHeaders(u.accessToken));
  const empty = new Uint8Array(0);
  const parleyRun = await closedLoop(
    { fanOut: 0, echoSocket: () => -1, prepare: () => empty, post: (lane, body) => parley.post(paths.getProfile, headers[lane % headers.length], body) },
    context.concurrency,
    context.closed,
    context.serverPids,
    context.router,
    context.backingPids,
  );
  const echoBody = Buffer.from("{}");
  const echoHeaders = { "content-type": "application/json" };
  const echoRun = await closedLoop({ fanOut: 0, echoSocket: () => -1, prepare: () => echoBody, post: (_lane, body) => echo.post("/echo", echoHeaders, body) }, context.concurrency, context.closed, [context.echoPid], context.router);
  const figures: Figures = {
    ...backingPerOp(parleyRun.window),
    opsPerSec: perSecond(parleyRun.window),
    cpuPerOpMs: parleyRun.window.serverCpuMs / parleyRun.window.operations,
    clientCpuPct: cpuPercent(parleyRun.window),
    closedFailed: parleyRun.tracker.errors,
    echoOpsPerSec: perSecond(echoRun.window),
    echoCpuPerOpMs: echoRun.window.serverCpuMs / echoRun.window.operations,
  };
  log(`rpc: GetProfile ${figures.opsPerSec.toFixed(0)} req/s, ${figures.cpuPerOpMs.toFixed(3)} ms server CPU/req; echo ${figures.echoCpuPerOpMs.toFixed(3)} ms/req`);
  return figures;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The server's RSS once garbage is collected (when it can be asked) or the lowest of a few readings. */
async function settledRssKb(context: BenchContext): Promise<number> {
  const readings: number[] = [];
  for (let i = 0; i < 4; i++) {
    context.collectGarbage?.();
    await sleep(750);
    readings.push(rssKb(context.serverPids));
  }
  return Math.min(...readings);
}

async function measureIdleSockets(context: BenchContext): Promise<Figures> {
  const { users } = context.fixture;
  const before = await settledRssKb(context);
  const sockets: WebSocket[] = [];
  try {
    for (let start = 0; start < context.idleSockets; start += 100) {
      const batch = Array.from({ length: Math.min(100, context.idleSockets - start) }, (_, k) => openGatewaySocket(context.wsUrl, users[(start + k) % users.length].accessToken));
      sockets.push(...(await Promise.all(batch)));
    }
    const after = await settledRssKb(context);
    const figures = { idleSockets: context.idleSockets, rssBeforeMb: before / 1024, rssAfterMb: after / 1024, rssPerSocketKb: (after - before) / context.idleSockets };
    log(`rss: ${figures.rssPerSocketKb.toFixed(2)} KiB per idle socket (${figures.rssBeforeMb.toFixed(0)} → ${figures.rssAfterMb.toFixed(0)} MiB)`);
    return figures;
  } finally {
    await closeAll(sockets);
  }
}

/** The sender of the push row's messages: its socket gets the echo of each, which is what ends an operation in the closed loop. */
const pushSender = 0;

/**
 * The push sender's messages, lane n's to conversation n modulo their number (with at least as many
 * conversations as lanes, no send waits behind another in its conversation); counts those accepted.
 */
function senderWorkload(context: BenchContext, conversations: bigint[]): Workload & { accepted: number } {
  const headers = protoHeaders(context.fixture.users[pushSender].accessToken);
  const workload = {
    accepted: 0,
    fanOut: 1,
    echoSocket: () => pushSender,
    prepare: (id: number, lane: number) => sendMessageBody(conversations[lane % conversations.length], marker(id)),
    post: async (_lane: number, body: Uint8Array) => {
      const ok = await context.parley.post(paths.sendMessage, headers, body);
      if (ok) workload.accepted += 1;
      return ok;
    },
  };
  return workload;
}

/** After the last send, how long the providers may go without a new arrival before the rest counts as undelivered. */
const pushStallMs = 5_000;

/** Waits until the providers accepted `expected` notifications or stopped receiving them; resolves with the seconds it took. */
async function drainNotifications(providers: LocalPushProviders, expected: number): Promise<number> {
  const began = performance.now();
  let seen = providers.accepted();
  let lastProgress = began;
  while (seen < expected && performance.now() - lastProgress < pushStallMs) {
    await sleep(50);
    const now = providers.accepted();
    if (now > seen) lastProgress = performance.now();
    seen = now;
  }
  return (performance.now() - began) / 1000;
}

/**
 * The cost of an offline notification: two closed loops of the same shape, the sender's messages
 * to offline recipients without a device token (what a message costs with nothing to notify) and
 * to offline recipients with one each (the same plus exactly one notification). Server CPU of the
 * second beyond what the first costs per message, divided by the notifications the providers
 * accepted in the window, is the notification's. Notifications are sent after the message is
 * answered, so the closed loop does not wait for them: when they cannot keep up, the window holds
 * fewer of them than messages (the backlog), and after it the row waits for the stragglers so
 * they do not land in the next phase.
 */
async function measurePush(context: BenchContext): Promise<Figures> {
  const push = context.push;
  if (!push) throw new Error("the push row needs the local push providers the benchmark starts with its own server");
  const { providers, fixture } = push;
  const loop = (workload: Workload) => closedLoop(workload, context.concurrency, context.closed, context.serverPids, context.router, context.backingPids);
  const tokenless = await loop(senderWorkload(context, fixture.tokenless));
  providers.forget();
  const notifying = senderWorkload(context, fixture.withToken);
  const notified = await loop(notifying);
  const drainS = await drainNotifications(providers, notifying.accepted);
  const { window } = notified;
  const notifications = providers.acceptedBetween(window.startedAtMs, window.endedAtMs);
  const tokenlessCpuPerOpMs = tokenless.window.serverCpuMs / tokenless.window.operations;
  const figures: Figures = {
    tokenlessOpsPerSec: perSecond(tokenless.window),
    tokenlessCpuPerOpMs,
    tokenlessClientCpuPct: cpuPercent(tokenless.window),
    opsPerSec: perSecond(window),
    cpuPerOpMs: window.serverCpuMs / window.operations,
    clientCpuPct: cpuPercent(window),
    notificationsPerSec: notifications / ((window.endedAtMs - window.startedAtMs) / 1000),
    cpuPerNotificationUs: ((window.serverCpuMs - tokenlessCpuPerOpMs * window.operations) * 1000) / notifications,
    backlog: Math.max(0, window.operations - notifications),
    drainS,
    undelivered: Math.max(0, notifying.accepted - providers.accepted()),
    closedFailed: tokenless.tracker.errors + tokenless.tracker.lost + notified.tracker.errors + notified.tracker.lost,
  };
  providers.forget();
  log(
    `push: ${figures.opsPerSec.toFixed(0)} msg/s and ${figures.notificationsPerSec.toFixed(0)} notifications/s, ${figures.cpuPerNotificationUs.toFixed(1)} µs server CPU/notification ` +
      `(${figures.cpuPerOpMs.toFixed(3)} ms/msg with one, ${tokenlessCpuPerOpMs.toFixed(3)} ms without); backlog ${figures.backlog}, ${figures.undelivered} undelivered after ${drainS.toFixed(1)} s`,
  );
  return figures;
}

export function measureRow(row: RowName, context: BenchContext): Promise<Figures> {
  if (row === "rpc") return measureRpc(context);
  if (row === "rss") return measureIdleSockets(context);
  if (row === "push") return measurePush(context);
  return measureFanOut(row, context);
}

/** Each figure's median over the runs. */
export function medians(runs: Figures[]): Figures {
  const keys = new Set(runs.flatMap((r) => Object.keys(r)));
  return Object.fromEntries([...keys].map((key) => [key, median(runs.map((r) => r[key] ?? NaN))]));
}
