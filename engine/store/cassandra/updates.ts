import type { UpdateLogStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function updateLogStore(_ctx: CassandraContext): UpdateLogStore {
  return unbuilt<UpdateLogStore>("updateLogStore");
}
