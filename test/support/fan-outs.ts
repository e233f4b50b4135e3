import type { ServiceBroker } from "moleculer";
import type { AppendedFanOut, AppendFanOutsAnswer, AppendFanOutsParams, FanOutAppend } from "../../engine/delivery/fan-out-contracts.js";
import { userStreamKey } from "../../shared/shards.js";
import { engineNodes, keysByOwner } from "../../engine/shard-owners.js";

/**
 * Fan-out ids for events a test appends straight through the inbox: from 2^62 up, a range the
 * server's own ids (milliseconds since 2026 << 22) reach only decades from now, so they never
 * name an event the server stored.
 */
let lastTestFanOutId = 1n << 62n;
export const nextTestFanOutId = () => ++lastTestFanOutId;

/**
 * Appends fan-outs straight through the inbox (the path every event takes), each sent to the
 * engine that owns its recipient's stream, as engine/delivery/fan-out.ts sends them (an inbox refuses a
 * stream placed on another engine); answers the sns in the order given.
 */
export async function appendThroughInbox(broker: ServiceBroker, fanOuts: FanOutAppend[]): Promise<AppendedFanOut["sns"][]> {
  if (fanOuts.some((fanOut) => fanOut.recipients.length !== 1)) throw new Error("appendThroughInbox takes fan-outs of one recipient each");
  const indexed = fanOuts.map((fanOut, index) => ({ fanOut, index }));
  const sns = new Array<AppendedFanOut["sns"]>(fanOuts.length);
  for (const [owner, group] of keysByOwner(indexed, ({ fanOut }) => userStreamKey(fanOut.recipients[0]), engineNodes(broker))) {
    const params: AppendFanOutsParams = { fanOuts: group.map(({ fanOut }) => fanOut) };
    const answer = (await broker.call("sync.appendFanOuts", params, owner === undefined ? undefined : { nodeID: owner })) as AppendFanOutsAnswer;
    group.forEach(({ index }, position) => (sns[index] = answer.appended[position].sns));
  }
  return sns;
}
