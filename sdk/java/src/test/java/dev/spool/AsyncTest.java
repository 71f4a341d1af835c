package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.spool.v1.DeadLetter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** The non-blocking idioms against a real spoold: publishAsync, a CompletionStage handler, onDrained. */
class AsyncTest {
  @Test
  void publishAsyncCompletesWithResultsAndTypedRefusals() throws Exception {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      CompletableFuture<PublishResult> one = c.publishAsync("orders", OutMessage.of("a").withId("async-1").withKey("k"));
      CompletableFuture<List<PublishResult>> batch = c.publishBatchAsync("orders",
          List.of(OutMessage.of("b").withId("async-2").withKey("k"), OutMessage.of("c").withId("async-3").withKey("k")));
      assertEquals("async-1", one.get(10, TimeUnit.SECONDS).id());
      List<PublishResult> rs = batch.get(10, TimeUnit.SECONDS);
      assertEquals(List.of("async-2", "async-3"), List.of(rs.get(0).id(), rs.get(1).id()));
      assertEquals(rs.get(0).offset() + 1, rs.get(1).offset(), "one key, one partition, request order");
      assertEquals(List.of(), c.publishBatchAsync("orders", List.of()).get());

      // A refusal completes the future exceptionally with the same typed exception publish throws.
      ExecutionException e = assertThrows(ExecutionException.class,
          () -> c.publishAsync("nope", OutMessage.of("x")).get(10, TimeUnit.SECONDS));
      NotFoundException nf = (NotFoundException) e.getCause();
      assertEquals(Reason.UNKNOWN_TOPIC, nf.reason());
      assertThrows(IllegalArgumentException.class, () -> c.publishAsync("", OutMessage.of("x")));
    }
  }

  @Test
  void completionStageHandlerOutcomesAndOnDrained() {
    try (var s = Harness.Spoold.start(Harness.ordersConfig("10s", 5, null)); var c = Client.connect(s.app)) {
      c.publishBatch("orders", List.of(OutMessage.of("ok").withId("m-ok").withKey("a"),
          OutMessage.of("flaky").withId("m-flaky").withKey("b"), OutMessage.of("poison").withId("m-poison").withKey("c")));
      Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
      List<String> lastErrors = new CopyOnWriteArrayList<>();
      Stats stats = new Stats();
      AtomicInteger drained = new AtomicInteger();
      // The stages complete on another thread, after the handler returned.
      Executor later = CompletableFuture.delayedExecutor(50, TimeUnit.MILLISECONDS);
      var sub = c.subscribe("workers", List.of("orders"), Handler.async(m -> {
        attempts.computeIfAbsent(m.id(), k -> new CopyOnWriteArrayList<>()).add(m.attempt());
        if (!m.lastError().isEmpty()) {
          lastErrors.add(m.lastError());
        }
        return CompletableFuture.supplyAsync(() -> {
          switch (m.payloadUtf8()) {
            case "flaky":
              if (m.attempt() == 1) {
                throw new IllegalStateException("downstream busy"); // the stage fails with a CompletionException around it
              }
              return null;
            case "poison":
              throw new CompletionException(new dev.spool.DeadLetter("bad-schema"));
            default:
              return null;
          }
        }, later);
      }), SubscribeTest.opts().concurrency(4).stats(stats).onDrained(drained::incrementAndGet).build());
      Eventually.await("ok and flaky acked, poison dead-lettered", () -> stats.acked() == 2 && stats.deadLettered() == 1);
      assertEquals(0, drained.get(), "onDrained ran before the subscription ended");
      sub.close();
      assertEquals(1, drained.get(), "onDrained had not run when close() returned");

      assertEquals(List.of(1), attempts.get("m-ok"));
      assertEquals(List.of(1, 2), attempts.get("m-flaky"));
      assertEquals(List.of("downstream busy"), lastErrors, "the stage's exception, unwrapped, is the next attempt's error");
      List<DeadLetter> dl = new ArrayList<>();
      Eventually.await("the dead letter stored", () -> {
        dl.clear();
        dl.addAll(s.deadLetters("workers", "orders"));
        return dl.size() == 1;
      });
      assertEquals("bad-schema", dl.get(0).getReason());
      assertTrue(stats.retried() == 1, "retried " + stats.retried());
    }
  }
}
