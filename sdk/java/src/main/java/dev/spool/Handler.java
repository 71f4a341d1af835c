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

  /**
   * A handler that runs an {@link AsyncHandler} and waits for its stage: the
   * stage's completion is the outcome. The wait holds one of the
   * subscription's handler threads (a virtual thread on Java 21+, so it costs
   * little; one of the {@code concurrency} pool threads on Java 17), which is
   * what bounds the stages in flight to the concurrency. An interrupt (lease
   * lost, drain timeout) cancels the stage's future. The trace context of the
   * handler's span is current on the thread that calls {@code handle}:
   * capture it there ({@code Context.current().wrap(executor)}) for work that
   * continues elsewhere. Works for subscriptions and callback mode ({@link
   * HandlerServer}) alike.
   */
  static Handler async(AsyncHandler h) {
    java.util.Objects.requireNonNull(h, "spool: Handler.async: the AsyncHandler is null");
    return m -> {
      java.util.concurrent.CompletionStage<?> stage = h.handle(m);
      if (stage == null) {
        throw new NullPointerException("spool: the AsyncHandler returned null: return a CompletionStage (CompletableFuture.completedFuture(null) when done at once)");
      }
      java.util.concurrent.CompletableFuture<?> f = stage.toCompletableFuture();
      try {
        f.get();
      } catch (InterruptedException e) {
        f.cancel(true);
        throw e;
      } catch (java.util.concurrent.ExecutionException e) {
        Throwable c = e.getCause();
        while (c instanceof java.util.concurrent.CompletionException && c.getCause() != null) {
          c = c.getCause();
        }
        if (c instanceof Error) {
          throw (Error) c;
        }
        throw c instanceof Exception ? (Exception) c : new Exception(c);
      }
    };
  }
}
