package dev.spool;

import java.time.Duration;
import java.util.Objects;

/** How a {@link Publisher} pipelines. Immutable; build with {@link #builder()}. */
public final class PublisherOptions {
  /** Messages published and not yet confirmed, at most, by default. */
  public static final int DEFAULT_MAX_IN_FLIGHT = 1024;
  /** How long {@link Publisher#close()} waits for unconfirmed messages by default. */
  public static final Duration DEFAULT_CLOSE_TIMEOUT = Duration.ofSeconds(30);

  private final int maxInFlight;
  private final Duration closeTimeout;

  private PublisherOptions(Builder b) {
    this.maxInFlight = b.maxInFlight;
    this.closeTimeout = b.closeTimeout;
  }

  public static PublisherOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public int maxInFlight() { return maxInFlight; }
  public Duration closeTimeout() { return closeTimeout; }

  public static final class Builder {
    private int maxInFlight = DEFAULT_MAX_IN_FLIGHT;
    private Duration closeTimeout = DEFAULT_CLOSE_TIMEOUT;

    private Builder() {}

    /** Bounds the messages published but not yet confirmed durable (default 1024); publish blocks while the window is full. */
    public Builder maxInFlight(int n) { maxInFlight = n; return this; }

    /**
     * How long close() waits for unconfirmed messages (default 30 s); then they
     * fail (they may or may not be stored) and close() says how many.
     */
    public Builder closeTimeout(Duration d) { closeTimeout = Objects.requireNonNull(d); return this; }

    public PublisherOptions build() {
      if (maxInFlight < 1 || maxInFlight > 1 << 20) {
        throw new IllegalArgumentException("spool: maxInFlight " + maxInFlight + ": use 1.." + (1 << 20));
      }
      if (closeTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: closeTimeout " + closeTimeout + ": use zero (fail at once) or a positive duration");
      }
      return new PublisherOptions(this);
    }
  }
}
