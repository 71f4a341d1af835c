package dev.spool;

import com.google.protobuf.ByteString;
import dev.spool.v1.PublishMessage;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A message to publish: payload, and optionally key, id and headers.
 * Immutable; the {@code with} methods return a copy.
 *
 * <pre>{@code
 * OutMessage.of("hello").withKey("order-1001").withId("order-1001").withHeader("schema", "v2")
 * }</pre>
 */
public final class OutMessage {
  private final String id;
  private final byte[] key;
  private final byte[] payload;
  private final Map<String, String> headers;
  private final long deliverAtMs;
  private final long deliverAfterMs;
  private final boolean deliverInKeyOrder;

  private OutMessage(String id, byte[] key, byte[] payload, Map<String, String> headers) {
    this(id, key, payload, headers, 0, 0, false);
  }

  private OutMessage(String id, byte[] key, byte[] payload, Map<String, String> headers, long deliverAtMs, long deliverAfterMs,
      boolean deliverInKeyOrder) {
    this.id = id;
    this.key = key;
    this.payload = payload;
    this.headers = headers;
    this.deliverAtMs = deliverAtMs;
    this.deliverAfterMs = deliverAfterMs;
    this.deliverInKeyOrder = deliverInKeyOrder;
  }

  /** A message with this payload (copied). */
  public static OutMessage of(byte[] payload) {
    return new OutMessage("", new byte[0], payload.clone(), Map.of());
  }

  /** A message with this payload, encoded as UTF-8. */
  public static OutMessage of(String payload) {
    return new OutMessage("", new byte[0], payload.getBytes(StandardCharsets.UTF_8), Map.of());
  }

  /**
   * The message id (at most 128 bytes). Empty: the sidecar generates one.
   * Consumers dedupe on it, so a producer retrying after an error sends the
   * same id again.
   */
  public OutMessage withId(String id) {
    return new OutMessage(Objects.requireNonNull(id), key, payload, headers, deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  /** The partitioning key: same key, same partition, delivered in publish order. */
  public OutMessage withKey(byte[] key) {
    return new OutMessage(id, key.clone(), payload, headers, deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  /** The partitioning key, encoded as UTF-8. */
  public OutMessage withKey(String key) {
    return new OutMessage(id, key.getBytes(StandardCharsets.UTF_8), payload, headers, deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  /** Adds one application header (names starting with "spool-" are reserved). */
  public OutMessage withHeader(String name, String value) {
    Map<String, String> h = new LinkedHashMap<>(headers);
    h.put(Objects.requireNonNull(name), Objects.requireNonNull(value));
    return new OutMessage(id, key, payload, Map.copyOf(h), deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  /** Adds application headers. */
  public OutMessage withHeaders(Map<String, String> more) {
    Map<String, String> h = new LinkedHashMap<>(headers);
    h.putAll(more);
    return new OutMessage(id, key, payload, Map.copyOf(h), deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  /**
   * Schedules the message (docs/scheduling.md): it is stored now, like any other, and delivered no
   * sooner than {@code at}. A time in the past is delivered at once; one more than a year ahead, or
   * past the topic's retention, is refused (INVALID_SCHEDULE, SCHEDULE_PAST_RETENTION). A scheduled
   * message is outside its key's order unless {@link #withDeliverInKeyOrder}. Replaces a
   * {@link #withDeliverAfter} delay.
   */
  public OutMessage withDeliverAt(java.time.Instant at) {
    return new OutMessage(id, key, payload, headers, at.toEpochMilli(), 0, deliverInKeyOrder);
  }

  /**
   * Schedules the message {@code delay} after the sidecar receives the publish (1 s to 365 days),
   * as {@link #withDeliverAt} does. Replaces a {@link #withDeliverAt} time.
   */
  public OutMessage withDeliverAfter(java.time.Duration delay) {
    return new OutMessage(id, key, payload, headers, 0, delay.toMillis(), deliverInKeyOrder);
  }

  /**
   * Keeps the scheduled message in its key's order: the key's later messages wait for it until it
   * is delivered and finished. Only with {@link #withDeliverAt} or {@link #withDeliverAfter}.
   */
  public OutMessage withDeliverInKeyOrder() {
    return new OutMessage(id, key, payload, headers, deliverAtMs, deliverAfterMs, true);
  }

  public String id() {
    return id;
  }

  public byte[] key() {
    return key.clone();
  }

  public byte[] payload() {
    return payload.clone();
  }

  public Map<String, String> headers() {
    return headers;
  }

  int size() {
    return key.length + payload.length;
  }

  /**
   * This message with the trace context of ctx in its headers (see
   * {@link Tracing#inject}): this one when nothing is added.
   */
  OutMessage withTraceContext(io.opentelemetry.context.Context ctx) {
    Map<String, String> h = Tracing.inject(headers, ctx);
    return h == headers ? this : new OutMessage(id, key, payload, h, deliverAtMs, deliverAfterMs, deliverInKeyOrder);
  }

  PublishMessage toProto() {
    return PublishMessage.newBuilder()
        .setId(id)
        .setKey(ByteString.copyFrom(key))
        .setPayload(ByteString.copyFrom(payload))
        .putAllHeaders(headers)
        .setDeliverAtMs(deliverAtMs)
        .setDeliverAfterMs(deliverAfterMs)
        .setDeliverInKeyOrder(deliverInKeyOrder)
        .build();
  }
}
