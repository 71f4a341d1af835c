package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;

/** Publish, PublishStream and errors against a real spoold. */
class PublishTest {
  @Test
  void publishBatchAndSingleWithIdsKeysHeaders() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      List<PublishResult> rs = c.publishBatch("orders", List.of(
          OutMessage.of("a").withId("order-1").withKey("cust-1").withHeader("schema", "v2"),
          OutMessage.of("b").withId("order-2").withKey("cust-2".getBytes()),
          OutMessage.of(new byte[] {'c'}))); // id chosen by the sidecar
      assertEquals("order-1", rs.get(0).id());
      assertEquals("order-2", rs.get(1).id());
      assertNotEquals("", rs.get(2).id());
      assertTrue(rs.stream().allMatch(r -> r.partition() >= 0 && r.partition() < 4));
      PublishResult one = c.publish("orders", OutMessage.of("d").withKey("cust-1").withId("order-3"), Acks.LEADER);
      assertEquals("order-3", one.id());
      assertEquals(rs.get(0).partition(), one.partition(), "same key, same partition");
      assertTrue(one.offset() > rs.get(0).offset());

      Map<String, Message> got = new ConcurrentHashMap<>();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> got.put(m.id(), m), SubscribeOptions.builder().drainOnShutdown(false).build())) {
        Eventually.await("all four delivered", () -> got.size() == 4);
      }
      Message m = got.get("order-1");
      assertEquals("cust-1", m.keyUtf8());
      assertEquals("a", m.payloadUtf8());
      assertEquals(Map.of("schema", "v2"), m.headers());
      assertEquals("b", got.get("order-2").payloadUtf8());
    }
  }

  /** A scheduled message waits for its time; one cancelled before it is never delivered. */
  @Test
  void scheduledMessagesWaitAndCanBeCancelled() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      long sent = System.currentTimeMillis();
      c.publish("orders", OutMessage.of("later").withId("later").withKey("k").withDeliverAfter(Duration.ofSeconds(1)));
      PublishResult gone = c.publish("orders", OutMessage.of("gone").withId("gone").withKey("k").withDeliverAfter(Duration.ofSeconds(1)));
      c.cancelScheduled("orders", gone);
      c.cancelScheduled("orders", "gone"); // twice is fine
      NotFoundException nf = assertThrows(NotFoundException.class, () -> c.cancelScheduled("orders", "never-published"));
      assertEquals(Reason.UNKNOWN_SCHEDULED_MESSAGE, nf.reason());
      InvalidRequestException far = assertThrows(InvalidRequestException.class,
          () -> c.publish("orders", OutMessage.of("x").withDeliverAt(java.time.Instant.now().plus(Duration.ofDays(400)))));
      assertEquals(Reason.INVALID_SCHEDULE, far.reason());

      Map<String, Long> got = new ConcurrentHashMap<>();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> got.put(m.id(), System.currentTimeMillis()),
          SubscribeOptions.builder().drainOnShutdown(false).build())) {
        Eventually.await("the scheduled message delivered", () -> got.containsKey("later"));
      }
      assertTrue(got.get("later") >= sent + 1000, "delivered " + (sent + 1000 - got.get("later")) + " ms early");
      assertFalse(got.containsKey("gone"), "a cancelled message was delivered");
    }
  }

  @Test
  void refusalsAreTypedWithTheSidecarsReason() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      NotFoundException nf = assertThrows(NotFoundException.class, () -> c.publish("nope", OutMessage.of("x")));
      assertEquals(Reason.UNKNOWN_TOPIC, nf.reason());
      assertFalse(nf.isRetryable());
      assertTrue(nf.getMessage().contains("\"nope\"") && nf.getMessage().contains("UNKNOWN_TOPIC"), nf.getMessage());

      byte[] big = new byte[(1 << 20) + 1]; // above limits.max_message_bytes, 1 MiB by default
      InvalidRequestException tooBig = assertThrows(InvalidRequestException.class,
          () -> c.publishBatch("orders", List.of(OutMessage.of("ok"), OutMessage.of(big))));
      assertEquals(Reason.MESSAGE_TOO_LARGE, tooBig.reason());
      assertEquals("1", tooBig.metadata().get("index"));
      assertFalse(tooBig.isRetryable());

      InvalidRequestException reserved = assertThrows(InvalidRequestException.class,
          () -> c.publish("orders", OutMessage.of("x").withHeader("spool-attempt", "1")));
      assertEquals(Reason.RESERVED_HEADER, reserved.reason());

      // The same refusal in band on a PublishStream: the stream stays open.
      try (Publisher p = c.publisher("orders")) {
        CompletableFuture<PublishResult> bad = p.publish(OutMessage.of(big));
        CompletableFuture<PublishResult> good = p.publish(OutMessage.of("fine").withId("after-bad"));
        ExecutionException e = assertThrows(ExecutionException.class, bad::get);
        assertTrue(e.getCause() instanceof InvalidRequestException, e.getCause().toString());
        assertEquals(Reason.MESSAGE_TOO_LARGE, ((SpoolException) e.getCause()).reason());
        assertEquals("after-bad", good.join().id());
      }
    }
  }

  @Test
  void overAUnixSocket() {
    try (var s = Harness.Spoold.startWithUnixSocket(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.unixAddr())) {
      assertEquals("over-uds", c.publish("orders", OutMessage.of("x").withId("over-uds")).id());
      Stats stats = new Stats();
      try (var sub = c.subscribe("workers", List.of("orders"), m -> {}, SubscribeOptions.builder().drainOnShutdown(false).stats(stats).build())) {
        Eventually.await("delivered and acked over the socket", () -> stats.acked() == 1);
      }
    }
  }

  @Test
  void nothingAnsweringSaysIsSpooldRunning() {
    String addr = "127.0.0.1:" + Harness.freePort();
    SidecarUnreachableException e = assertThrows(SidecarUnreachableException.class,
        () -> Client.connect(addr, ClientOptions.builder().connectTimeout(Duration.ofMillis(500)).build()));
    assertTrue(e.getMessage().contains("is spoold running"), e.getMessage());
    try (var c = Client.connect(addr, ClientOptions.builder().connectTimeout(Duration.ZERO).build())) {
      SidecarUnreachableException p = assertThrows(SidecarUnreachableException.class, () -> c.publish("orders", OutMessage.of("x").withId("a")));
      assertEquals("", p.reason());
      assertTrue(p.isRetryable());
      assertTrue(p.getMessage().contains("is spoold running"), p.getMessage());
    }
  }

  @Test
  void streamingPublisherKeepsPerKeyOrder() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      int n = 3000;
      List<CompletableFuture<PublishResult>> futs = new ArrayList<>();
      try (Publisher p = c.publisher("orders", PublisherOptions.builder().maxInFlight(256).build())) {
        for (int i = 0; i < n; i++) {
          futs.add(p.publish(OutMessage.of("m" + i).withKey("k" + (i % 10)).withId("id-" + i), i % 2 == 0 ? Acks.ALL : Acks.LEADER));
        }
      } // close waits for every confirmation
      Map<Integer, List<Long>> perKey = new ConcurrentHashMap<>();
      for (int i = 0; i < n; i++) {
        assertTrue(futs.get(i).isDone(), "unconfirmed after close");
        PublishResult r = futs.get(i).join();
        assertEquals("id-" + i, r.id());
        perKey.computeIfAbsent(i % 10, k -> new ArrayList<>()).add(r.offset());
      }
      perKey.forEach((k, offs) -> assertEquals(offs.stream().sorted().toList(), offs, "key " + k + " out of publish order"));
    }
  }

  @Test
  void publisherSurvivesASidecarRestart() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app); Publisher p = c.publisher("orders")) {
      assertEquals("b", p.publish(OutMessage.of("before").withId("b")).join().id());
      s.restart();
      // The old stream is gone: a publish may fail with the stream's status
      // (may or may not be stored), then a new stream is opened.
      String[] got = {null};
      Eventually.await("a publish after the restart", () -> {
        try {
          got[0] = p.publish(OutMessage.of("after").withId("a")).get().id();
          return true;
        } catch (ExecutionException e) {
          SpoolException se = (SpoolException) e.getCause();
          assertTrue(se.isRetryable() || se.getMessage().contains("stream"), se.toString());
          return false;
        }
      });
      assertEquals("a", got[0]);
    }
  }

  /**
   * A publish-only app (no subscription waits for its sidecar) is connected
   * again within 1 s of the sidecar being ready after 6.5 s down, as a
   * subscription is (SubscribeTest, the conformance's reconnect cell): its
   * failed publishes cut grpc-java's growing connect backoff short.
   */
  @Test
  void aPublishOnlyAppReconnectsWithinASecondOfItsSidecar() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null));
        var c = Client.connect(s.app, ClientOptions.builder().publishTimeout(Duration.ofSeconds(2)).build())) {
      c.publish("orders", OutMessage.of("x").withId("before"));
      s.stop();
      long downUntil = System.nanoTime() + Duration.ofMillis(6500).toNanos();
      Eventually.await("6.5 s of publishes failing while spoold is down", Duration.ofSeconds(30), () -> {
        try {
          c.publish("orders", OutMessage.of("x").withId("down"));
        } catch (SpoolException e) {
          return System.nanoTime() - downUntil >= 0;
        }
        throw new AssertionError("a publish succeeded while spoold was down");
      });
      s.startAgain();
      long ready = System.nanoTime();
      Eventually.await("a publish after spoold is ready again", () -> {
        c.publish("orders", OutMessage.of("x").withId("after")); // a failure is retried
        return true;
      });
      Duration took = Duration.ofNanos(System.nanoTime() - ready);
      System.out.printf("published %d ms after spoold was ready again%n", took.toMillis());
      assertTrue(took.compareTo(Duration.ofSeconds(1)) <= 0, "the first publish succeeded " + took.toMillis()
          + " ms after spoold was ready again, want within 1 s: grpc-java's connect backoff kept the publish-only app away");
    }
  }

  @Test
  void publisherCloseIsBoundedWhenTheSidecarIsGone() throws Exception {
    var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null));
    try (var c = Client.connect(s.app)) {
      Publisher p = c.publisher("orders", PublisherOptions.builder().closeTimeout(Duration.ofMillis(300)).build());
      assertEquals("x", p.publish(OutMessage.of("x").withId("x")).join().id());
      s.close(); // SIGKILL: nothing answers any more
      CompletableFuture<PublishResult> lost = p.publish(OutMessage.of("y").withId("y"));
      long t0 = System.nanoTime();
      try {
        p.close();
      } catch (SpoolException e) {
        assertTrue(e.getMessage().contains("unconfirmed after the close timeout"), e.getMessage());
      }
      assertTrue(Duration.ofNanos(System.nanoTime() - t0).compareTo(Duration.ofSeconds(5)) < 0, "close was not bounded");
      ExecutionException e = assertThrows(ExecutionException.class, lost::get);
      assertTrue(e.getCause() instanceof SpoolException, e.getCause().toString());
      assertTrue(e.getCause().getMessage().contains("may or may not be stored") || e.getCause().getMessage().contains("not sent"), e.getCause().getMessage());
    } finally {
      s.close();
    }
  }
}
