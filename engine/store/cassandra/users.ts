import type { UserStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function userStore(_ctx: CassandraContext): UserStore {
  return unbuilt<UserStore>("userStore");
}
