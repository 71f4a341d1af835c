package dev.spool;

/**
 * An outcome other than ACK, thrown by a handler: {@link Retry}, {@link
 * RetryDownstream}, {@link DeadLetter} or {@link Release}. Unchecked, so that
 * it can be thrown from any code the handler calls; it records no stack
 * trace (it is a decision, not a failure).
 */
public abstract class OutcomeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  OutcomeException(String message, Throwable cause) {
    super(message, cause, false, false);
  }
}
