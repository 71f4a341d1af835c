package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** The drain: running handlers finish and are acked, prefetched deliveries go back uncounted, nothing is lost. */
class DrainTest {
  static List<OutMessage> messages(int n) {
    List<OutMessage> ms = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      ms.add(OutMessage.of(String.valueOf(i)).withId("m" + i).withKey("k" + i));
    }
    return ms;
  }

  @Test
  void closeFinishesRunningHandlersAndReleasesPrefetchedOnes() throws Exception {
    try (var redis = new Harness.Redis();
        var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, redis.addr));
        var c = Client.connect(s.app)) {
      c.publishBatch("orders", messages(10));
      CountDownLatch go = new CountDownLatch(1);
      Set<String> started = ConcurrentHashMap.newKeySet();
      Set<String> done = ConcurrentHashMap.newKeySet();
      Stats stats = new Stats();
      Subscription first = c.subscribe("workers", List.of("orders"), m -> {
        started.add(m.id());
        go.await();
        done.add(m.id());
      }, SubscribeOptions.builder().concurrency(2).prefetch(4).drainOnShutdown(false).stats(stats).build());
      Eventually.await("two running, four prefetched", () -> started.size() == 2 && stats.delivered() == 6);
      CompletableFuture<Void> closing = CompletableFuture.runAsync(first::close);
      Eventually.await("the four prefetched handed back", () -> stats.released() == 4);
      assertFalse(closing.isDone(), "close returned with handlers running");
      go.countDown();
      closing.get(20, TimeUnit.SECONDS);
      assertEquals(started, done, "half-done at the drain");
      assertEquals(2, stats.acked());
      assertEquals(0, stats.dropped());

      Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
      try (var second = c.subscribe("workers", List.of("orders"), m -> attempts.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.attempt()),
          SubscribeOptions.builder().drainOnShutdown(false).build())) {
        Eventually.await("the other eight handled", () -> attempts.size() == 8);
      }
      assertTrue(attempts.keySet().stream().noneMatch(done::contains), "a message finished before the drain came again: " + attempts);
      assertTrue(attempts.values().stream().allMatch(a -> a.equals(List.of(1))), "a released message counted an attempt: " + attempts);
    }
  }

  @Test
  void drainTimeoutInterruptsHandlersAndAbandonsThoseThatIgnoreIt() throws Exception {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      c.publishBatch("orders", List.of(OutMessage.of("polite").withKey("a"), OutMessage.of("stubborn").withKey("b")));
      CountDownLatch free = new CountDownLatch(1);
      Set<String> running = ConcurrentHashMap.newKeySet();
      Stats stats = new Stats();
      Subscription sub = c.subscribe("workers", List.of("orders"), m -> {
        running.add(m.payloadUtf8());
        if (m.payloadUtf8().equals("polite")) {
          new CountDownLatch(1).await(); // until interrupted
        }
        while (free.getCount() > 0) { // ignores interrupts
          try {
            free.await();
          } catch (InterruptedException e) {
            // keeps working
          }
        }
      }, SubscribeOptions.builder().concurrency(2).drainTimeout(Duration.ofMillis(200)).drainOnShutdown(false).stats(stats).build());
      try {
        Eventually.await("both handlers running", () -> running.size() == 2);
        DrainException e = assertThrows(DrainException.class, sub::close);
        assertEquals(1, e.abandoned());
        assertTrue(e.getMessage().contains("make handlers return when interrupted"), e.getMessage());
        assertEquals(1, stats.retried(), "the interrupted handler's outcome (RETRY) was not sent");
      } finally {
        free.countDown();
      }
    }
  }

  static List<String[]> events(Path p) throws IOException {
    if (!Files.exists(p)) {
      return List.of();
    }
    return Files.readAllLines(p).stream().map(l -> l.split(" ")).filter(f -> f.length == 3).collect(Collectors.toList());
  }

  static Set<String> ids(List<String[]> ev, String kind) {
    return ev.stream().filter(f -> f[0].equals(kind)).map(f -> f[1]).collect(Collectors.toSet());
  }

  static Process startApp(String addr, Path record) throws IOException {
    List<String> cmd = new ArrayList<>(Harness.java());
    cmd.addAll(List.of("-cp", Harness.testClasspath(), DrainApp.class.getName(), addr, record.toString(), "300"));
    return new ProcessBuilder(cmd)
        .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(Path.of(record + ".log").toFile())).start();
  }

  @Test
  void sigtermDrainsTheAppProcessAndLosesNothing() throws Exception {
    Path dir = Harness.tmpDir("drain");
    try (var redis = new Harness.Redis();
        var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, redis.addr));
        var c = Client.connect(s.app)) {
      Set<String> all = new HashSet<>();
      for (PublishResult r : c.publishBatch("orders", messages(40))) {
        all.add(r.id());
      }
      Path first = dir.resolve("first.rec");
      Process app = startApp(s.app, first);
      try {
        Eventually.await("the first app at work", Duration.ofSeconds(30), () -> ids(events(first), "start").size() >= 6);
        app.destroy(); // SIGTERM: the SDK's shutdown hook drains
        assertTrue(app.waitFor(30, TimeUnit.SECONDS), "the app did not exit after SIGTERM");
        // A JVM ended by SIGTERM exits 143 (128 + 15) after its shutdown hooks.
        assertEquals(143, app.exitValue(), Files.readString(Path.of(first + ".log")));
      } finally {
        app.destroyForcibly();
      }
      List<String[]> ev = events(first);
      Set<String> started = ids(ev, "start");
      Set<String> finished = ids(ev, "done");
      assertEquals(started, finished, "half-done at the drain");
      assertTrue(all.containsAll(started) && started.size() < all.size(), "the first app handled everything: the drain was not tested");
      assertFalse(Files.readString(Path.of(first + ".log")).contains("abandon"));
      // The onDrained callback, then the code after awaitTermination, both to their end.
      assertEquals(List.of("on-drained", "after-await"), ev.stream().filter(f -> f[0].equals("cleanup")).map(f -> f[1]).collect(Collectors.toList()),
          "the app's onDrained callback and its code after awaitTermination did not both run to their end on SIGTERM");

      Path second = dir.resolve("second.rec");
      Process app2 = startApp(s.app, second);
      try {
        Eventually.await("every message done", Duration.ofSeconds(30), () -> {
          Set<String> d = new HashSet<>(finished);
          d.addAll(ids(events(second), "done"));
          return d.containsAll(all);
        });
        app2.destroy();
        assertTrue(app2.waitFor(30, TimeUnit.SECONDS));
      } finally {
        app2.destroyForcibly();
      }
      List<String[]> ev2 = events(second);
      Set<String> again = ids(ev2, "start");
      again.retainAll(finished);
      assertEquals(Set.of(), again, "a message finished before the drain came again");
      // Messages the first app received but never started were released: their next delivery is still attempt 1.
      assertTrue(ev2.stream().filter(f -> f[0].equals("start")).allMatch(f -> f[2].equals("1")),
          ev2.stream().map(f -> String.join(" ", f)).collect(Collectors.joining("; ")));
    } finally {
      Harness.deleteTree(dir.toFile());
    }
  }
}
