// idempotent: effectively-once work in the application's own PostgreSQL,
// like the Go SDK's spool.Idempotent. The SDK imports no driver: anything
// shaped like a node-postgres Pool works (pg.Pool, a pg-pool wrapper).
import type { Message } from "./message";

/** A connection checked out of the pool (node-postgres' PoolClient). */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null }>;
  /** Returns the connection to the pool; an error destroys it. */
  release(err?: Error | boolean): void;
}

/** A connection pool (node-postgres' Pool). */
export interface PgPoolLike<C extends PgClientLike = PgClientLike> {
  connect(): Promise<C>;
}

/**
 * The connection type of a pool: node-postgres' Pool overloads connect()
 * (promise and callback), from which TypeScript infers only the last.
 */
export type PgClientOf<P> = P extends { connect(): Promise<infer C>; connect(cb: never): void }
  ? C extends PgClientLike ? C : PgClientLike
  : P extends { connect(): Promise<infer C> } ? C extends PgClientLike ? C : PgClientLike : PgClientLike;

/**
 * Does the application's work for one message inside the transaction that
 * also records the message id. Every write of the work goes through `tx`;
 * do not COMMIT or ROLLBACK it. Returning normally commits and acks; a throw
 * (Retry, DeadLetter, any error) rolls back and keeps its meaning.
 */
export type TxHandler<C extends PgClientLike = PgClientLike> = (tx: C, m: Message, signal: AbortSignal) => Promise<void>;

export const DEFAULT_IDEMPOTENT_TABLE = "spool_processed";

export interface IdempotentOptions {
  /** The table of processed messages (default "spool_processed"); a plain identifier, optionally "schema.table". */
  table?: string;
  /** CREATE TABLE IF NOT EXISTS before the first message (default true); turn off when migrations create it. */
  createTable?: boolean;
  /** Isolation level of the transaction (default: the database's, READ COMMITTED). */
  isolationLevel?: "READ COMMITTED" | "REPEATABLE READ" | "SERIALIZABLE";
  stats?: IdempotentStats;
}

/** Counters of an idempotent handler. */
export class IdempotentStats {
  /** Messages whose work and id record committed. */
  processed = 0;
  /** Deliveries skipped and acked: the id was recorded, the work had committed before. */
  duplicates = 0;
  /** Deliveries rolled back: the handler threw, or the database failed (begin, insert, commit). */
  failed = 0;
}

const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

/** The PostgreSQL table of processed messages. Group names are at most 249 bytes, ids at most 128. */
export function createTableSQL(table = DEFAULT_IDEMPOTENT_TABLE): string {
  return `CREATE TABLE IF NOT EXISTS ${table} (
	consumer_group TEXT NOT NULL,
	message_id TEXT NOT NULL,
	fencing_token BIGINT NOT NULL,
	processed_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (consumer_group, message_id)
)`;
}

function insertSQL(table: string): string {
  return `INSERT INTO ${table} (consumer_group, message_id, fencing_token, processed_at) VALUES ($1, $2, $3, now()) ON CONFLICT (consumer_group, message_id) DO NOTHING`;
}

/**
 * Returns a Handler that runs h at most once per (consumer group, message id)
 * among the attempts that commit. For each delivery it checks a connection
 * out of the pool and:
 *
 *   1. BEGIN;
 *   2. INSERT (m.group, m.id, m.fencingToken, now()) ... ON CONFLICT DO NOTHING;
 *   3. if no row was inserted, the work committed before: ROLLBACK and ack
 *      (counted in duplicates), without calling h;
 *   4. else calls h(tx, m, signal): a throw rolls back and is rethrown
 *      unchanged (Retry, DeadLetter keep their meaning); normal return
 *      COMMITs; a failed COMMIT is thrown (RETRY; if it had in fact
 *      committed, the retry is skipped as a duplicate).
 *
 * The check is on the id alone, not on the attempt or the fencing token.
 * Two attempts at once (a lease expired) are serialised by PostgreSQL on the
 * id's key: the second insert waits for the first transaction, then inserts
 * nothing if it committed (skip) or inserts if it rolled back (do the work).
 *
 * Throws at once (a programming error) on a missing pool or handler, or a
 * table name that is not an identifier.
 */
export function idempotent<P extends PgPoolLike<PgClientLike>>(pool: P, h: TxHandler<PgClientOf<P>>, opts: IdempotentOptions = {}): (m: Message, signal: AbortSignal) => Promise<void> {
  type C = PgClientOf<P>;
  if (!pool || typeof pool.connect !== "function" || typeof h !== "function") {
    throw new TypeError("spool.idempotent: pass a pg Pool (anything with connect()) and an async (tx, message, signal) => { ... } handler");
  }
  const table = opts.table ?? DEFAULT_IDEMPOTENT_TABLE;
  if (table.length > 128 || !TABLE_NAME.test(table)) {
    throw new TypeError(`spool.idempotent: table ${JSON.stringify(table)}: use letters, digits and '_', optionally prefixed by a schema and '.'`);
  }
  const stats = opts.stats ?? new IdempotentStats();
  const insert = insertSQL(table);
  const begin = opts.isolationLevel ? `BEGIN ISOLATION LEVEL ${opts.isolationLevel}` : "BEGIN";
  let created: Promise<void> | undefined = opts.createTable === false ? Promise.resolve() : undefined;

  // CREATE TABLE IF NOT EXISTS until it succeeds once, outside the message's transaction.
  const ensureTable = (): Promise<void> => {
    if (!created) {
      created = (async () => {
        const c = await pool.connect();
        try {
          await c.query(createTableSQL(table));
          c.release();
        } catch (e) {
          c.release(e instanceof Error ? e : true);
          throw e;
        }
      })().catch((e: unknown) => {
        created = undefined; // retried by the next message
        throw new Error(`spool.idempotent: creating table ${table} (create it with your migrations and pass createTable: false to skip this): ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      });
    }
    return created;
  };

  return async (m: Message, signal: AbortSignal): Promise<void> => {
    if (!m.id) {
      stats.failed++;
      throw new Error("spool.idempotent: the message has no id to record");
    }
    try {
      await ensureTable();
    } catch (e) {
      stats.failed++;
      throw e;
    }
    let tx: C;
    try {
      tx = (await pool.connect()) as C;
    } catch (e) {
      stats.failed++;
      throw new Error(`spool.idempotent: connecting: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    let broken: Error | undefined; // a connection in an unknown state is destroyed, not reused
    let open = false;
    try {
      try {
        await tx.query(begin);
        open = true;
        const res = await tx.query(insert, [m.group, m.id, m.fencingToken.toString()]);
        if (res.rowCount === 0) {
          open = false;
          await tx.query("ROLLBACK");
          stats.duplicates++;
          return;
        }
      } catch (e) {
        throw new Error(`spool.idempotent: recording message ${JSON.stringify(m.id)} of group ${JSON.stringify(m.group)} in ${table}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
      await h(tx, m, signal);
      open = false;
      try {
        await tx.query("COMMIT");
      } catch (e) {
        broken = e instanceof Error ? e : new Error(String(e));
        throw new Error(`spool.idempotent: commit: ${broken.message}`, { cause: e });
      }
      stats.processed++;
    } catch (e) {
      stats.failed++;
      if (open) {
        try {
          await tx.query("ROLLBACK");
        } catch (re) {
          broken = re instanceof Error ? re : new Error(String(re));
        }
      }
      throw e;
    } finally {
      tx.release(broken);
    }
  };
}
