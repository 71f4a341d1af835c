package dev.spool;

import io.grpc.Status;

/**
 * Handlers were still running after the drain timeout interrupted them: they
 * were abandoned, and their messages will be redelivered when their leases
 * end. Make handlers return when interrupted.
 */
public class DrainException extends SpoolException {
  private static final long serialVersionUID = 1L;
  private final int abandoned;

  public DrainException(String message, int abandoned) {
    super(message, Status.Code.DEADLINE_EXCEEDED);
    this.abandoned = abandoned;
  }

  /** How many handlers were abandoned. */
  public int abandoned() {
    return abandoned;
  }
}
