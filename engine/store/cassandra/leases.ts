import type { LeaseStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function leaseStore(_ctx: CassandraContext): LeaseStore {
  return unbuilt<LeaseStore>("leaseStore");
}
