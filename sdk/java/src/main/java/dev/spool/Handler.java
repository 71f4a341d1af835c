package dev.spool;

/**
 * Processes one message. Its result is the delivery's outcome:
 *
 * <ul>
 *   <li>returns normally: ACK, never delivered to this group again;
 *   <li>throws {@link Retry} / {@link RetryDownstream}: RETRY after the given
 *       delay (zero: the subscription's backoff), its text shown to the next
 *       attempt as {@link Message#lastError()};
 *   <li>throws {@link DeadLetter}: DEAD_LETTER now, with the reason kept in
 *       the dead-letter entry;
 *   <li>throws {@link Release}: handed back as never started, no attempt
 *       counted;
 *   <li>throws anything else: RETRY after the backoff, with the exception's
 *       message as the error.
 * </ul>
 *
 * An outcome may also be the cause (at any depth) of the exception thrown.
 *
 * <p>The handler's thread is interrupted when the delivery's lease is lost
 * (the stream to the sidecar broke: the message will be redelivered) or when
 * the drain timeout passes during shutdown: the handler should then stop and
 * return (let {@link InterruptedException} propagate). The SDK extends the
 * lease while it runs; a handler never watches it.
 */
@FunctionalInterface
public interface Handler {
  void handle(Message m) throws Exception;
}
