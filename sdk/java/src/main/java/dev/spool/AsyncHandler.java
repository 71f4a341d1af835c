package dev.spool;

import java.util.concurrent.CompletionStage;

/**
 * Processes one message without blocking: the returned stage's completion is
 * the delivery's outcome, as {@link Handler}'s return or throw is. It
 * completes normally: ACK; exceptionally with {@link Retry}, {@link
 * RetryDownstream}, {@link DeadLetter} or {@link Release} (or an exception
 * caused by one, a {@code CompletionException} for example): that outcome;
 * exceptionally with anything else: RETRY with its message as the error.
 * Subscribe it with {@link Handler#async(AsyncHandler)}:
 *
 * <pre>{@code
 * client.subscribe("billing", List.of("orders"), Handler.async(m -> payments.chargeAsync(m.id(), m.payload())));
 * }</pre>
 *
 * <p>The delivery counts against the subscription's concurrency, and its
 * lease is extended, until the stage completes. When the lease is lost or the
 * drain timeout passes, the SDK cancels the stage's {@code CompletableFuture}
 * ({@code toCompletableFuture().cancel(true)}).
 */
@FunctionalInterface
public interface AsyncHandler {
  CompletionStage<?> handle(Message m) throws Exception;
}
