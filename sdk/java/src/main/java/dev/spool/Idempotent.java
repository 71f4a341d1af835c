package dev.spool;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;
import javax.sql.DataSource;

/**
 * Effectively-once work in the application's own database: the Go SDK's
 * {@code spool.Idempotent} over JDBC.
 *
 * <pre>{@code
 * Handler h = Idempotent.handler(dataSource, (tx, m) -> {
 *   try (var st = tx.prepareStatement("UPDATE wallets SET balance = balance + 100 WHERE customer = ?")) {
 *     st.setString(1, m.keyUtf8());
 *     st.executeUpdate();                       // every write of the work through tx
 *   }
 * });                                           // return = COMMIT + ACK; an exception = ROLLBACK + that outcome
 * client.subscribe("billing", List.of("refunds"), h);
 * }</pre>
 *
 * For each delivery the handler takes a connection from the DataSource,
 * begins a transaction and inserts (m.group(), m.id(), m.fencingToken(), now)
 * into the table of processed messages, whose primary key is (consumer_group,
 * message_id), skipping a recorded one (ON CONFLICT DO NOTHING; INSERT IGNORE
 * on MySQL). Then:
 *
 * <ul>
 *   <li>if the id was recorded already (no row inserted), the work committed
 *       before: it rolls back and returns, so the delivery is acked without
 *       calling the work ({@link IdempotentStats#duplicates()});
 *   <li>otherwise it calls the work with the connection. An exception rolls
 *       back and is rethrown unchanged (Retry and DeadLetter keep their
 *       meaning). A return commits; a failed commit is thrown (RETRY), and if
 *       the commit had in fact happened the retry is skipped as a duplicate.
 * </ul>
 *
 * Because the work and the id record commit in one transaction, a
 * redelivery of a message whose work committed (a crash or a lost lease
 * between COMMIT and the ack, a sidecar restart, a redrive of a message that
 * had succeeded) is skipped. Two attempts at once for the same id (an expired
 * lease) are serialised by the database on the id's key: the second waits
 * for the first, then skips if it committed or does the work if it rolled
 * back. The check is on (group, id) alone; the fencing token is stored beside
 * it.
 *
 * <p>Not covered: effects outside the transaction (an e-mail, an HTTP call, a
 * write to another database). Make them idempotent on their own (send m.id()
 * as the downstream's idempotency key) or write them to an outbox table in
 * the transaction. The transaction holds the id's row lock while the work
 * runs: keep it short. Size the DataSource's pool for at least the
 * subscription's concurrency.
 */
public final class Idempotent {
  private final DataSource ds;
  private final TxHandler work;
  private final IdempotentOptions opts;
  private final IdempotentStats stats;
  private final ReentrantLock setup = new ReentrantLock();
  private volatile Dialect dialect; // detected on first use unless given
  private volatile boolean tableReady; // CREATE TABLE succeeded once (or is not wanted)

  private Idempotent(DataSource ds, TxHandler work, IdempotentOptions opts) {
    this.ds = ds;
    this.work = work;
    this.opts = opts;
    this.stats = opts.stats();
    this.dialect = opts.dialect();
    this.tableReady = !opts.createTable();
  }

  /** {@link #handler(DataSource, TxHandler, IdempotentOptions)} with the default options. */
  public static Handler handler(DataSource ds, TxHandler work) {
    return handler(ds, work, IdempotentOptions.defaults());
  }

  /** A Handler that runs work at most once per (consumer group, message id) among the attempts that commit. */
  public static Handler handler(DataSource ds, TxHandler work, IdempotentOptions opts) {
    Objects.requireNonNull(ds, "spool: Idempotent: the DataSource is null");
    Objects.requireNonNull(work, "spool: Idempotent: the work is null: pass (tx, message) -> { ... }");
    Idempotent ix = new Idempotent(ds, work, Objects.requireNonNull(opts));
    return ix::handle;
  }

  private void handle(Message m) throws Exception {
    if (m.id().isEmpty()) {
      stats.failed.incrementAndGet();
      throw new IllegalStateException("spool: Idempotent: the message has no id to record");
    }
    try {
      ensureSetup();
    } catch (SQLException e) {
      stats.failed.incrementAndGet();
      throw e;
    }
    Connection c;
    try {
      c = ds.getConnection();
    } catch (SQLException e) {
      stats.failed.incrementAndGet();
      throw new SQLException("spool: Idempotent: connecting: " + e.getMessage(), e.getSQLState(), e);
    }
    boolean autoCommit = true;
    Integer isolationBefore = null;
    try {
      autoCommit = c.getAutoCommit();
      if (opts.isolation() != null) {
        isolationBefore = c.getTransactionIsolation();
        c.setTransactionIsolation(opts.isolation());
      }
      c.setAutoCommit(false);
      int inserted;
      try (PreparedStatement ps = c.prepareStatement(dialect.insertSql(opts.table()))) {
        ps.setString(1, m.group());
        ps.setString(2, m.id());
        ps.setLong(3, m.fencingToken()); // tokens stay far below 2^63, the range of a signed BIGINT
        ps.setTimestamp(4, Timestamp.from(Instant.now()));
        inserted = ps.executeUpdate();
      } catch (SQLException e) {
        rollback(c, e);
        stats.failed.incrementAndGet();
        throw new SQLException("spool: Idempotent: recording message \"" + m.id() + "\" of group \"" + m.group() + "\" in " + opts.table() + ": " + e.getMessage(),
            e.getSQLState(), e);
      }
      if (inserted == 0) {
        c.rollback();
        stats.duplicates.incrementAndGet();
        return;
      }
      try {
        work.handle(c, m);
      } catch (Throwable t) {
        rollback(c, t);
        stats.failed.incrementAndGet();
        throw t;
      }
      try {
        c.commit();
      } catch (SQLException e) {
        stats.failed.incrementAndGet();
        throw new SQLException("spool: Idempotent: commit: " + e.getMessage(), e.getSQLState(), e);
      }
      stats.processed.incrementAndGet();
    } finally {
      // Give the connection back as it was taken (pools reuse it).
      try {
        c.setAutoCommit(autoCommit);
        if (isolationBefore != null) {
          c.setTransactionIsolation(isolationBefore);
        }
      } catch (SQLException e) {
        // a broken connection: closing it is all that is left
      }
      c.close();
    }
  }

  private static void rollback(Connection c, Throwable cause) {
    try {
      c.rollback();
    } catch (SQLException e) {
      cause.addSuppressed(e);
    }
  }

  /** Detects the dialect and creates the table, until both succeed once (outside any message's transaction). */
  private void ensureSetup() throws SQLException {
    if (dialect != null && tableReady) {
      return;
    }
    setup.lock();
    try {
      if (dialect == null) {
        try (Connection c = ds.getConnection()) {
          String product = c.getMetaData().getDatabaseProductName();
          Dialect d = Dialect.ofProduct(product);
          if (d == null) {
            throw new SQLException("spool: Idempotent: cannot tell the SQL dialect of database \"" + product
                + "\": pass IdempotentOptions.builder().dialect(Dialect.POSTGRES | MYSQL | SQLITE)");
          }
          dialect = d;
        }
      }
      if (!tableReady) {
        try (Connection c = ds.getConnection(); Statement st = c.createStatement()) {
          if (!c.getAutoCommit()) {
            st.execute(dialect.createTableSql(opts.table()));
            c.commit();
          } else {
            st.execute(dialect.createTableSql(opts.table()));
          }
        } catch (SQLException e) {
          throw new SQLException("spool: Idempotent: creating table " + opts.table()
              + " (create it with your migrations and pass createTable(false) to skip this): " + e.getMessage(), e.getSQLState(), e);
        }
        tableReady = true;
      }
    } finally {
      setup.unlock();
    }
  }
}
