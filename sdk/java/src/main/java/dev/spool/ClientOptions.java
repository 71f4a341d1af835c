package dev.spool;

import java.time.Duration;
import java.util.Objects;

/** How a {@link Client} connects and publishes. Immutable; build with {@link #builder()}. */
public final class ClientOptions {
  /** How long {@link Client#connect} waits for the sidecar by default. */
  public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(10);
  /** How long a publish waits for its answer by default. */
  public static final Duration DEFAULT_PUBLISH_TIMEOUT = Duration.ofSeconds(30);
  /**
   * How often the client makes its channel try a sidecar that does not
   * answer, while it waits for one, by default: 500 ms, so an app is
   * connected again within about that of its sidecar being ready.
   */
  public static final Duration DEFAULT_CONNECT_RETRY = Duration.ofMillis(500);
  /**
   * After how long without a frame from the sidecar the channel pings it, by
   * default: 10 s (grpc-java's minimum). spoold permits pings every 5 s.
   */
  public static final Duration DEFAULT_KEEPALIVE_TIME = Duration.ofSeconds(10);
  /**
   * How long a ping may go unanswered before the channel closes the
   * connection, by default: 3 s. A cut connection is noticed within
   * DEFAULT_KEEPALIVE_TIME plus this.
   */
  public static final Duration DEFAULT_KEEPALIVE_TIMEOUT = Duration.ofSeconds(3);

  private final Duration connectTimeout;
  private final Duration publishTimeout;
  private final Duration connectRetry;
  private final Duration keepAliveTime;
  private final Duration keepAliveTimeout;

  private ClientOptions(Builder b) {
    this.connectTimeout = b.connectTimeout;
    this.publishTimeout = b.publishTimeout;
    this.connectRetry = b.connectRetry;
    this.keepAliveTime = b.keepAliveTime;
    this.keepAliveTimeout = b.keepAliveTimeout;
  }

  public static ClientOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public Duration connectTimeout() { return connectTimeout; }
  public Duration publishTimeout() { return publishTimeout; }
  public Duration connectRetry() { return connectRetry; }
  public Duration keepAliveTime() { return keepAliveTime; }
  public Duration keepAliveTimeout() { return keepAliveTimeout; }

  public static final class Builder {
    private Duration connectTimeout = DEFAULT_CONNECT_TIMEOUT;
    private Duration publishTimeout = DEFAULT_PUBLISH_TIMEOUT;
    private Duration connectRetry = DEFAULT_CONNECT_RETRY;
    private Duration keepAliveTime = DEFAULT_KEEPALIVE_TIME;
    private Duration keepAliveTimeout = DEFAULT_KEEPALIVE_TIMEOUT;

    private Builder() {}

    /**
     * How long {@link Client#connect} waits for the sidecar to answer
     * (default 10 s), so that a missing sidecar shows at startup. Zero: do
     * not wait (connect on first use).
     */
    public Builder connectTimeout(Duration d) { connectTimeout = Objects.requireNonNull(d); return this; }

    /**
     * The deadline of each publish call (default 30 s); zero means none.
     * After a deadline the messages may or may not be stored: publish them
     * again with the same ids.
     */
    public Builder publishTimeout(Duration d) { publishTimeout = Objects.requireNonNull(d); return this; }

    /**
     * How often the channel tries a sidecar that does not answer while the
     * client waits for one (connect, a subscription's reconnect): default
     * 500 ms. grpc-java's own connect backoff grows to 120 s and has no
     * public setting; the client shortens it with
     * ManagedChannel.resetConnectBackoff() at this interval.
     */
    public Builder connectRetry(Duration d) { connectRetry = Objects.requireNonNull(d); return this; }

    /**
     * After how long without a frame from the sidecar the channel pings it
     * (default 10 s; grpc-java uses at least 10 s), with or without a call
     * in progress: an app whose connection to spoold crosses a network
     * notices a cut within keepAliveTime plus keepAliveTimeout instead of
     * waiting out TCP's retransmissions. spoold permits pings every 5 s.
     */
    public Builder keepAliveTime(Duration d) { keepAliveTime = Objects.requireNonNull(d); return this; }

    /** How long a ping may go unanswered before the connection is closed (default 3 s). */
    public Builder keepAliveTimeout(Duration d) { keepAliveTimeout = Objects.requireNonNull(d); return this; }

    public ClientOptions build() {
      if (connectTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: connectTimeout " + connectTimeout + ": use zero (do not wait) or a positive duration");
      }
      if (connectRetry.isNegative() || connectRetry.isZero()) {
        throw new IllegalArgumentException("spool: connectRetry " + connectRetry + ": use a positive duration");
      }
      if (keepAliveTime.isNegative() || keepAliveTime.isZero() || keepAliveTimeout.isNegative() || keepAliveTimeout.isZero()) {
        throw new IllegalArgumentException("spool: keepAliveTime " + keepAliveTime + ", keepAliveTimeout " + keepAliveTimeout + ": use positive durations");
      }
      if (publishTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: publishTimeout " + publishTimeout + ": use zero (no deadline) or a positive duration");
      }
      return new ClientOptions(this);
    }
  }
}
