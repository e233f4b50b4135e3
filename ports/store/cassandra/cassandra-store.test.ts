import { describeStoreConformance } from "../conformance/store-conformance.js";
import type { CassandraStore } from "./cassandra-store.js";
import { adapterTestKeyspace, cassandraStarts, openTestCassandraStore } from "../../../test/support/cassandra.js";

const keyspace = adapterTestKeyspace;

before(cassandraStarts);

describeStoreConformance("cassandra", async () => {
  let current: CassandraStore = await openTestCassandraStore(keyspace, { fresh: true });
  const others: CassandraStore[] = [];
  return {
    store: current,
    async another() {
      const other = await openTestCassandraStore(keyspace, { fresh: false });
      others.push(other);
      return other;
    },
    async reopen() {
      await current.close();
      current = await openTestCassandraStore(keyspace, { fresh: false });
      return current;
    },
    async cleanup() {
      for (const other of others) await other.close();
      await current.close();
    },
  };
});
