import type { OutboxStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function outboxStore(_ctx: CassandraContext): OutboxStore {
  return unbuilt<OutboxStore>("outboxStore");
}
