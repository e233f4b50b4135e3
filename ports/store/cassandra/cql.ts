// The adapter's one handle on Cassandra/ScyllaDB: every statement is prepared, runs at LOCAL_QUORUM
// (LWTs with LOCAL_SERIAL), and says whether the driver may retry it. See DATA-MODEL.md §1.3-1.5.
import cassandra from "cassandra-driver";
import { storeQueryMeasure, type StoreQueryMeasure } from "../../../shared/metrics.js";

const { consistencies } = cassandra.types;

type QueryKind = "read" | "write" | "lwt" | "batch" | "lwt_batch";

/** Times one query (every page of a read) into its kind's series. */
async function measured<T>(measure: StoreQueryMeasure, query: () => Promise<T>): Promise<T> {
  const startedAt = performance.now();
  try {
    return await query();
  } catch (err) {
    measure.errors.inc();
    throw err;
  } finally {
    measure.time.observeSince(startedAt);
  }
}

export type Row = cassandra.types.Row;
export type Params = readonly unknown[];

/** One statement of a batch. */
export interface Statement {
  query: string;
  params: Params;
}

export interface CqlSettings {
  /** host:port pairs. */
  contactPoints: readonly string[];
  keyspace: string;
  /** The datacenter the node runs in (a single-node server's is "datacenter1"). */
  localDataCenter?: string;
}

/** The outcome of a lightweight transaction: whether it applied, and the row it met when not. */
export interface LwtOutcome {
  applied: boolean;
  /** On refusal, the current values of the columns the condition named (Scylla also answers them when applied). */
  row: Row | undefined;
}

export class Cql {
  /** Tables written through this handle: tests empty only those between tests (a set tests may share between handles). */
  writtenTables = new Set<string>();
  private readonly measures: Record<QueryKind, StoreQueryMeasure> = {
    read: storeQueryMeasure("cassandra", "read"),
    write: storeQueryMeasure("cassandra", "write"),
    lwt: storeQueryMeasure("cassandra", "lwt"),
    batch: storeQueryMeasure("cassandra", "batch"),
    lwt_batch: storeQueryMeasure("cassandra", "lwt_batch"),
  };

  private constructor(
    readonly client: cassandra.Client,
    readonly keyspace: string,
    private readonly timestamps: cassandra.policies.timestampGeneration.TimestampGenerator,
  ) {}

  /** Connects without a keyspace (migrations create it), then uses it for every statement. */
  static async connect(settings: CqlSettings): Promise<Cql> {
    // The driver's default generator (its default settings), kept so that a timestamp taken up front (nextTimestamp) orders with the other writes.
    const timestamps = new cassandra.policies.timestampGeneration.MonotonicTimestampGenerator(1000, 1000);
    const client = new cassandra.Client({
      contactPoints: [...settings.contactPoints],
      policies: { timestampGeneration: timestamps },
      localDataCenter: settings.localDataCenter ?? "datacenter1",
      encoding: { useBigIntAsLong: true, useBigIntAsVarint: true, map: Map, set: Set },
      queryOptions: { prepare: true, consistency: consistencies.localQuorum, serialConsistency: consistencies.localSerial },
      socketOptions: { connectTimeout: 10_000, readTimeout: 12_000 },
    });
    await client.connect();
    return new Cql(client, settings.keyspace, timestamps);
  }

  /** Every connection of the session uses the keyspace from now on (the driver applies USE pool-wide). */
  async useKeyspace(): Promise<void> {
    await this.client.execute(`USE ${this.keyspace}`);
  }

  /** Reads (or an idempotent write). Tables are named unqualified: the session uses the keyspace (useKeyspace). */
  async rows(query: string, params: Params = [], options: { serial?: boolean; fetchSize?: number } = {}): Promise<Row[]> {
    return measured(this.measures.read, async () => {
      const result = await this.client.execute(query, params as unknown[], {
        isIdempotent: true,
        fetchSize: options.fetchSize ?? 5000,
        consistency: options.serial ? consistencies.localSerial : consistencies.localQuorum,
      });
      this.noteWrite(query);
      if (result.pageState && options.fetchSize === undefined) return this.allPages(query, params, result);
      return result.rows;
    });
  }

  async row(query: string, params: Params = [], options: { serial?: boolean } = {}): Promise<Row | undefined> {
    return (await this.rows(query, params, options))[0];
  }

  /** An idempotent write: the driver may retry it. */
  async write(query: string, params: Params = []): Promise<void> {
    this.noteWrite(query);
    await measured(this.measures.write, () => this.client.execute(query, params as unknown[], { isIdempotent: true }));
  }

  /**
   * A lightweight transaction (one statement or a conditional batch on one partition). Never
   * retried blindly: a timeout is answered by reading the row at LOCAL_SERIAL, which the caller does.
   */
  async lwt(query: string, params: Params = []): Promise<LwtOutcome> {
    this.noteWrite(query);
    const result = await measured(this.measures.lwt, () => this.client.execute(query, params as unknown[], { isIdempotent: false }));
    return outcomeOf(result.rows[0]);
  }

  /** A conditional batch: every statement on one partition of one table. */
  async lwtBatch(statements: readonly Statement[]): Promise<LwtOutcome> {
    for (const statement of statements) this.noteWrite(statement.query);
    const result = await measured(this.measures.lwt_batch, () => this.client.batch(statements.map(asQuery), { prepare: true, isIdempotent: false, logged: true }));
    return outcomeOf(result.rows?.[0]);
  }

  /**
   * A logged batch of idempotent writes: all of them or none, across partitions. Used where a change
   * and its outbox records must commit together without a condition (DATA-MODEL.md §1.5 P2).
   */
  async batch(statements: readonly Statement[], options: { timestamp?: bigint } = {}): Promise<void> {
    if (statements.length === 0) return;
    if (statements.length === 1 && options.timestamp === undefined) return this.write(statements[0].query, statements[0].params);
    for (const statement of statements) this.noteWrite(statement.query);
    const timestamp = options.timestamp === undefined ? {} : { timestamp: cassandra.types.Long.fromString(String(options.timestamp)) };
    await measured(this.measures.batch, () => this.client.batch(statements.map(asQuery), { prepare: true, isIdempotent: true, logged: true, ...timestamp }));
  }

  /**
   * An unlogged batch of idempotent writes: each partition's statements apply as one mutation, so
   * atomic and isolated without the batch log's extra writes; several partitions (ones the same
   * replicas hold, replicasOf) land independently of each other, as separate batches would.
   * Statements carry their own USING TIMESTAMP, if any.
   */
  async partitionBatch(statements: readonly Statement[]): Promise<void> {
    if (statements.length === 1) return this.write(statements[0].query, statements[0].params);
    for (const statement of statements) this.noteWrite(statement.query);
    await measured(this.measures.batch, () => this.client.batch(statements.map(asQuery), { prepare: true, isIdempotent: true, logged: false }));
  }

  /**
   * The nodes holding the partition whose serialized key this is, as one string to group by;
   * empty while the driver does not know the ring (every partition then groups together).
   */
  replicasOf(partitionKey: Buffer): string {
    const replicas = this.client.getReplicas(this.keyspace, partitionKey) as cassandra.Host[] | null;
    return replicas ? replicas.map((host) => host.address).sort().join(",") : "";
  }

  /**
   * A write timestamp (µs) after every one this handle used so far, for a batch written again
   * later with the same timestamp (batch's `timestamp`): the repeat then never overrides a newer write.
   */
  nextTimestamp(): bigint {
    return BigInt(String(this.timestamps.next(this.client)));
  }

  /** Statements that need not commit together, run in parallel. */
  async writeAll(statements: readonly Statement[]): Promise<void> {
    await Promise.all(statements.map((statement) => this.write(statement.query, statement.params)));
  }

  async close(): Promise<void> {
    await this.client.shutdown();
  }

  private async allPages(query: string, params: Params, first: cassandra.types.ResultSet): Promise<Row[]> {
    const rows = [...first.rows];
    let pageState = first.pageState;
    while (pageState) {
      const next = await this.client.execute(query, params as unknown[], { isIdempotent: true, fetchSize: 5000, pageState });
      rows.push(...next.rows);
      pageState = next.pageState;
    }
    return rows;
  }

  private noteWrite(query: string) {
    const table = writtenTable(query);
    if (table) this.writtenTables.add(table);
  }
}

const asQuery = (statement: Statement) => ({ query: statement.query, params: statement.params as unknown[] });

function outcomeOf(row: Row | undefined): LwtOutcome {
  return { applied: row?.["[applied]"] === true, row };
}

const writtenTableCache = new Map<string, string | null>();

function writtenTable(query: string): string | null {
  let table = writtenTableCache.get(query);
  if (table === undefined) {
    table = /^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+(?:[\w\s,[\]'?]*?\s)?FROM)\s+(\w+)/i.exec(query)?.[1]?.toLowerCase() ?? null;
    writtenTableCache.set(query, table);
  }
  return table;
}

/** A `bigint` column read back (the driver is set to answer bigint; null when unset). */
export const bigintOf = (value: unknown): bigint => (value === null || value === undefined ? 0n : (value as bigint));
/** An `int`/`bigint` column that holds a JS-safe number (times, counts). */
export const numberOf = (value: unknown): number => (value === null || value === undefined ? 0 : Number(value));
/**
 * Whether a value can be bound to an `int` column. Ids the API carries as int64 but this adapter
 * keeps in `int` columns (friend requests) can name nothing beyond it; the driver throws on such a
 * value instead of finding no row, so readers answer "absent" for them before asking.
 */
export const fitsInt32 = (value: number): boolean => Number.isInteger(value) && value >= -(2 ** 31) && value <= 2 ** 31 - 1;
/** A `blob` column as plain bytes (a Uint8Array, not the driver's Buffer, as the port's other adapter answers). */
export const bytesOf = (value: unknown): Uint8Array => (value === null || value === undefined ? new Uint8Array(0) : new Uint8Array(value as Buffer));

/**
 * Whether a lightweight transaction failed without telling its outcome (a write timeout, or the
 * driver stopped waiting): it may or may not have applied, so the caller reads at LOCAL_SERIAL,
 * which also finishes a proposal left in flight, to learn which (DATA-MODEL.md §1.4).
 */
export function isUnknownLwtOutcome(err: unknown): boolean {
  if (err instanceof cassandra.errors.OperationTimedOutError) return true;
  return err instanceof cassandra.errors.ResponseError && err.code === cassandra.types.responseErrorCodes.writeTimeout;
}

/** `read` of every key, at most `width` at a time, in the keys' order. */
export async function readAll<Key, Value>(keys: readonly Key[], width: number, read: (key: Key) => Promise<Value>): Promise<Value[]> {
  const values: Value[] = new Array<Value>(keys.length);
  let next = 0;
  const worker = async () => {
    while (next < keys.length) {
      const index = next++;
      values[index] = await read(keys[index]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, keys.length) }, worker));
  return values;
}

/** Tries of a lightweight transaction whose outcome was unknown and found not applied. */
const lwtAttempts = 3;

/**
 * A lightweight transaction whose unknown outcome (a timeout) is settled by `judge`, which reads at
 * LOCAL_SERIAL: applied (true), refused (false), or surely not applied and worth trying again
 * (undefined). `judged` tells the caller the outcome was inferred, not answered.
 */
export async function settledLwt(cql: Cql, query: string, params: Params, judge: () => Promise<boolean | undefined>): Promise<LwtOutcome & { judged?: boolean }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await cql.lwt(query, params);
    } catch (err) {
      if (!isUnknownLwtOutcome(err) || attempt >= lwtAttempts) throw err;
      const applied = await judge();
      if (applied !== undefined) return { applied, row: undefined, judged: true };
    }
  }
}
