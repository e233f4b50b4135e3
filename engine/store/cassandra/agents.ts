import type { AgentStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function agentStore(_ctx: CassandraContext): AgentStore {
  return unbuilt<AgentStore>("agentStore");
}
