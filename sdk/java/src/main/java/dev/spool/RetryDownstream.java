package dev.spool;

import java.time.Duration;

/**
 * {@link Retry} for a failure of a named dependency (for example
 * "email-provider"). The sidecar counts such retries toward that
 * downstream's circuit breaker; while it is open the subscription pauses and
 * attempts are not counted (docs/breaker.md).
 */
public class RetryDownstream extends Retry {
  private static final long serialVersionUID = 1L;

  public RetryDownstream(String downstream, Duration after, String error) {
    super(after, requireName(downstream), error, null);
  }

  public RetryDownstream(String downstream, Duration after, Throwable cause) {
    super(after, requireName(downstream), Settlement.text(cause), cause);
  }

  private static String requireName(String downstream) {
    if (downstream == null || downstream.isEmpty()) {
      throw new IllegalArgumentException("spool: RetryDownstream: name the downstream that failed (for example \"email-provider\"), or throw Retry");
    }
    return downstream;
  }
}
