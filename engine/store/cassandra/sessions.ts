import type { PushTokenStore, SessionStore } from "../store.js";
import type { CassandraContext } from "./context.js";
import { unbuilt } from "./unbuilt.js";

export function sessionStore(_ctx: CassandraContext): SessionStore {
  return unbuilt<SessionStore>("sessionStore");
}

export function pushTokenStore(_ctx: CassandraContext): PushTokenStore {
  return unbuilt<PushTokenStore>("pushTokenStore");
}
