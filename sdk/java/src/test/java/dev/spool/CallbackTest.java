package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.spool.v1.DeadLetter;
import dev.spool.v1.Delivery;
import dev.spool.v1.HandleRequest;
import dev.spool.v1.HandleResponse;
import dev.spool.v1.HandlerServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.net.InetSocketAddress;
import java.util.concurrent.TimeUnit;
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

  private static final String TOKEN = "0123456789abcdef0123456789abcdef-java";

  /** A raw Handle call, as any caller that reaches the port could make. */
  private static HandleResponse handleCall(int port, String authorization) throws InterruptedException {
    ManagedChannel ch = ManagedChannelBuilder.forAddress("127.0.0.1", port).usePlaintext().build();
    try {
      HandlerServiceGrpc.HandlerServiceBlockingStub stub = HandlerServiceGrpc.newBlockingStub(ch).withDeadlineAfter(10, TimeUnit.SECONDS);
      if (authorization != null) {
        Metadata md = new Metadata();
        md.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), authorization);
        stub = stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md));
      }
      return stub.handle(HandleRequest.newBuilder()
          .setDelivery(Delivery.newBuilder().setTopic("orders").setMessageId("m1").setAttempt(1)).build());
    } finally {
      ch.shutdownNow();
      ch.awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** With a token, a call without it or with another is refused (UNAUTHENTICATED) before the handler runs. */
  @Test
  void tokenRefusesOtherCallers() throws Exception {
    List<String> ran = new CopyOnWriteArrayList<>();
    HandlerServerOptions opts = HandlerServerOptions.builder().drainOnShutdown(false).token(TOKEN).build();
    try (HandlerServer srv = HandlerServer.start("127.0.0.1:0", m -> ran.add(m.id()), opts)) {
      for (String auth : new String[] {null, "Bearer wrong-token-0123456789abcdef0123456789", TOKEN}) {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> handleCall(srv.port(), auth), "authorization " + auth);
        assertEquals(Status.Code.UNAUTHENTICATED, e.getStatus().getCode(), "authorization " + auth);
        assertFalse(String.valueOf(e.getStatus().getDescription()).contains(TOKEN));
      }
      assertEquals(List.of(), ran, "the handler ran for a refused call");
      assertEquals(dev.spool.v1.Outcome.OUTCOME_ACK, handleCall(srv.port(), "Bearer " + TOKEN).getOutcome());
      assertEquals(List.of("m1"), ran);
    }
  }

  /** The default address is loopback on a port none of spoold's; an address without a host is loopback too. */
  @Test
  void defaultAddressIsLoopback() throws Exception {
    assertEquals("127.0.0.1:7080", HandlerServer.DEFAULT_ADDRESS); // spoold: app 7070, admin 7071, cluster 7072, probe 7073
    try (HandlerServer srv = HandlerServer.start(":0", m -> { }, HandlerServerOptions.builder().drainOnShutdown(false).build())) {
      InetSocketAddress a = srv.address();
      assertTrue(a.getAddress().isLoopbackAddress(), "listening on " + a);
      assertEquals(dev.spool.v1.Outcome.OUTCOME_ACK, handleCall(srv.port(), null).getOutcome());
    }
  }

  /** SIGTERM of a callback-mode app: its code after awaitTermination runs to its end before the JVM halts. */
  @Test
  void codeAfterAwaitTerminationRunsOnSigterm() throws Exception {
    java.nio.file.Path dir = Harness.tmpDir("callback-sigterm");
    java.nio.file.Path record = dir.resolve("app.rec");
    List<String> cmd = new ArrayList<>(Harness.java());
    cmd.addAll(List.of("-cp", Harness.testClasspath(), CallbackApp.class.getName(), "127.0.0.1:" + Harness.freePort(), record.toString()));
    Process app = new ProcessBuilder(cmd).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("app.log").toFile())).start();
    try {
      Eventually.await("the app serving", Duration.ofSeconds(30),
          () -> java.nio.file.Files.exists(record) && java.nio.file.Files.readString(record).contains("ready"));
      app.destroy(); // SIGTERM: the SDK's shutdown hook closes the server
      assertTrue(app.waitFor(30, TimeUnit.SECONDS), "the app did not exit after SIGTERM");
      assertEquals(List.of("ready", "cleanup after-await"), java.nio.file.Files.readAllLines(record),
          "the app's code after awaitTermination did not run to its end on SIGTERM; its log: " + java.nio.file.Files.readString(dir.resolve("app.log")));
    } finally {
      app.destroyForcibly();
      Harness.deleteTree(dir.toFile());
    }
  }
}
