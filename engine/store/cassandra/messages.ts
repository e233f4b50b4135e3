import type { MessageStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function messageStore(_ctx: CassandraContext): MessageStore {
  return unbuilt<MessageStore>("messageStore");
}
