// What recorded fan-outs (fan-out.ts) hand to the actors that carry them out: the inbox's
// appendFanOuts and the conversation's system-message action. Kept apart from both actors so that
// the fan-out machinery, which every engine service depends on, depends on neither of them.
import type { LiveEvent } from "../../shared/bus.js";
import type { WireMessage } from "../../shared/wire.js";
import type { EncodedEntry } from "./stream-entry.js";

/** A fan-out as an inbox appends it: the entry encoded once, and the recipients this inbox owns. */
export interface FanOutAppend {
  /** The recorded fan-out (decimal): the event's id in the log, by which a stream takes it once. */
  fanOutId: string;
  /** The entry, without sn; the inbox assigns each stream's. */
  entry: EncodedEntry;
  /** UserInfo wire forms referenced by the entry, pushed along with it. */
  users?: WireMessage[];
  /** GroupInfo wire forms referenced by the entry. */
  groups?: WireMessage[];
  recipients: number[];
  /** The fan-out is delivered again: streams that already hold it are skipped. */
  again?: boolean;
  /**
   * Whoever delivers the fan-out pushes it live itself, from the answer (sequencedPush): it then
   * travels the deliverer's one ordered path to each gateway, ahead of what the deliverer pushes
   * next (a stream's deltas after its START). Otherwise the inbox pushes it.
   */
  pushedByDeliverer?: boolean;
}

export interface AppendFanOutsParams {
  fanOuts: FanOutAppend[];
}

/** What an inbox answers for one fan-out it appended. */
export interface AppendedFanOut {
  /** Each recipient whose stream took it, with its sn (a stream that already held it is absent). */
  sns: [userId: number, sn: number][];
  /** Those of them whose entry went to their webhook route (WEBHOOK-mode agents). */
  toWebhook?: number[];
}

export interface AppendFanOutsAnswer {
  /** In the order of the fan-outs asked for. */
  appended: AppendedFanOut[];
}

/** The `users` and `groups` fields of an Update's wire form (omitted when empty, as proto3 JSON does). */
export function relatedParts(params: { users?: WireMessage[]; groups?: WireMessage[] }): WireMessage {
  return {
    ...(params.users?.length ? { users: params.users } : {}),
    ...(params.groups?.length ? { groups: params.groups } : {}),
  };
}

/** The live push of an appended fan-out: the entry once, each recipient's sn beside it. */
export function sequencedPush(fanOut: Pick<FanOutAppend, "entry" | "users" | "groups">, appended: AppendedFanOut): LiveEvent {
  const update = { ...relatedParts(fanOut), snUpdate: fanOut.entry.wire } as LiveEvent["update"];
  return { update, recipients: appended.sns, ...(appended.toWebhook?.length ? { toWebhook: appended.toWebhook } : {}) };
}

/** A system message to post, as a recorded fan-out asks its conversation's owner for it. */
export interface SystemMessageParams {
  /** Shaped like an RPC request so the same shard key routes it. */
  request: { conversationId: string };
  /** MessageBody wire form. */
  body: WireMessage;
  /** Users who get the message besides the current members (e.g. one who just left). */
  extraRecipients?: number[];
  /** The recorded system message this is (decimal): posted once, however often asked. */
  systemMessageId: string;
}
