package dev.spool;

import java.time.Duration;
import java.util.Objects;

/** How a {@link Client} connects and publishes. Immutable; build with {@link #builder()}. */
public final class ClientOptions {
  /** How long {@link Client#connect} waits for the sidecar by default. */
  public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(10);
  /** How long a publish waits for its answer by default. */
  public static final Duration DEFAULT_PUBLISH_TIMEOUT = Duration.ofSeconds(30);

  private final Duration connectTimeout;
  private final Duration publishTimeout;

  private ClientOptions(Builder b) {
    this.connectTimeout = b.connectTimeout;
    this.publishTimeout = b.publishTimeout;
  }

  public static ClientOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public Duration connectTimeout() { return connectTimeout; }
  public Duration publishTimeout() { return publishTimeout; }

  public static final class Builder {
    private Duration connectTimeout = DEFAULT_CONNECT_TIMEOUT;
    private Duration publishTimeout = DEFAULT_PUBLISH_TIMEOUT;

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

    public ClientOptions build() {
      if (connectTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: connectTimeout " + connectTimeout + ": use zero (do not wait) or a positive duration");
      }
      if (publishTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: publishTimeout " + publishTimeout + ": use zero (no deadline) or a positive duration");
      }
      return new ClientOptions(this);
    }
  }
}
