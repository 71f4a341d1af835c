package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.spool.v1.DeadLetter;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Subscribe against a real spoold: outcomes, attempts, leases, concurrency, order, reconnects. */
class SubscribeTest {
  static SubscribeOptions.Builder opts() {
    return SubscribeOptions.builder().drainOnShutdown(false).reconnectBackoff(Duration.ofMillis(20), Duration.ofMillis(200));
  }

  static List<OutMessage> numbered(int n, String keyPrefix) {
    List<OutMessage> ms = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      ms.add(OutMessage.of(String.valueOf(i)).withKey(keyPrefix + i));
    }
    return ms;
  }

  @Test
  void ackAndMessageFields() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      List<PublishResult> rs = c.publishBatch("orders", numbered(50, "k"));
      Map<String, Integer> seen = new ConcurrentHashMap<>();
      Map<String, Message> msgs = new ConcurrentHashMap<>();
      Set<String> threads = ConcurrentHashMap.newKeySet();
      Set<Boolean> virtual = ConcurrentHashMap.newKeySet();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        seen.merge(m.id(), 1, Integer::sum);
        msgs.put(m.id(), m);
        threads.add(Thread.currentThread().getName());
        virtual.add(HandlerThreads.isVirtual(Thread.currentThread()));
      }, opts().concurrency(8).stats(stats).build())) {
        Eventually.await("every message acked", () -> stats.acked() == 50);
        Eventually.await("the group has no backlog", () -> s.backlog("workers") == 0);
      }
      assertEquals(50, seen.size());
      assertTrue(seen.values().stream().allMatch(v -> v == 1), "a message was handled twice: " + seen);
      PublishResult r7 = rs.get(7);
      Message m = msgs.get(r7.id());
      assertEquals("orders", m.topic());
      assertEquals("7", m.payloadUtf8());
      assertEquals("k7", m.keyUtf8());
      assertEquals(1, m.attempt());
      assertEquals("workers", m.group());
      assertEquals("", m.lastError());
      assertEquals(r7.partition(), m.partition());
      assertEquals(r7.offset(), m.offset());
      assertTrue(m.fencingToken() > 0);
      assertTrue(m.publishTime().isAfter(Instant.now().minusSeconds(60)));
      assertTrue(m.leaseDeadline().isAfter(m.publishTime()));
      assertFalse(m.firstDeliveryTime().equals(Instant.EPOCH));
      assertTrue(threads.stream().allMatch(t -> t.startsWith("spool-handler-workers-")), threads.toString());
      // Virtual threads where the JDK has them (Java 21+), platform threads otherwise.
      assertEquals(Set.of(HandlerThreads.virtualAvailable()), virtual);
    }
  }

  @Test
  void outcomesRetryAttemptsAndDeadLetter() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
      Map<String, List<String>> lastErrors = new ConcurrentHashMap<>();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        attempts.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.attempt());
        lastErrors.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.lastError());
        switch (m.headers().get("kind")) {
          case "flaky":
            if (m.attempt() < 3) {
              throw new IllegalStateException("flaky failure " + m.attempt());
            }
            break;
          case "later":
            if (m.attempt() < 2) {
              throw new Retry(Duration.ofMillis(30), "not yet");
            }
            break;
          case "down":
            if (m.attempt() < 2) {
              throw new RuntimeException("charging", new RetryDownstream("provider", Duration.ZERO, "provider down"));
            }
            break;
          case "poison":
            throw new dev.spool.DeadLetter("malformed order");
          default:
        }
      }, opts().stats(stats).appVersion("billing-1.2").build())) {
        List<String> kinds = List.of("ok", "flaky", "later", "down", "poison");
        List<OutMessage> out = new ArrayList<>();
        for (String k : kinds) {
          out.add(OutMessage.of("payload-" + k).withId("m-" + k).withKey("key-" + k).withHeader("kind", k));
        }
        List<PublishResult> rs = c.publishBatch("orders", out);
        assertEquals(List.of("m-ok", "m-flaky", "m-later", "m-down", "m-poison"), rs.stream().map(PublishResult::id).toList());
        Eventually.await("every message settled", () -> stats.acked() == 4 && stats.deadLettered() == 1);
      }
      assertEquals(List.of(1), attempts.get("m-ok"));
      assertEquals(List.of(1, 2, 3), attempts.get("m-flaky"));
      assertEquals(List.of("", "flaky failure 1", "flaky failure 2"), lastErrors.get("m-flaky"));
      assertEquals(List.of(1, 2), attempts.get("m-later"));
      assertEquals("retry after 30ms: not yet", lastErrors.get("m-later").get(1));
      assertEquals(List.of(1, 2), attempts.get("m-down"));
      assertEquals("charging", lastErrors.get("m-down").get(1));
      assertEquals(List.of(1), attempts.get("m-poison"));
      assertEquals(2, stats.handlerErrors()); // the two flaky failures; a wrapped outcome is an outcome
      assertEquals(4, stats.retried());

      // The app's DEAD_LETTER is settled before the sidecar has written the entry: wait for it there.
      List<DeadLetter> dl = new ArrayList<>();
      Eventually.await("the dead letter stored", () -> {
        dl.clear();
        dl.addAll(s.deadLetters("workers", "orders"));
        return dl.size() == 1;
      });
      assertEquals("malformed order", dl.get(0).getReason());
      assertEquals("m-poison", dl.get(0).getMessage().getMessageId());
      assertEquals("payload-poison", dl.get(0).getMessage().getPayload().toStringUtf8());
      assertEquals("billing-1.2", dl.get(0).getAppVersion());
    }
  }

  @Test
  void releaseDoesNotCountAnAttempt() {
    try (var redis = new Harness.Redis();
        var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, redis.addr));
        var c = Client.connect(s.app)) {
      List<Integer> attempts = new CopyOnWriteArrayList<>();
      AtomicInteger releases = new AtomicInteger();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        attempts.add(m.attempt());
        if (releases.get() < 3) {
          releases.incrementAndGet();
          throw new Release("not now");
        }
        if (m.attempt() == 1) {
          throw new Exception("one real failure");
        }
      }, opts().stats(stats).build())) {
        c.publish("orders", OutMessage.of("x").withId("rel").withKey("rel"));
        Eventually.await("released three times, failed once, then acked", () -> stats.acked() == 1);
      }
      assertEquals(3, stats.released());
      assertEquals(List.of(1, 1, 1, 1, 2), attempts, "a release counted an attempt");
    }
  }

  @Test
  void leaseIsExtendedWhileASlowHandlerRuns() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("1s", 5, null)); var c = Client.connect(s.app)) {
      List<Integer> attempts = new CopyOnWriteArrayList<>();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        attempts.add(m.attempt());
        Thread.sleep(2500); // sleep-ok: the work, 2.5 visibility timeouts
      }, opts().stats(stats).build())) {
        c.publish("orders", OutMessage.of("x").withId("slow").withKey("slow"));
        Eventually.await("the slow message acked", () -> stats.acked() == 1);
      }
      assertEquals(List.of(1), attempts, "redelivered while the handler ran: the lease was not extended");
      assertTrue(stats.extended() >= 3, "extended " + stats.extended() + " times, want at least 3");
      assertEquals(0, stats.settleErrors());
    }
  }

  @Test
  void prefetchedDeliveriesKeepTheirLeaseWhileTheyWait() {
    // One worker, two prefetched: the third message waits 2.4 s behind two
    // handlers of 1.2 s, more than twice the visibility timeout (1 s). Its
    // lease must be extended while it waits, or it expires before it starts
    // (a counted attempt, a redelivery, NOT_IN_FLIGHT for its settlement).
    try (var s = Harness.Spoold.start(Harness.ordersConfig("1s", 5, null)); var c = Client.connect(s.app)) {
      Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        attempts.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.attempt());
        Thread.sleep(1200); // sleep-ok: the work, longer than the visibility timeout
      }, opts().concurrency(1).prefetch(2).stats(stats).build())) {
        c.publishBatch("orders", List.of(
            OutMessage.of("a").withId("w1").withKey("a"), OutMessage.of("b").withId("w2").withKey("b"), OutMessage.of("c").withId("w3").withKey("c")));
        Eventually.await("all three acked", () -> stats.acked() == 3);
      }
      assertEquals(Map.of("w1", List.of(1), "w2", List.of(1), "w3", List.of(1)), attempts, "a waiting delivery's lease expired");
      assertEquals(0, stats.settleErrors());
      assertEquals(0, stats.retried());
    }
  }

  @Test
  void concurrencyLimitHolds() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null, "none")); var c = Client.connect(s.app)) {
      AtomicInteger running = new AtomicInteger();
      AtomicInteger max = new AtomicInteger();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        int now = running.incrementAndGet();
        max.accumulateAndGet(now, Math::max);
        Thread.sleep(20); // sleep-ok: the work
        running.decrementAndGet();
      }, opts().concurrency(3).prefetch(5).stats(stats).build())) {
        c.publishBatch("orders", numbered(60, "c"));
        Eventually.await("every message acked", () -> stats.acked() == 60);
      }
      assertEquals(3, max.get(), "handlers running at once");
      // Never more outstanding than concurrency + prefetch: no excess released.
      assertEquals(0, stats.released());
    }
  }

  @Test
  void perKeyOrderWithConcurrency() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      int keys = 12;
      int perKey = 10;
      List<OutMessage> ms = new ArrayList<>();
      for (int i = 0; i < keys * perKey; i++) {
        ms.add(OutMessage.of(String.valueOf(i / keys)).withKey("k" + (i % keys)));
      }
      c.publishBatch("orders", ms);
      Set<String> atApp = ConcurrentHashMap.newKeySet();
      Map<String, List<Integer>> order = new ConcurrentHashMap<>();
      List<String> overlap = new CopyOnWriteArrayList<>();
      AtomicInteger running = new AtomicInteger();
      AtomicInteger maxRunning = new AtomicInteger();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {
        String k = m.keyUtf8();
        if (!atApp.add(k)) {
          overlap.add(k);
        }
        maxRunning.accumulateAndGet(running.incrementAndGet(), Math::max);
        Thread.sleep(3); // sleep-ok: the work
        order.computeIfAbsent(k, x -> new CopyOnWriteArrayList<>()).add(Integer.parseInt(m.payloadUtf8()));
        atApp.remove(k);
        running.decrementAndGet();
      }, opts().concurrency(8).stats(stats).build())) {
        Eventually.await("every message acked", () -> stats.acked() == keys * perKey);
      }
      assertEquals(List.of(), overlap, "two messages of a key at the app at once");
      assertTrue(maxRunning.get() > 1, "handlers ran one at a time: concurrency not used");
      List<Integer> want = new ArrayList<>();
      for (int i = 0; i < perKey; i++) {
        want.add(i);
      }
      order.forEach((k, seq) -> assertEquals(want, seq, "key " + k + " out of order"));
    }
  }

  @Test
  void reconnectsAfterSpooldRestarts() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      Set<String> handled = ConcurrentHashMap.newKeySet();
      Stats stats = new Stats();
      CapturingLogger log = new CapturingLogger();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> handled.add(m.id()), opts().stats(stats).logger(log).build())) {
        c.publishBatch("orders", List.of(OutMessage.of("x").withId("before-1"), OutMessage.of("x").withId("before-2")));
        Eventually.await("messages before the restart handled", () -> handled.containsAll(List.of("before-1", "before-2")));
        s.restart();
        // The channel may still be reconnecting: retry with the same ids, as a producer should.
        Eventually.await("publish after the restart", () -> {
          try {
            c.publishBatch("orders", List.of(OutMessage.of("x").withId("after-1"), OutMessage.of("x").withId("after-2")));
            return true;
          } catch (SpoolException e) {
            if (!e.isRetryable()) {
              throw e;
            }
            return false;
          }
        });
        Eventually.await("messages after the restart handled", () -> handled.containsAll(List.of("after-1", "after-2")));
      }
      assertTrue(stats.reconnects() >= 1, "no reconnect counted");
      assertTrue(log.contains("reconnecting"), "no reconnect logged: " + log.lines);
    }
  }

  /**
   * Through a proxy that stops forwarding without closing, the channel's
   * keepalive (a ping after 10 s without a frame, 3 s for its answer) closes
   * the dead connection and the subscription reconnects within 13 s of the
   * cut (before: nothing noticed it).
   */
  @Test
  void aCutConnectionIsNoticedWithinTheKeepalive() throws Exception {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var proxy = CutProxy.start(s.app);
        var c = Client.connect(proxy.addr()); var direct = Client.connect(s.app)) {
      Set<String> handled = ConcurrentHashMap.newKeySet();
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> handled.add(m.id()), opts().stats(stats).build())) {
        direct.publish("orders", OutMessage.of("x").withId("before"));
        Eventually.await("the message published before the cut handled", () -> handled.contains("before"));
        long cut = System.nanoTime();
        proxy.cut();
        Duration bound = ClientOptions.DEFAULT_KEEPALIVE_TIME.plus(ClientOptions.DEFAULT_KEEPALIVE_TIMEOUT).plusSeconds(2);
        Eventually.await("the subscription reconnected after the cut", bound, () -> stats.reconnects() >= 1);
        System.out.printf("reconnected %.1f s after the cut%n", (System.nanoTime() - cut) / 1e9);
      }
    }
  }

  @Test
  void unknownGroupIsRefusedForGood() throws Exception {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      Subscription sub = c.subscribe("nobody", List.of("orders"), m -> {}, opts().build());
      NotFoundException e = assertThrows(NotFoundException.class, () -> sub.awaitTermination(Duration.ofSeconds(20)));
      assertEquals(Reason.UNKNOWN_GROUP, e.reason());
      assertTrue(e.getMessage().contains("check the group and topics"), e.getMessage());
      assertFalse(sub.isRunning());
      assertThrows(NotFoundException.class, sub::close);
    }
  }
}
