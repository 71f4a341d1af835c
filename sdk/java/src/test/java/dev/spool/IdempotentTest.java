package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Idempotent against a real PostgreSQL (a throwaway server from Debian's
 * postgresql package; skipped, saying so, when it is not installed, unless
 * spool.test.requirePg=true, as `make test-sdk-java` sets) and, end to end, a
 * real spoold.
 */
class IdempotentTest {
  static Postgres pg;
  static DataSource ds;

  @BeforeAll
  static void startPostgres() throws SQLException {
    Path bin = Postgres.findBin();
    if (bin == null && Boolean.getBoolean("spool.test.requirePg")) {
      throw new AssertionError("spool.test.requirePg=true and no PostgreSQL under /usr/lib/postgresql: run `make deps` (apt-get install postgresql)");
    }
    Assumptions.assumeTrue(bin != null, "PostgreSQL not installed (apt-get install postgresql): Idempotent not tested against a database");
    pg = new Postgres(bin);
    ds = pg.dataSource();
    try (Connection c = ds.getConnection(); Statement st = c.createStatement()) {
      st.execute("CREATE TABLE wallets (customer TEXT PRIMARY KEY, balance BIGINT NOT NULL)");
    }
  }

  @AfterAll
  static void stopPostgres() {
    if (pg != null) {
      pg.close();
    }
  }

  static Message msg(String id, long token, String group) {
    return Message.builder().id(id).topic("orders").key("alice").payload("100").fencingToken(token).group(group).build();
  }

  /** The work: credit the payload to the key's wallet, through tx. */
  static void credit(Connection tx, Message m) throws SQLException {
    try (PreparedStatement st = tx.prepareStatement(
        "INSERT INTO wallets VALUES (?, ?) ON CONFLICT (customer) DO UPDATE SET balance = wallets.balance + EXCLUDED.balance")) {
      st.setString(1, m.keyUtf8());
      st.setLong(2, Long.parseLong(m.payloadUtf8()));
      st.executeUpdate();
    }
  }

  static long balance(String who) throws SQLException {
    try (Connection c = ds.getConnection(); PreparedStatement st = c.prepareStatement("SELECT balance FROM wallets WHERE customer = ?")) {
      st.setString(1, who);
      try (ResultSet rs = st.executeQuery()) {
        return rs.next() ? rs.getLong(1) : 0;
      }
    }
  }

  @Test
  void workCommitsOnceAndARedeliveryIsSkipped() throws Exception {
    IdempotentStats stats = new IdempotentStats();
    Handler h = Idempotent.handler(ds, IdempotentTest::credit, IdempotentOptions.builder().stats(stats).build());
    long before = balance("alice");
    h.handle(msg("refund-1", 1, "billing"));
    h.handle(msg("refund-1", 2, "billing")); // the ack was lost: delivered again with a new token
    assertEquals(before + 100, balance("alice"));
    assertEquals(1, stats.processed());
    assertEquals(1, stats.duplicates());
    try (Connection c = ds.getConnection();
        ResultSet rs = c.createStatement().executeQuery("SELECT consumer_group, fencing_token FROM spool_processed WHERE message_id = 'refund-1'")) {
      assertTrue(rs.next());
      assertEquals("billing", rs.getString(1));
      assertEquals(1, rs.getLong(2));
    }
    h.handle(msg("refund-1", 1, "audit")); // another group processes it on its own
    assertEquals(before + 200, balance("alice"));
  }

  @Test
  void aFailedAttemptLeavesNothingAndItsOutcomeIsRethrownUnchanged() throws Exception {
    IdempotentStats stats = new IdempotentStats();
    AtomicReference<Exception> fail = new AtomicReference<>(new IllegalStateException("downstream timeout"));
    Handler h = Idempotent.handler(ds, (tx, m) -> {
      credit(tx, m);
      if (fail.get() != null) {
        throw fail.get();
      }
    }, IdempotentOptions.builder().stats(stats).build());
    long before = balance("alice");
    assertEquals("downstream timeout", assertThrows(IllegalStateException.class, () -> h.handle(msg("refund-2", 1, "billing"))).getMessage());
    DeadLetter poison = new DeadLetter("bad customer");
    fail.set(poison);
    assertSame(poison, assertThrows(DeadLetter.class, () -> h.handle(msg("refund-2", 2, "billing"))));
    assertEquals(before, balance("alice"), "a rolled-back attempt changed the wallet");
    fail.set(null);
    h.handle(msg("refund-2", 3, "billing"));
    assertEquals(before + 100, balance("alice"));
    assertEquals(1, stats.processed());
    assertEquals(0, stats.duplicates());
    assertEquals(2, stats.failed());
  }

  @Test
  void twoAttemptsAtOnceAreSerialisedByTheDatabase() throws Exception {
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicInteger calls = new AtomicInteger();
    IdempotentStats stats = new IdempotentStats();
    Handler h = Idempotent.handler(ds, (tx, m) -> {
      calls.incrementAndGet();
      credit(tx, m);
      inside.countDown();
      release.await(); // the first attempt holds the id's row lock
    }, IdempotentOptions.builder().stats(stats).build());
    long before = balance("alice");
    CompletableFuture<Void> first = CompletableFuture.runAsync(() -> run(h, msg("refund-3", 1, "billing")));
    inside.await();
    // A lease expired: a newer attempt of the same message, while the first is in its transaction.
    CompletableFuture<Void> second = CompletableFuture.runAsync(() -> run(h, msg("refund-3", 2, "billing")));
    Eventually.await("the second attempt blocked on the first's row lock", () -> waitingOnALock() >= 1);
    release.countDown();
    CompletableFuture.allOf(first, second).join();
    assertEquals(1, calls.get());
    assertEquals(before + 100, balance("alice"));
    assertEquals(1, stats.duplicates());
  }

  private static void run(Handler h, Message m) {
    try {
      h.handle(m);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  private static int waitingOnALock() throws SQLException {
    try (Connection c = ds.getConnection();
        ResultSet rs = c.createStatement().executeQuery("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")) {
      rs.next();
      return rs.getInt(1);
    }
  }

  @Test
  void endToEndALostAckAndAProducerRetryDoNotRedoTheWork() throws Exception {
    String config = "topics:\n  - name: orders\n    partitions: 2\nsubscriptions:\n  - topic: orders\n    group: billing\n    max_attempts: 5\n"
        + "    backoff: {base: 20ms, max: 100ms, multiplier: 2}\n";
    try (var s = Harness.Spoold.start(config); var c = Client.connect(s.app)) {
      IdempotentStats stats = new IdempotentStats();
      Handler inner = Idempotent.handler(ds, IdempotentTest::credit, IdempotentOptions.builder().stats(stats).build());
      AtomicBoolean first = new AtomicBoolean(true);
      Handler handler = m -> {
        inner.handle(m);
        if (first.getAndSet(false)) {
          throw new IllegalStateException("crashed after the commit, before the ack"); // the sidecar delivers it again
        }
      };
      long before = balance("bob");
      for (int i = 0; i < 3; i++) { // a producer that retried: the same id three times
        c.publish("orders", OutMessage.of("100").withId("refund-e2e").withKey("bob"));
      }
      Stats subStats = new Stats();
      try (var sub = c.subscribe("billing", List.of("orders"), handler, SubscribeOptions.builder().drainOnShutdown(false).stats(subStats).build())) {
        Eventually.await("the three deliveries acked", () -> subStats.acked() == 3);
      }
      assertEquals(before + 100, balance("bob"));
      assertEquals(1, stats.processed());
      assertEquals(3, stats.duplicates()); // the lost ack's redelivery and the producer's two retries
      assertEquals(1, subStats.retried());
    }
  }
  /**
   * docs/semantics.md, "Testing a handler": two groups under every fault an
   * unreliable network makes (node.dev allows them); a handler without
   * idempotency runs some messages twice, Idempotent applies each once.
   */
  @Test
  void underFaultInjectionTheWorkCommitsOncePerMessage() throws Exception {
    StringBuilder config = new StringBuilder("topics:\n  - name: orders\n    partitions: 4\nsubscriptions:\n");
    for (String group : List.of("naive", "billing")) {
      config.append("  - topic: orders\n    group: ").append(group).append("\n    max_attempts: 50\n    visibility_timeout: 1s\n")
          .append("    backoff: {base: 10ms, max: 50ms, multiplier: 2}\n")
          .append("    faults: {duplicate: 0.2, lose_ack: 0.2, delay: 0.2, delay_max: 30ms, early_lease_expiry: 0.05, seed: ")
          .append(group.length()).append("}\n");
    }
    int count = 40;
    try (var s = Harness.Spoold.start(config.toString(), "  dev: true\n"); var c = Client.connect(s.app)) {
      for (int i = 0; i < count; i++) {
        c.publish("orders", OutMessage.of("1").withId("credit-" + i).withKey("dave"));
      }
      var seen = new java.util.concurrent.ConcurrentHashMap<String, Integer>();
      IdempotentStats stats = new IdempotentStats();
      Handler naive = m -> seen.merge(m.id(), 1, Integer::sum); // counts its side effects, no idempotency
      Handler careful = Idempotent.handler(ds, IdempotentTest::credit, IdempotentOptions.builder().stats(stats).build());
      var opts = SubscribeOptions.builder().drainOnShutdown(false).build();
      try (var a = c.subscribe("naive", List.of("orders"), naive, opts); var b = c.subscribe("billing", List.of("orders"), careful, opts)) {
        Eventually.await("every message handled by both groups", () -> stats.processed() == count && seen.size() == count);
      }
      int runs = seen.values().stream().mapToInt(Integer::intValue).sum();
      assertTrue(runs > count, "the faults reached no handler: every message came once");
      assertTrue(stats.duplicates() > 0);
      assertEquals(count, balance("dave"));
    }
  }
}
