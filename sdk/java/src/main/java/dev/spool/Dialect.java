package dev.spool;

/** The SQL that {@link Idempotent} writes: the insert that skips a recorded id, and the table. */
public enum Dialect {
  /** INSERT ... ON CONFLICT DO NOTHING (PostgreSQL 9.5 and later, CockroachDB). */
  POSTGRES,
  /** INSERT IGNORE (MySQL, MariaDB). */
  MYSQL,
  /** INSERT ... ON CONFLICT DO NOTHING (SQLite 3.24 and later). */
  SQLITE;

  /** The dialect of a JDBC database product name, or null. */
  static Dialect ofProduct(String product) {
    String p = product == null ? "" : product.toLowerCase(java.util.Locale.ROOT);
    if (p.contains("postgres") || p.contains("cockroach")) {
      return POSTGRES;
    }
    if (p.contains("mysql") || p.contains("mariadb")) {
      return MYSQL;
    }
    if (p.contains("sqlite")) {
      return SQLITE;
    }
    return null;
  }

  String insertSql(String table) {
    String cols = "(consumer_group, message_id, fencing_token, processed_at)";
    switch (this) {
      case MYSQL:
        // INSERT IGNORE also turns other errors into warnings (an id too long
        // for its column would be cut): the columns of createTableSql hold any
        // group and id Spool accepts.
        return "INSERT IGNORE INTO " + table + " " + cols + " VALUES (?, ?, ?, ?)";
      default:
        return "INSERT INTO " + table + " " + cols + " VALUES (?, ?, ?, ?) ON CONFLICT (consumer_group, message_id) DO NOTHING";
    }
  }

  /**
   * The table of processed messages. Group names are at most 249 bytes and
   * message ids at most 128 bytes in Spool. Ids compare byte for byte:
   * MySQL's default collations are case-insensitive, hence VARBINARY.
   */
  public String createTableSql(String table) {
    switch (this) {
      case POSTGRES:
        return "CREATE TABLE IF NOT EXISTS " + table + " (\n"
            + "\tconsumer_group TEXT NOT NULL,\n"
            + "\tmessage_id TEXT NOT NULL,\n"
            + "\tfencing_token BIGINT NOT NULL,\n"
            + "\tprocessed_at TIMESTAMPTZ NOT NULL,\n"
            + "\tPRIMARY KEY (consumer_group, message_id)\n"
            + ")";
      case MYSQL:
        return "CREATE TABLE IF NOT EXISTS " + table + " (\n"
            + "\tconsumer_group VARBINARY(255) NOT NULL,\n"
            + "\tmessage_id VARBINARY(255) NOT NULL,\n"
            + "\tfencing_token BIGINT UNSIGNED NOT NULL,\n"
            + "\tprocessed_at DATETIME(6) NOT NULL,\n"
            + "\tPRIMARY KEY (consumer_group, message_id)\n"
            + ")";
      default:
        return "CREATE TABLE IF NOT EXISTS " + table + " (\n"
            + "\tconsumer_group TEXT NOT NULL,\n"
            + "\tmessage_id TEXT NOT NULL,\n"
            + "\tfencing_token INTEGER NOT NULL,\n"
            + "\tprocessed_at TIMESTAMP NOT NULL,\n"
            + "\tPRIMARY KEY (consumer_group, message_id)\n"
            + ")";
    }
  }
}
