package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * W3C trace context through a real spoold, with the OpenTelemetry SDK's
 * in-memory exporter registered as the global OpenTelemetry (what an app's
 * SDK setup does): publishing inside a span carries its context; the
 * handler's span, in stream and in callback mode, has the publisher's trace
 * id and span as parent; a publish from the handler continues the trace; an
 * app's own traceparent is kept.
 */
class TraceTest {
  private static final String OWN = "00-11111111111111111111111111111111-2222222222222222-01";
  private static final InMemorySpanExporter EXPORTER = InMemorySpanExporter.create();
  private static SdkTracerProvider provider;

  @BeforeAll
  static void installSdk() {
    GlobalOpenTelemetry.resetForTest();
    provider = SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(EXPORTER)).build();
    OpenTelemetrySdk.builder().setTracerProvider(provider).buildAndRegisterGlobal();
  }

  @AfterAll
  static void removeSdk() {
    GlobalOpenTelemetry.resetForTest();
    provider.close();
  }

  private static SpanData finished(SpanContext sc) {
    SpanData[] found = new SpanData[1];
    Eventually.await("span " + sc.getSpanId() + " exported", () -> {
      for (SpanData s : EXPORTER.getFinishedSpanItems()) {
        if (s.getSpanId().equals(sc.getSpanId())) {
          found[0] = s;
          return true;
        }
      }
      return false;
    });
    return found[0];
  }

  /** Checks that the handler's span (current while it ran) is a consumer span, a child of parent. */
  private static SpanData checkHandlerSpan(SpanContext got, SpanContext parent, String topic) {
    assertNotNull(got, "no span was current in the handler");
    SpanData s = finished(got);
    assertEquals(parent.getTraceId(), s.getTraceId(), "the handler's span is in another trace than the publisher's");
    assertEquals(parent.getSpanId(), s.getParentSpanId(), "its parent is not the publisher's span");
    assertTrue(s.getParentSpanContext().isRemote());
    assertEquals(topic + " process", s.getName());
    assertEquals(SpanKind.CONSUMER, s.getKind());
    var a = s.getAttributes();
    assertEquals("spool", a.get(AttributeKey.stringKey("messaging.system")));
    assertEquals("process", a.get(AttributeKey.stringKey("messaging.operation.type")));
    assertEquals(topic, a.get(AttributeKey.stringKey("messaging.destination.name")));
    assertNotNull(a.get(AttributeKey.stringKey("messaging.destination.partition.id")));
    assertFalse(a.get(AttributeKey.stringKey("messaging.message.id")).isEmpty());
    assertEquals(1L, a.get(AttributeKey.longKey("messaging.spool.attempt")));
    assertNotNull(a.get(AttributeKey.longKey("messaging.spool.offset")));
    return s;
  }

  @Test
  void streamModeContinuesThePublishersTrace() throws Exception {
    String config = "topics:\n"
        + "  - name: orders\n    partitions: 2\n"
        + "  - name: receipts\n    partitions: 1\n"
        + "subscriptions:\n"
        + "  - topic: orders\n    group: workers\n    max_attempts: 1\n"
        + "  - topic: receipts\n    group: workers\n";
    Map<String, SpanContext> handled = new ConcurrentHashMap<>();
    Map<String, Map<String, String>> headers = new ConcurrentHashMap<>();
    try (var s = Harness.Spoold.start(config); var c = Client.connect(s.app)) {
      Map<String, String> appHeaders = new LinkedHashMap<>(Map.of("schema", "v2"));
      Span parent = GlobalOpenTelemetry.getTracer("checkout").spanBuilder("checkout").startSpan();
      try (Scope ignored = parent.makeCurrent()) {
        c.publish("orders", OutMessage.of("traced").withKey("k").withHeaders(appHeaders));
        c.publish("orders", OutMessage.of("own").withKey("k").withHeader("traceparent", OWN));
        c.publish("orders", OutMessage.of("own-case").withKey("k").withHeader("TraceParent", OWN));
        c.publishBatch("orders", List.of(OutMessage.of("batch").withKey("k"), OutMessage.of("hop").withKey("k"), OutMessage.of("poison").withKey("k")));
        try (Publisher p = c.publisher("orders")) {
          p.publish(OutMessage.of("piped").withKey("k")).get();
        }
      } finally {
        parent.end();
      }
      assertEquals(Map.of("schema", "v2"), appHeaders, "publish changed the caller's headers");
      c.publish("orders", OutMessage.of("rootless").withKey("k")); // outside any span

      Handler h = m -> {
        SpanContext sc = Span.current().getSpanContext();
        String body = m.payloadUtf8();
        if (m.topic().equals("receipts")) {
          handled.put("receipt of " + body, sc);
          return;
        }
        headers.put(body, m.headers());
        if (body.equals("hop")) {
          c.publish("receipts", OutMessage.of(body)); // from the handler: continues the trace
        }
        handled.put(body, sc);
        if (body.equals("poison")) {
          throw new DeadLetter("bad-schema");
        }
      };
      try (var sub = c.subscribe("workers", List.of("orders", "receipts"), h, SubscribeOptions.builder().drainOnShutdown(false).build())) {
        Eventually.await("eight messages and the receipt handled", () -> handled.size() == 9);
      }

      SpanContext psc = parent.getSpanContext();
      SpanData traced = checkHandlerSpan(handled.get("traced"), psc, "orders");
      assertEquals("ack", traced.getAttributes().get(AttributeKey.stringKey("messaging.spool.outcome")));
      assertEquals("workers", traced.getAttributes().get(AttributeKey.stringKey("messaging.consumer.group.name")));
      assertEquals(StatusCode.UNSET, traced.getStatus().getStatusCode());
      checkHandlerSpan(handled.get("batch"), psc, "orders");
      checkHandlerSpan(handled.get("piped"), psc, "orders");
      SpanData poison = checkHandlerSpan(handled.get("poison"), psc, "orders");
      assertEquals("dead_letter", poison.getAttributes().get(AttributeKey.stringKey("messaging.spool.outcome")));
      assertEquals(StatusCode.ERROR, poison.getStatus().getStatusCode());
      SpanData hop = checkHandlerSpan(handled.get("hop"), psc, "orders");
      checkHandlerSpan(handled.get("receipt of hop"), hop.getSpanContext(), "receipts");
      assertEquals("v2", headers.get("traced").get("schema"));
      String tp = headers.get("traced").get("traceparent");
      assertTrue(tp.startsWith("00-" + psc.getTraceId() + "-" + psc.getSpanId() + "-"), "traceparent " + tp);
      assertEquals(1, Integer.parseInt(tp.substring(53), 16) & 1, "traceparent " + tp + " is not sampled");
      assertEquals(OWN, headers.get("own").get("traceparent"), "the app's own traceparent was overwritten");
      assertEquals("11111111111111111111111111111111", handled.get("own").getTraceId());
      assertEquals(Map.of("TraceParent", OWN), headers.get("own-case"), "a TraceParent header the app set was overwritten or doubled");
      SpanData rootless = finished(handled.get("rootless"));
      assertFalse(rootless.getParentSpanContext().isValid(), "a message without traceparent got a parent");
      assertNotEquals(psc.getTraceId(), rootless.getTraceId());
    }
  }

  @Test
  void callbackModeContinuesThePublishersTrace() throws Exception {
    SpanContext[] got = new SpanContext[1];
    Handler h = m -> got[0] = Span.current().getSpanContext();
    try (HandlerServer srv = HandlerServer.start("127.0.0.1:0", h, HandlerServerOptions.builder().drainOnShutdown(false).build())) {
      String config = "topics:\n  - name: orders\n    partitions: 2\n"
          + "subscriptions:\n  - topic: orders\n    group: mailer\n    delivery: callback\n"
          + "    app_address: \"127.0.0.1:" + srv.port() + "\"\n";
      try (var s = Harness.Spoold.start(config); var c = Client.connect(s.app)) {
        Span parent = GlobalOpenTelemetry.getTracer("checkout").spanBuilder("checkout").startSpan();
        try (Scope ignored = parent.makeCurrent()) {
          c.publishBatch("orders", List.of(OutMessage.of("traced").withKey("k")));
        } finally {
          parent.end();
        }
        Eventually.await("handled by the callback", () -> got[0] != null);
        SpanData sd = checkHandlerSpan(got[0], parent.getSpanContext(), "orders");
        assertEquals("mailer", sd.getAttributes().get(AttributeKey.stringKey("messaging.consumer.group.name")));
        assertEquals("ack", sd.getAttributes().get(AttributeKey.stringKey("messaging.spool.outcome")));
      }
    }
  }

  /** With the API's no-op tracer (no SDK): the span records nothing but carries the message's context, cheaply. */
  @Test
  void withoutAnSdkTheSpanIsANoopCarryingTheMessagesContext() {
    Tracing.Handlers t = new Tracing.Handlers(TracerProvider.noop());
    Message m = Message.builder().topic("orders").id("m1").headers(Map.of("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")).build();
    Context parent = Tracing.extract(m.headers());
    Span span = t.start(m, parent);
    assertFalse(span.isRecording());
    assertEquals("4bf92f3577b34da6a3ce929d0e0e4736", span.getSpanContext().getTraceId(), "the no-op span lost the message's trace");
    try (Scope ignored = parent.with(span).makeCurrent()) {
      Map<String, String> out = Tracing.inject(Map.of(), Context.current());
      assertEquals("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", out.get("traceparent"), "a publish from the handler would not continue the trace");
    }
    t.end(span, Settlement.of(null));

    Settlement ack = Settlement.of(null);
    int n = 200_000;
    for (int i = 0; i < n; i++) { // warm-up
      Context p = Tracing.extract(m.headers());
      t.end(t.start(m, p), ack);
    }
    long t0 = System.nanoTime();
    for (int i = 0; i < n; i++) {
      Context p = Tracing.extract(m.headers());
      Span sp = t.start(m, p);
      try (Scope ignored = p.with(sp).makeCurrent()) {
        // the handler
      }
      t.end(sp, ack);
    }
    long ns = (System.nanoTime() - t0) / n;
    // A figure, not an assertion: a timed bound fails on a busy machine;
    // that the span does no work without an SDK is asserted above.
    System.out.println("TraceTest: no SDK, the handler's span costs " + ns + " ns per delivery (with a traceparent to parse)");
  }

  @Test
  void injectKeepsTheAppsTraceparentAndTheCallersMap() {
    Span span = provider.get("t").spanBuilder("p").startSpan();
    Context ctx = Context.root().with(span);
    Map<String, String> h = Map.of("a", "b");
    Map<String, String> out = Tracing.inject(h, ctx);
    assertTrue(out.get("traceparent").startsWith("00-" + span.getSpanContext().getTraceId() + "-" + span.getSpanContext().getSpanId() + "-"), out.toString());
    assertEquals("b", out.get("a"));
    assertEquals(Map.of("a", "b"), h);
    assertSame(h, Tracing.inject(h, Context.root()), "outside a span: the same headers, nothing added");
    for (String name : List.of("traceparent", "TraceParent", "TRACEPARENT")) {
      Map<String, String> own = Map.of(name, OWN);
      assertSame(own, Tracing.inject(own, ctx), "a " + name + " header the app set was overwritten");
    }
    span.end();
  }
}
