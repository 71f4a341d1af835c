package dev.spool;

import java.time.Duration;
import java.util.Objects;

/**
 * Deliver the message again, no sooner than {@link #after()} (zero: the
 * subscription's backoff). The exception's message becomes the next attempt's
 * {@link Message#lastError()}. After the subscription's {@code max_attempts}
 * the sidecar dead-letters the message.
 */
public class Retry extends OutcomeException {
  private static final long serialVersionUID = 1L;
  private final Duration after;
  private final String downstream;

  /** Retry after the subscription's backoff. */
  public Retry(String error) {
    this(Duration.ZERO, error);
  }

  /** Retry no sooner than {@code after}; {@code error} says why. */
  public Retry(Duration after, String error) {
    this(after, "", error, null);
  }

  /** Retry no sooner than {@code after} because of {@code cause} (its message is the error). */
  public Retry(Duration after, Throwable cause) {
    this(after, "", Settlement.text(cause), cause);
  }

  Retry(Duration after, String downstream, String error, Throwable cause) {
    super(text(after, downstream, error), cause);
    this.after = Objects.requireNonNull(after);
    if (after.isNegative()) {
      throw new IllegalArgumentException("spool: Retry after " + after + ": use zero (the subscription's backoff) or a positive duration");
    }
    this.downstream = Objects.requireNonNull(downstream);
  }

  /** The minimum delay before the next attempt; zero means the subscription's backoff. */
  public Duration after() {
    return after;
  }

  /** The dependency that failed (feeds its circuit breaker in the sidecar); "" when none. */
  public String downstream() {
    return downstream;
  }

  private static String text(Duration after, String downstream, String error) {
    StringBuilder b = new StringBuilder("retry");
    if (!downstream.isEmpty()) {
      b.append(" (downstream ").append(downstream).append(')');
    }
    if (after.compareTo(Duration.ZERO) > 0) {
      b.append(" after ").append(after.toMillis()).append("ms");
    }
    if (error != null && !error.isEmpty()) {
      b.append(": ").append(error);
    }
    return b.toString();
  }
}
