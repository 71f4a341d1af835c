package dev.spool;

import com.google.protobuf.ByteString;
import dev.spool.v1.Delivery;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.Objects;

/**
 * One delivery handed to a {@link Handler}: the message and what the handler
 * needs to process it safely (attempt, fencing token). Immutable; the byte
 * arrays are the handler's own copies. From a delivery, the key and payload
 * are copied out of the received frame on the first call of {@link #key()} or
 * {@link #payload()} (a handler that never reads them, or reads them as
 * UTF-8, costs no copy; first calls on two threads at once may each copy).
 */
public final class Message {
  private final String id;
  private final String topic;
  private final int partition;
  private final long offset;
  // From a delivery: the frame's bytes, copied to key/payload on first use.
  private final ByteString keyBytes;
  private final ByteString payloadBytes;
  private byte[] key;
  private byte[] payload;
  private final Map<String, String> headers;
  private final Instant publishTime;
  private final Instant firstDeliveryTime;
  private final Instant leaseDeadline;
  private final int attempt;
  private final String lastError;
  private final long fencingToken;
  private final String group;

  private Message(Builder b) {
    this.id = b.id;
    this.topic = b.topic;
    this.partition = b.partition;
    this.offset = b.offset;
    this.key = b.key;
    this.payload = b.payload;
    this.keyBytes = b.keyBytes;
    this.payloadBytes = b.payloadBytes;
    this.headers = b.headers.isEmpty() ? Map.of() : Map.copyOf(b.headers);
    this.publishTime = b.publishTime;
    this.firstDeliveryTime = b.firstDeliveryTime;
    this.leaseDeadline = b.leaseDeadline;
    this.attempt = b.attempt;
    this.lastError = b.lastError;
    this.fencingToken = b.fencingToken;
    this.group = b.group;
  }

  static Message of(Delivery d) {
    return builder()
        .id(d.getMessageId())
        .topic(d.getTopic())
        .partition(d.getPartition())
        .offset(d.getOffset())
        .keyBytes(d.getKey())
        .payloadBytes(d.getPayload())
        .headers(d.getHeadersMap())
        .publishTime(Instant.ofEpochMilli(d.getPublishTimeMs()))
        .firstDeliveryTime(Instant.ofEpochMilli(d.getFirstDeliveryTimeMs()))
        .leaseDeadline(Instant.ofEpochMilli(d.getLeaseDeadlineMs()))
        .attempt(d.getAttempt())
        .lastError(d.getLastError())
        .fencingToken(d.getFencingToken())
        .group(d.getGroup())
        .build();
  }

  /** The message id, stable across redeliveries: dedupe on it. */
  public String id() {
    return id;
  }

  /** The topic the message was published to. */
  public String topic() {
    return topic;
  }

  /** The partition holding the message. */
  public int partition() {
    return partition;
  }

  /** The offset of the message in its partition. */
  public long offset() {
    return offset;
  }

  /** The partitioning key as published (empty when none). */
  public byte[] key() {
    if (key == null) {
      key = keyBytes.toByteArray();
    }
    return key;
  }

  /** The key decoded as UTF-8. */
  public String keyUtf8() {
    return key == null ? keyBytes.toStringUtf8() : new String(key, StandardCharsets.UTF_8);
  }

  /** The message body as published. */
  public byte[] payload() {
    if (payload == null) {
      payload = payloadBytes.toByteArray();
    }
    return payload;
  }

  /** The payload decoded as UTF-8. */
  public String payloadUtf8() {
    return payload == null ? payloadBytes.toStringUtf8() : new String(payload, StandardCharsets.UTF_8);
  }

  /** The application headers as published (unmodifiable, maybe empty). */
  public Map<String, String> headers() {
    return headers;
  }

  /** When the message was appended to the log. */
  public Instant publishTime() {
    return publishTime;
  }

  /** When the message was first delivered to this group. */
  public Instant firstDeliveryTime() {
    return firstDeliveryTime;
  }

  /**
   * When this delivery's lease ends as first granted. The SDK extends the
   * lease while the handler runs: a handler need not watch it.
   */
  public Instant leaseDeadline() {
    return leaseDeadline;
  }

  /** Deliveries of this message to the group so far, 1 on the first. */
  public int attempt() {
    return attempt;
  }

  /** The previous failed attempt's error text ("" on the first attempt). */
  public String lastError() {
    return lastError;
  }

  /**
   * Grows strictly each time the message is (re)delivered in its partition
   * and group. Store it with the handler's writes and refuse writes carrying
   * an older token: they come from an attempt whose lease expired. (An
   * unsigned 64-bit number on the wire; tokens stay far below 2^63.)
   */
  public long fencingToken() {
    return fencingToken;
  }

  /** The consumer group the delivery belongs to. */
  public String group() {
    return group;
  }

  @Override
  public String toString() {
    return "Message{id=" + id + ", topic=" + topic + ", partition=" + partition + ", offset=" + offset
        + ", attempt=" + attempt + ", group=" + group + ", fencingToken=" + fencingToken + "}";
  }

  /** A builder, for tests of handlers. */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds a Message (for tests of handlers; the SDK builds them from deliveries). */
  public static final class Builder {
    private String id = "";
    private String topic = "";
    private int partition;
    private long offset;
    private byte[] key = new byte[0];
    private byte[] payload = new byte[0];
    private ByteString keyBytes;
    private ByteString payloadBytes;
    private Map<String, String> headers = Map.of();
    private Instant publishTime = Instant.EPOCH;
    private Instant firstDeliveryTime = Instant.EPOCH;
    private Instant leaseDeadline = Instant.EPOCH;
    private int attempt = 1;
    private String lastError = "";
    private long fencingToken;
    private String group = "";

    private Builder() {}

    public Builder id(String v) { id = Objects.requireNonNull(v); return this; }
    public Builder topic(String v) { topic = Objects.requireNonNull(v); return this; }
    public Builder partition(int v) { partition = v; return this; }
    public Builder offset(long v) { offset = v; return this; }
    public Builder key(byte[] v) { key = Objects.requireNonNull(v); keyBytes = null; return this; }
    public Builder key(String v) { return key(v.getBytes(StandardCharsets.UTF_8)); }
    public Builder payload(byte[] v) { payload = Objects.requireNonNull(v); payloadBytes = null; return this; }
    public Builder payload(String v) { return payload(v.getBytes(StandardCharsets.UTF_8)); }

    /** A delivery's key, copied on first use. */
    Builder keyBytes(ByteString v) { keyBytes = Objects.requireNonNull(v); key = null; return this; }

    /** A delivery's payload, copied on first use. */
    Builder payloadBytes(ByteString v) { payloadBytes = Objects.requireNonNull(v); payload = null; return this; }
    public Builder headers(Map<String, String> v) { headers = Objects.requireNonNull(v); return this; }
    public Builder publishTime(Instant v) { publishTime = Objects.requireNonNull(v); return this; }
    public Builder firstDeliveryTime(Instant v) { firstDeliveryTime = Objects.requireNonNull(v); return this; }
    public Builder leaseDeadline(Instant v) { leaseDeadline = Objects.requireNonNull(v); return this; }
    public Builder attempt(int v) { attempt = v; return this; }
    public Builder lastError(String v) { lastError = Objects.requireNonNull(v); return this; }
    public Builder fencingToken(long v) { fencingToken = v; return this; }
    public Builder group(String v) { group = Objects.requireNonNull(v); return this; }

    public Message build() {
      return new Message(this);
    }
  }
}
