import type { GroupStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function groupStore(_ctx: CassandraContext): GroupStore {
  return unbuilt<GroupStore>("groupStore");
}
