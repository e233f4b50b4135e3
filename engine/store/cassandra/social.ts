import type { SocialStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function socialStore(_ctx: CassandraContext): SocialStore {
  return unbuilt<SocialStore>("socialStore");
}
