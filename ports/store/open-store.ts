// Opens the store the configuration names (STORE): the one place that knows every adapter.
import type { StoreConfig } from "../../shared/config.js";
import { openCassandraStore } from "./cassandra/cassandra-store.js";
import { openSqliteStore } from "./sqlite/sqlite-store.js";
import type { Store } from "./store.js";

export async function openStore(store: StoreConfig, dataDir: string): Promise<Store> {
  if (store.kind === "sqlite") return openSqliteStore(dataDir);
  return openCassandraStore(store);
}
