package dev.spool;

import java.util.Objects;
import java.util.regex.Pattern;

/** How {@link Idempotent} records processed messages. Immutable; build with {@link #builder()}. */
public final class IdempotentOptions {
  /** The table in which processed messages are recorded by default. */
  public static final String DEFAULT_TABLE = "spool_processed";
  private static final Pattern TABLE_NAME = Pattern.compile("^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)?$");

  private final String table;
  private final boolean createTable;
  private final Integer isolation;
  private final Dialect dialect;
  private final IdempotentStats stats;

  private IdempotentOptions(Builder b) {
    this.table = b.table;
    this.createTable = b.createTable;
    this.isolation = b.isolation;
    this.dialect = b.dialect;
    this.stats = b.stats != null ? b.stats : new IdempotentStats();
  }

  public static IdempotentOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public String table() { return table; }
  public boolean createTable() { return createTable; }
  /** The transaction isolation level (a java.sql.Connection TRANSACTION_ constant), or null for the connection's. */
  public Integer isolation() { return isolation; }
  /** The dialect, or null: detected from the database's product name. */
  public Dialect dialect() { return dialect; }
  public IdempotentStats stats() { return stats; }

  public static final class Builder {
    private String table = DEFAULT_TABLE;
    private boolean createTable = true;
    private Integer isolation;
    private Dialect dialect;
    private IdempotentStats stats;

    private Builder() {}

    /**
     * The table of processed messages (default "spool_processed"), written
     * into the SQL unquoted: letters, digits and '_', with an optional
     * "schema." prefix.
     */
    public Builder table(String name) { table = Objects.requireNonNull(name); return this; }

    /**
     * Whether CREATE TABLE IF NOT EXISTS runs before the first message
     * (default true; retried until it succeeds once). Turn it off when
     * migrations create the table ({@link Dialect#createTableSql(String)}).
     */
    public Builder createTable(boolean create) { createTable = create; return this; }

    /** The isolation level of the transaction (java.sql.Connection.TRANSACTION_...); default: the connection's. */
    public Builder isolation(int level) { isolation = level; return this; }

    /** The SQL dialect; default: detected from DatabaseMetaData.getDatabaseProductName(). */
    public Builder dialect(Dialect d) { dialect = d; return this; }

    /** Counters the caller can read at any time. */
    public Builder stats(IdempotentStats s) { stats = s; return this; }

    public IdempotentOptions build() {
      if (table.length() > 128 || !TABLE_NAME.matcher(table).matches()) {
        throw new IllegalArgumentException("spool: Idempotent table \"" + table + "\": use letters, digits and '_', optionally prefixed by a schema and '.'");
      }
      return new IdempotentOptions(this);
    }
  }
}
