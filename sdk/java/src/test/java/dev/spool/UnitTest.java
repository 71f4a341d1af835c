package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import dev.spool.v1.Outcome;
import dev.spool.v1.SubscribeRequest;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The pure parts: outcomes, text limits, backoff, lease plans, the outbox, error reading, options. */
class UnitTest {
  /** A delivery's key and payload are copied out of the frame when first asked for, once. */
  @Test
  void messageFromADeliveryCopiesKeyAndPayloadOnFirstUse() {
    dev.spool.v1.Delivery d = dev.spool.v1.Delivery.newBuilder().setMessageId("m1")
        .setKey(com.google.protobuf.ByteString.copyFromUtf8("k1")).setPayload(com.google.protobuf.ByteString.copyFromUtf8("héllo")).build();
    Message m = Message.of(d);
    assertEquals("héllo", m.payloadUtf8());
    assertEquals("k1", m.keyUtf8());
    byte[] p = m.payload();
    assertEquals("héllo", new String(p, StandardCharsets.UTF_8));
    assertTrue(p == m.payload(), "payload() copied again");
    assertEquals("k1", new String(m.key(), StandardCharsets.UTF_8));
    assertEquals("héllo", m.payloadUtf8());
    assertEquals(Map.of(), m.headers());
    Message b = Message.builder().payload("x").build();
    assertEquals("x", b.payloadUtf8());
    assertEquals(0, b.key().length);
  }

  /** The artifact's version (pom.xml) is the repository's VERSION, the one version of Spool. */
  @Test
  void versionIsTheRepositorysVERSION() throws Exception {
    String version =
        java.nio.file.Files.readString(java.nio.file.Path.of(System.getProperty("spool.repo"), "VERSION")).strip();
    assertEquals(version, System.getProperty("spool.version"),
        "sdk/java/pom.xml's <version> must be the repository's VERSION");
  }

  @Test
  void settlementOfEachResult() {
    assertEquals(Settlement.ACK, Settlement.of(null));

    Settlement plain = Settlement.of(new IllegalStateException("provider timed out"));
    assertEquals(Outcome.OUTCOME_RETRY, plain.outcome());
    assertEquals("provider timed out", plain.error());
    assertEquals(0, plain.retryAfterMs());

    Settlement npe = Settlement.of(new NullPointerException());
    assertEquals("java.lang.NullPointerException", npe.error());

    Settlement later = Settlement.of(new Retry(Duration.ofMillis(1500), "busy"));
    assertEquals(Outcome.OUTCOME_RETRY, later.outcome());
    assertEquals(1500, later.retryAfterMs());
    assertEquals("retry after 1500ms: busy", later.error());

    Settlement down = Settlement.of(new RuntimeException("charging", new RetryDownstream("email-provider", Duration.ofNanos(10), "503")));
    assertEquals("email-provider", down.downstream());
    assertEquals(1, down.retryAfterMs(), "a positive delay below 1 ms still asks for a delay");
    assertEquals("charging", down.error());

    Settlement dl = Settlement.of(new DeadLetter("bad schema"));
    assertEquals(Outcome.OUTCOME_DEAD_LETTER, dl.outcome());
    assertEquals("bad schema", dl.reason());
    assertEquals("dead letter: bad schema", dl.error());

    assertEquals(Settlement.RELEASE, Settlement.of(new Release()));
    assertEquals(Settlement.RELEASE, Settlement.of(new Exception("wrapped", new Release())));

    assertEquals(Integer.MAX_VALUE, Settlement.retryAfterMs(Duration.ofDays(1000)));
    assertThrows(IllegalArgumentException.class, () -> new Retry(Duration.ofSeconds(-1), "x"));
    assertThrows(IllegalArgumentException.class, () -> new RetryDownstream("", Duration.ZERO, "x"));
  }

  @Test
  void errorTextIsCutOnACharacterBoundaryAndValid() {
    String big = "é".repeat(3000); // 6000 bytes
    String c = Settlement.clean(big);
    byte[] b = c.getBytes(StandardCharsets.UTF_8);
    assertTrue(b.length <= Settlement.MAX_ERROR_TEXT_BYTES + 3, "cut at " + b.length);
    assertTrue(c.endsWith("…"));
    assertEquals(2048, c.length() - 1); // 2048 whole characters (4096 bytes), then the ellipsis
    String odd = "x" + "é".repeat(3000); // the cut falls inside a character: back to its start
    assertEquals(2048, Settlement.clean(odd).length() - 1);
    assertEquals("a?b", Settlement.clean("a\uD800b"), "a lone surrogate is replaced");
    assertEquals("short", Settlement.clean("short"));
  }

  @Test
  void backoffIsExponentialWithFullJitter() {
    Backoff b = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5));
    assertEquals(Duration.ZERO, b.delay(0, 0));
    assertEquals(Duration.ofMillis(50), b.delay(0, 0.5));
    assertEquals(Duration.ofMillis(100), b.delay(1, 0.5));
    assertEquals(Duration.ofMillis(200), b.delay(2, 0.5));
    assertEquals(Duration.ofMillis(399), b.delay(2, 0.9975));
    assertEquals(Duration.ofMillis(2500), b.delay(30, 0.5), "capped at max");
    assertEquals(Duration.ofMillis(2500), b.delay(Integer.MAX_VALUE, 0.5));
  }

  @Test
  void leasePlan() {
    long now = 1_000_000;
    assertEquals(new LeasePlan(2000, 2000), LeasePlan.of(now, now + 3000, 3000));
    // The first extension follows the delivery's own deadline, the next ones the visibility timeout.
    assertEquals(new LeasePlan(600, 2000), LeasePlan.of(now, now + 900, 3000));
    assertEquals(new LeasePlan(0, 2000), LeasePlan.of(now, now - 10, 3000), "already due");
    assertEquals(new LeasePlan(2000, 2000), LeasePlan.of(now, 0, 3000), "no deadline: from the visibility timeout");
    assertEquals(new LeasePlan(2000, 2000), LeasePlan.of(now, now + 3000, 0), "no visibility timeout: the lease again");
    assertEquals(new LeasePlan(2, LeasePlan.MIN_EVERY_MS), LeasePlan.of(now, now + 3, 3), "extensions at most every 5 ms");
    assertNull(LeasePlan.of(now, 0, 0));
  }

  @Test
  void outboxCoalescesAndDropsTheExtensionOfASettledDelivery() {
    Ref a = new Ref("orders", 0, 10, 7);
    Ref b = new Ref("orders", 1, 11, 8);
    Outbox o = new Outbox();
    assertTrue(o.isEmpty());
    o.extend(a);
    o.extend(a); // one extension per delivery per frame
    o.extend(b);
    o.settle(a, Settlement.ACK, true);
    o.settle(b, Settlement.of(new DeadLetter("poison")), true);
    o.extend(b); // (a settled delivery's timer never queues one: Session checks)
    SubscribeRequest f = o.take();
    assertEquals(2, f.getCredit());
    assertEquals(1, f.getAcksCount());
    assertEquals(10, f.getAcks(0).getRef().getOffset());
    assertEquals(7, f.getAcks(0).getRef().getFencingToken());
    assertEquals(1, f.getNacksCount());
    assertEquals(Outcome.OUTCOME_DEAD_LETTER, f.getNacks(0).getOutcome());
    assertEquals("poison", f.getNacks(0).getReason());
    // The sidecar applies acks and nacks before extends: an extension in the
    // frame of its delivery's settlement would be refused (NOT_IN_FLIGHT).
    assertEquals(List.of(11L), f.getExtendsList().stream().map(x -> x.getRef().getOffset()).toList());
    assertTrue(o.isEmpty());

    o.settle(a, Settlement.RELEASE, false);
    o.addCredit(3);
    o.clearCredit();
    f = o.take();
    assertEquals(0, f.getCredit());
    assertEquals(Outcome.OUTCOME_RELEASE, f.getNacks(0).getOutcome());
  }

  @Test
  void errorsReadTheReasonFromTheStatusDetails() {
    com.google.rpc.Status st = com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.NOT_FOUND.value())
        .setMessage("topic \"orderz\" is not declared")
        .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain(Reason.DOMAIN).setReason(Reason.UNKNOWN_TOPIC).putMetadata("index", "0").build()))
        .build();
    StatusRuntimeException e = StatusProto.toStatusRuntimeException(st);
    assertEquals(Reason.UNKNOWN_TOPIC, Errors.reason(e));
    SpoolException w = Errors.wrap("spool: publish to \"orderz\"", e, "127.0.0.1:7070", Errors.Op.PUBLISH);
    assertTrue(w instanceof NotFoundException);
    assertEquals(Reason.UNKNOWN_TOPIC, w.reason());
    assertEquals("0", w.metadata().get("index"));
    assertEquals("topic \"orderz\" is not declared", w.details());
    assertEquals(false, w.isRetryable());
    assertTrue(Errors.permanent(e));

    StatusRuntimeException refused = Status.UNAVAILABLE.withDescription("io exception").asRuntimeException();
    assertTrue(Errors.sidecarUnreachable(refused));
    SpoolException u = Errors.wrap("spool: publish to \"orders\"", refused, "127.0.0.1:7070", Errors.Op.PUBLISH);
    assertTrue(u instanceof SidecarUnreachableException);
    assertTrue(u.isRetryable());
    assertTrue(u.getMessage().contains("is spoold running"), u.getMessage());
    assertTrue(!Errors.permanent(refused));

    assertTrue(Errors.frameTooLarge(Status.RESOURCE_EXHAUSTED.withDescription("gRPC message exceeds maximum size").asRuntimeException()));
    com.google.rpc.Status full = com.google.rpc.Status.newBuilder().setCode(Status.Code.RESOURCE_EXHAUSTED.value()).setMessage("disk full")
        .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain(Reason.DOMAIN).setReason(Reason.DISK_FULL).build())).build();
    StatusRuntimeException diskFull = StatusProto.toStatusRuntimeException(full);
    assertTrue(!Errors.frameTooLarge(diskFull), "the sidecar's RESOURCE_EXHAUSTED carries a reason");
    SpoolException df = Errors.wrap("spool: publish", diskFull, "a", Errors.Op.PUBLISH);
    assertTrue(df instanceof UnavailableException);
    assertTrue(df.isRetryable());
  }

  @Test
  void optionsRejectNonsense() {
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().concurrency(0).build());
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().concurrency(1).prefetch(1 << 21).build());
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().drainTimeout(Duration.ofSeconds(-1)).build());
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().reconnectBackoff(Duration.ZERO, Duration.ofSeconds(1)).build());
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().reconnectBackoff(Duration.ofSeconds(2), Duration.ofSeconds(1)).build());
    assertThrows(IllegalArgumentException.class, () -> SubscribeOptions.builder().maxReceiveBytes(1024).build());
    assertThrows(IllegalArgumentException.class, () -> PublisherOptions.builder().maxInFlight(0).build());
    assertThrows(IllegalArgumentException.class, () -> IdempotentOptions.builder().table("x; DROP TABLE y").build());
    assertThrows(IllegalArgumentException.class, () -> ClientOptions.builder().connectRetry(Duration.ZERO).build());
    assertEquals(Duration.ofMillis(500), ClientOptions.defaults().connectRetry());
    SubscribeOptions d = SubscribeOptions.defaults();
    assertEquals(64, d.concurrency());
    assertEquals(64, d.prefetch());
    assertEquals(128, d.credit());
    assertEquals(0, SubscribeOptions.builder().concurrency(4).prefetch(0).build().prefetch());
    assertEquals(IdempotentOptions.DEFAULT_TABLE, IdempotentOptions.defaults().table());
    assertEquals("schema.t", IdempotentOptions.builder().table("schema.t").build().table());
  }

  @Test
  void theStubsAreMadeFromTheRepositorysProtos() throws Exception {
    // Every proto of proto/spool/v1 went into the build, unchanged but for the Java options.
    java.nio.file.Path repo = Harness.REPO.resolve("proto/spool/v1");
    java.nio.file.Path built = Harness.TARGET.resolve("proto/spool/v1");
    List<java.nio.file.Path> protos;
    try (var files = java.nio.file.Files.list(repo)) {
      protos = files.filter(p -> p.toString().endsWith(".proto")).sorted().toList();
    }
    assertTrue(protos.size() >= 5, protos.toString());
    for (java.nio.file.Path p : protos) {
      java.nio.file.Path b = built.resolve(p.getFileName());
      assertTrue(java.nio.file.Files.exists(b), p.getFileName() + " is not in the build: add it to the antrun copy in pom.xml");
      String withoutJava = java.nio.file.Files.readString(b).replaceAll("(?m)^option java_[a-z_]+ = .*;\n", "");
      assertEquals(java.nio.file.Files.readString(p), withoutJava, p.getFileName() + " in the build differs from the repository's: run mvn clean");
    }
  }

  @Test
  void dialects() {
    assertEquals(Dialect.POSTGRES, Dialect.ofProduct("PostgreSQL"));
    assertEquals(Dialect.MYSQL, Dialect.ofProduct("MariaDB"));
    assertEquals(Dialect.SQLITE, Dialect.ofProduct("SQLite"));
    assertNull(Dialect.ofProduct("H2"));
    assertTrue(Dialect.MYSQL.insertSql("t").startsWith("INSERT IGNORE INTO t "));
    assertTrue(Dialect.POSTGRES.insertSql("t").endsWith("ON CONFLICT (consumer_group, message_id) DO NOTHING"));
  }

  /** A scheduled message carries its delivery time or delay to the sidecar; other options keep it. */
  @Test
  void scheduledMessageCarriesItsTime() {
    java.time.Instant at = java.time.Instant.ofEpochMilli(1_900_000_000_123L);
    dev.spool.v1.PublishMessage p = OutMessage.of("x").withDeliverAt(at).withKey("k").withId("i").withHeader("a", "1").toProto();
    assertEquals(1_900_000_000_123L, p.getDeliverAtMs());
    assertEquals(0, p.getDeliverAfterMs());
    p = OutMessage.of("x").withDeliverAt(at).withDeliverAfter(Duration.ofSeconds(90)).toProto();
    assertEquals(0, p.getDeliverAtMs());
    assertEquals(90_000, p.getDeliverAfterMs());
    p = OutMessage.of("x").toProto();
    assertEquals(0, p.getDeliverAtMs() + p.getDeliverAfterMs());
    assertTrue(OutMessage.of("x").withDeliverInKeyOrder().withDeliverAfter(Duration.ofSeconds(5)).withKey("k").toProto().getDeliverInKeyOrder());
  }
}
