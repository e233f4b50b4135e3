import type { ConversationStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function conversationStore(_ctx: CassandraContext): ConversationStore {
  return unbuilt<ConversationStore>("conversationStore");
}
