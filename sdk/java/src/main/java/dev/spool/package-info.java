/**
 * The Java SDK of Spool: consume and publish through the local sidecar
 * ({@code spoold}) over its public gRPC API ({@code proto/spool/v1}, generated
 * into {@code dev.spool.v1}; docs/protocol.md is the contract).
 *
 * <p>The application writes a {@link dev.spool.Handler}; {@link
 * dev.spool.Client#subscribe} does the rest of the protocol: credit,
 * settlements, lease extension (also for prefetched deliveries waiting for a
 * worker), reconnects with backoff and the drain on {@link
 * dev.spool.Subscription#close()} or JVM shutdown. {@link dev.spool.Client#publish},
 * {@link dev.spool.Client#publishBatch} and {@link dev.spool.Publisher} publish;
 * {@link dev.spool.HandlerServer} serves callback mode; {@link
 * dev.spool.Idempotent} makes work effectively-once in the application's own
 * database over JDBC.
 *
 * <p>Threads and locks of a subscription ({@link dev.spool.Subscription},
 * {@link dev.spool.Session}):
 * <ul>
 *   <li>a runner thread opens streams, reconnects and drains;
 *   <li>gRPC's callback thread receives frames (one at a time per stream);
 *   <li>one "io" thread sends every frame of a stream (gRPC's outbound calls
 *       are not thread-safe) and runs the lease timers;
 *   <li>handlers run on virtual threads (Java 21+) or a pool of
 *       {@code concurrency} platform threads.
 * </ul>
 * Lock order: {@code Subscription.mu} before {@code Session.lock}; neither is
 * held while calling the handler or gRPC, and {@code Session} never calls into
 * {@code Subscription} with its lock held.
 */
package dev.spool;
