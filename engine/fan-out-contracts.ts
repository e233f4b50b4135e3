// What recorded fan-outs (fan-out.ts) hand to the actors that carry them out: the inbox's
// appendFanOuts and the conversation's system-message action. Kept apart from both actors so that
// the fan-out machinery, which every engine service depends on, depends on neither of them.
import type { WireMessage } from "../shared/wire.js";
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
}

export interface AppendFanOutsParams {
  fanOuts: FanOutAppend[];
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
