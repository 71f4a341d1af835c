package dev.spool;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Trace context through messages (docs/protocol.md, "Trace context"): a
 * publish carries the caller's W3C trace context in the message headers
 * {@code traceparent} and {@code tracestate}, and each handler runs in a
 * consumer span {@code <topic> process} continued from them.
 *
 * <p>Only the OpenTelemetry API is used. Without an OpenTelemetry SDK the
 * tracer is the API's no-op: the handler's span is a non-recording span
 * carrying the message's context, and no attribute is computed. The
 * propagator is always W3C TraceContext, whatever propagators the app
 * configured, so that every Spool SDK reads what the others write.
 */
final class Tracing {
  static final String HEADER_TRACEPARENT = "traceparent";
  static final String HEADER_TRACESTATE = "tracestate";
  /** The instrumentation scope of the SDK's spans. */
  static final String SCOPE = "dev.spool";

  private static final W3CTraceContextPropagator W3C = W3CTraceContextPropagator.getInstance();

  private static final TextMapGetter<Map<String, String>> GETTER = new TextMapGetter<>() {
    @Override
    public Iterable<String> keys(Map<String, String> carrier) {
      return carrier.keySet();
    }

    @Override
    public String get(Map<String, String> carrier, String key) {
      return carrier == null ? null : carrier.get(key);
    }
  };

  private Tracing() {}

  /**
   * Returns headers with the trace context of ctx added. The given map is
   * never changed: a copy is made only when something is added. Nothing is
   * added when ctx has no valid span, or when the headers already have a
   * traceparent (in any case): a header the application set itself wins.
   */
  static Map<String, String> inject(Map<String, String> headers, Context ctx) {
    if (!Span.fromContext(ctx).getSpanContext().isValid() || hasTraceparent(headers)) {
      return headers;
    }
    Map<String, String> out = new LinkedHashMap<>(headers);
    W3C.inject(ctx, out, Map::put);
    return out;
  }

  static boolean hasTraceparent(Map<String, String> h) {
    if (h.isEmpty()) {
      return false;
    }
    if (h.containsKey(HEADER_TRACEPARENT)) {
      return true;
    }
    for (String k : h.keySet()) {
      if (HEADER_TRACEPARENT.equalsIgnoreCase(k)) {
        return true;
      }
    }
    return false;
  }

  /**
   * The context a message's headers carry: the root context with the remote
   * span context of its traceparent (and tracestate), or the root context
   * alone when it has none or a malformed one.
   */
  static Context extract(Map<String, String> headers) {
    String tp = headers.get(HEADER_TRACEPARENT);
    if (tp == null || tp.isEmpty()) {
      return Context.root();
    }
    return W3C.extract(Context.root(), headers, GETTER);
  }

  /**
   * Starts the span each handler runs in, from the given provider or (by
   * default) the global one. The global is read with
   * {@link GlobalOpenTelemetry#getOrNoop()}: a provider the app sets later is
   * followed, and the SDK never fixes the global to the no-op (which
   * {@code GlobalOpenTelemetry.get()} would do, failing the app's later
   * {@code set}).
   */
  static final class Handlers {
    private final TracerProvider explicit;
    private volatile OpenTelemetry globalSeen;
    private volatile Tracer tracer;

    Handlers(TracerProvider tp) {
      this.explicit = tp;
      this.tracer = tp == null ? null : tp.get(SCOPE);
    }

    private Tracer tracer() {
      if (explicit != null) {
        return tracer;
      }
      OpenTelemetry g = GlobalOpenTelemetry.getOrNoop();
      Tracer t = tracer;
      if (g != globalSeen || t == null) {
        t = g.getTracerProvider().get(SCOPE);
        tracer = t;
        globalSeen = g;
      }
      return t;
    }

    /**
     * Begins m's span: a child of the message's trace context when it carries
     * one, else a new root (never a child of whatever is current on the
     * handler's thread). Run the handler in {@code parent.with(span)}.
     */
    Span start(Message m, Context parent) {
      Span span = tracer().spanBuilder(m.topic() + " process")
          .setSpanKind(SpanKind.CONSUMER)
          .setParent(parent)
          .startSpan();
      if (span.isRecording()) {
        span.setAllAttributes(Attributes.builder()
            .put("messaging.system", "spool")
            .put("messaging.operation.type", "process")
            .put("messaging.destination.name", m.topic())
            .put("messaging.destination.partition.id", Integer.toString(m.partition()))
            .put("messaging.consumer.group.name", m.group())
            .put("messaging.message.id", m.id())
            .put("messaging.spool.attempt", m.attempt())
            .put("messaging.spool.offset", m.offset())
            .build());
      }
      return span;
    }

    /** Records the handler's outcome (retry and dead_letter are errors) and ends the span. */
    void end(Span span, Settlement st) {
      if (span.isRecording()) {
        String name = outcomeName(st);
        span.setAttribute("messaging.spool.outcome", name);
        if (name.equals("retry") || name.equals("dead_letter")) {
          span.setStatus(StatusCode.ERROR, st.error().isEmpty() ? st.reason() : st.error());
        }
      }
      span.end();
    }
  }

  static String outcomeName(Settlement st) {
    switch (st.outcome()) {
      case OUTCOME_ACK:
        return "ack";
      case OUTCOME_DEAD_LETTER:
        return "dead_letter";
      case OUTCOME_RELEASE:
        return "release";
      default:
        return "retry";
    }
  }
}
