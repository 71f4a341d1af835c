package dev.spool;

import java.util.Objects;

/**
 * The message can never succeed (poison: bad schema, unknown customer): move
 * it to the subscription's dead-letter topic now, with {@link #reason()}.
 */
public class DeadLetter extends OutcomeException {
  private static final long serialVersionUID = 1L;
  private final String reason;

  public DeadLetter(String reason) {
    super("dead letter: " + reason, null);
    this.reason = Objects.requireNonNull(reason);
  }

  public DeadLetter(String reason, Throwable cause) {
    super("dead letter: " + reason, cause);
    this.reason = Objects.requireNonNull(reason);
  }

  /** Why the message can never succeed, kept in the dead-letter entry. */
  public String reason() {
    return reason;
  }
}
