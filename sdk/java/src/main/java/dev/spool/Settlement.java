package dev.spool;

import dev.spool.v1.Outcome;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/**
 * What a handler's result means for the sidecar: the outcome and the fields
 * of its Nack. Pure: {@link #of(Throwable)} maps a result (null = returned
 * normally) to a settlement.
 */
record Settlement(Outcome outcome, int retryAfterMs, String reason, String error, String downstream) {

  /** Bounds the error text and reason sent with a Nack, so a huge error cannot make a frame fail. */
  static final int MAX_ERROR_TEXT_BYTES = 4096;

  static final Settlement ACK = new Settlement(Outcome.OUTCOME_ACK, 0, "", "", "");
  static final Settlement RELEASE = new Settlement(Outcome.OUTCOME_RELEASE, 0, "", "", "");

  /** Maps a handler's result (null: returned normally; else what it threw) to a settlement. */
  static Settlement of(Throwable thrown) {
    if (thrown == null) {
      return ACK;
    }
    OutcomeException o = findOutcome(thrown);
    if (o instanceof Release) {
      return RELEASE;
    }
    if (o instanceof DeadLetter) {
      return new Settlement(Outcome.OUTCOME_DEAD_LETTER, 0, clean(((DeadLetter) o).reason()), clean(text(thrown)), "");
    }
    int after = 0;
    String downstream = "";
    if (o instanceof Retry) {
      Retry r = (Retry) o;
      downstream = clean(r.downstream());
      after = retryAfterMs(r.after());
    }
    return new Settlement(Outcome.OUTCOME_RETRY, after, "", clean(text(thrown)), downstream);
  }

  /** A positive delay below 1 ms still asks for a delay; the wire field is a uint32 (capped at 2^31-1 here). */
  static int retryAfterMs(Duration after) {
    if (after.isZero() || after.isNegative()) {
      return 0;
    }
    long ms;
    try {
      ms = after.toMillis();
      if (after.minusMillis(ms).compareTo(Duration.ZERO) > 0) {
        ms++; // round up
      }
    } catch (ArithmeticException e) {
      ms = Integer.MAX_VALUE;
    }
    return (int) Math.min(Math.max(ms, 1), Integer.MAX_VALUE);
  }

  /** Finds an outcome in t or its cause chain (at most 32 deep). */
  static OutcomeException findOutcome(Throwable t) {
    for (int i = 0; i < 32 && t != null; i++) {
      if (t instanceof OutcomeException) {
        return (OutcomeException) t;
      }
      t = t.getCause();
    }
    return null;
  }

  /** The text of a throwable: its message, else its class and message. */
  static String text(Throwable t) {
    if (t == null) {
      return "";
    }
    String m = t.getMessage();
    return m == null || m.isEmpty() ? t.toString() : m;
  }

  /**
   * Makes text safe and short for a proto string: valid UTF-8 (lone
   * surrogates become '?') and at most MAX_ERROR_TEXT_BYTES, cut on a
   * character boundary with an ellipsis.
   */
  static String clean(String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length <= MAX_ERROR_TEXT_BYTES) {
      return new String(b, StandardCharsets.UTF_8);
    }
    int cut = MAX_ERROR_TEXT_BYTES;
    while (cut > 0 && (b[cut] & 0xC0) == 0x80) {
      cut--;
    }
    return new String(b, 0, cut, StandardCharsets.UTF_8) + "…";
  }
}
