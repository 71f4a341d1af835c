package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.spool.v1.DeadLetter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Callback mode against a real spoold: the sidecar calls the app's HandlerService. */
class CallbackTest {
  @Test
  void ackRetryDeadLetterRelease() throws Exception {
    Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
    Set<String> acked = ConcurrentHashMap.newKeySet();
    AtomicInteger released = new AtomicInteger();
    Handler h = m -> {
      attempts.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.attempt());
      switch (m.keyUtf8()) {
        case "flaky":
          if (m.attempt() == 1) {
            throw new Retry(Duration.ofMillis(10), new java.io.IOException("timeout talking to the provider"));
          }
          break;
        case "thrown":
          if (m.attempt() == 1) {
            throw new IllegalStateException("boom");
          }
          break;
        case "bad":
          throw new dev.spool.DeadLetter("malformed order");
        case "release":
          if (released.get() < 2) {
            released.incrementAndGet();
            throw new Release();
          }
          break;
        default:
      }
      acked.add(m.id());
    };
    try (HandlerServer srv = HandlerServer.start("127.0.0.1:0", h, HandlerServerOptions.builder().drainOnShutdown(false).build())) {
      String config = "topics:\n"
          + "  - name: orders\n"
          + "    partitions: 2\n"
          + "subscriptions:\n"
          + "  - topic: orders\n"
          + "    group: mailer\n"
          + "    delivery: callback\n"
          + "    app_address: \"127.0.0.1:" + srv.port() + "\"\n"
          + "    max_attempts: 3\n"
          + "    backoff: {base: 20ms, max: 100ms, multiplier: 2}\n";
      try (var s = Harness.Spoold.start(config); var c = Client.connect(s.app)) {
        List<OutMessage> ms = new ArrayList<>();
        for (String k : List.of("a", "flaky", "thrown", "bad", "release")) {
          ms.add(OutMessage.of(k).withId("cb-" + k).withKey(k));
        }
        c.publishBatch("orders", ms);
        Eventually.await("all but the bad message acked", () -> acked.size() == 4);
        List<DeadLetter> dl = new ArrayList<>();
        Eventually.await("the bad message dead-lettered", () -> {
          dl.clear();
          dl.addAll(s.deadLetters("mailer", "orders"));
          return dl.size() == 1;
        });
        assertEquals("malformed order", dl.get(0).getReason());
        assertEquals("cb-bad", dl.get(0).getMessage().getMessageId());
      }
    }
    assertEquals(List.of(1), attempts.get("cb-a"));
    assertEquals(List.of(1, 2), attempts.get("cb-flaky"));
    assertEquals(List.of(1, 2), attempts.get("cb-thrown"));
    assertEquals(List.of(1), attempts.get("cb-bad"));
    assertEquals(List.of(1, 1, 1), attempts.get("cb-release"), "a release counted an attempt");
  }
}
