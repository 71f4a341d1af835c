package dev.spool;

import dev.spool.v1.PublishRequest;
import dev.spool.v1.PublishResponse;
import dev.spool.v1.PublisherServiceGrpc;
import dev.spool.v1.SubscriberServiceGrpc;
import io.grpc.ConnectivityState;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.opentelemetry.context.Context;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A connection to the local Spool sidecar ({@code spoold}). Thread-safe; one
 * per process is enough. Close it after the subscriptions and publishers
 * that use it.
 *
 * <pre>{@code
 * try (Client client = Client.connect()) {          // $SPOOL_ADDR, else 127.0.0.1:7070
 *   client.publish("orders", OutMessage.of(payload).withKey("cust-1").withId("order-1001"));
 * }
 * }</pre>
 *
 * The transport is plaintext gRPC: the sidecar is local.
 */
public final class Client implements AutoCloseable {
  /** The sidecar address used when none is given and SPOOL_ADDR is unset. */
  public static final String DEFAULT_ADDR = "127.0.0.1:7070";
  /** The environment variable holding the sidecar address. */
  public static final String ENV_ADDR = "SPOOL_ADDR";

  private final String addr;
  final ManagedChannel channel;
  private final ClientOptions opts;
  private final PublisherServiceGrpc.PublisherServiceBlockingStub pub;
  // When cutBackoffShort may reset the connect backoff next (System.nanoTime).
  private final AtomicLong nextBackoffReset = new AtomicLong(System.nanoTime());

  private Client(String addr, ClientOptions opts) {
    this.addr = resolveAddr(addr);
    this.opts = Objects.requireNonNull(opts);
    ManagedChannelBuilder<?> b = Grpc.newChannelBuilder(this.addr, InsecureChannelCredentials.create())
        .keepAliveTime(opts.keepAliveTime().toNanos(), TimeUnit.NANOSECONDS)
        .keepAliveTimeout(opts.keepAliveTimeout().toNanos(), TimeUnit.NANOSECONDS)
        .keepAliveWithoutCalls(true);
    if (b instanceof NettyChannelBuilder && this.addr.startsWith("unix:")) {
      // grpc-java asks for TCP keepalive on every connection; a unix socket
      // has none, and Netty would warn at each connect.
      ((NettyChannelBuilder) b).withOption(ChannelOption.SO_KEEPALIVE, null);
    }
    this.channel = b.build();
    this.pub = PublisherServiceGrpc.newBlockingStub(channel);
  }

  /** The address: the argument, else $SPOOL_ADDR, else 127.0.0.1:7070. */
  static String resolveAddr(String addr) {
    if (addr != null && !addr.isEmpty()) {
      return addr;
    }
    String env = System.getenv(ENV_ADDR);
    return env != null && !env.isEmpty() ? env : DEFAULT_ADDR;
  }

  /** Connects to $SPOOL_ADDR (else 127.0.0.1:7070) and waits until the sidecar answers. */
  public static Client connect() {
    return connect(null, ClientOptions.defaults());
  }

  /** Connects to addr ("host:port" or "unix:///path/to.sock") and waits until the sidecar answers. */
  public static Client connect(String addr) {
    return connect(addr, ClientOptions.defaults());
  }

  /**
   * Connects to addr (null or empty: $SPOOL_ADDR, else 127.0.0.1:7070) and,
   * unless {@link ClientOptions#connectTimeout()} is zero, waits until the
   * sidecar answers, so that a missing sidecar shows at startup as a {@link
   * SidecarUnreachableException}.
   */
  public static Client connect(String addr, ClientOptions opts) {
    Client c = new Client(addr, opts);
    if (!opts.connectTimeout().isZero()) {
      try {
        c.waitReady(opts.connectTimeout());
      } catch (RuntimeException e) {
        c.close();
        throw e;
      }
    }
    return c;
  }

  /** Waits until the connection is ready, riding out a sidecar that starts a moment later. */
  private void waitReady(Duration timeout) {
    ConnectivityState s = ConnectivityState.IDLE;
    try {
      s = awaitReady(System.nanoTime() + timeout.toNanos(), new CompletableFuture<Void>());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (s != ConnectivityState.READY) {
      throw new SidecarUnreachableException("spool: no sidecar answering at " + addr + " (nothing answered within " + timeout.toMillis()
          + " ms): is spoold running there? start it with `spoold --dev`, or point " + ENV_ADDR + " at it",
          Status.Code.UNAVAILABLE, "", null, "", null);
    }
  }

  /**
   * Waits delay, or less: until stop completes or, when the channel is down,
   * until it is ready again. A subscription's backoff paces its attempts at a
   * sidecar that does not answer, and one that comes back is used as soon as
   * the channel has connected to it. A channel that is ready already (the
   * sidecar answered) waits the full delay, so that attempts never spin.
   */
  void awaitReconnect(Duration delay, CompletableFuture<?> stop) throws InterruptedException {
    long deadline = System.nanoTime() + delay.toNanos();
    if (channel.getState(false) == ConnectivityState.READY) {
      try {
        stop.get(delay.toNanos(), TimeUnit.NANOSECONDS);
      } catch (TimeoutException | ExecutionException e) {
        // the delay passed
      }
      return;
    }
    awaitReady(deadline, stop);
  }

  /**
   * Waits until the channel is ready, deadline (System.nanoTime) passes or
   * stop completes, and returns the channel's state then. grpc-java has no
   * public setting for the channel's connect backoff (1 s, x1.6, up to
   * 120 s, which kept an app away from a restarted sidecar for seconds after
   * it was ready); the documented way to shorten it,
   * ManagedChannel.resetConnectBackoff(), is called here at most once per
   * {@link ClientOptions#connectRetry()} while the channel is in
   * TRANSIENT_FAILURE, so it tries the sidecar that often.
   */
  private ConnectivityState awaitReady(long deadline, CompletableFuture<?> stop) throws InterruptedException {
    long retry = opts.connectRetry().toNanos();
    while (true) {
      ConnectivityState s = channel.getState(true); // an idle channel connects
      long now = System.nanoTime();
      if (s == ConnectivityState.READY || stop.isDone() || now - deadline >= 0) {
        return s;
      }
      if (cutBackoffShort(s, now)) {
        continue;
      }
      CompletableFuture<Void> changed = new CompletableFuture<>();
      channel.notifyWhenStateChanged(s, () -> changed.complete(null));
      // Wake at the change, or when the next reset is due (or, connecting, a retry interval on).
      long nextReset = nextBackoffReset.get();
      long wait = Math.min(deadline - now, nextReset - now > 0 ? nextReset - now : retry);
      try {
        CompletableFuture.anyOf(changed, stop).get(wait, TimeUnit.NANOSECONDS);
      } catch (TimeoutException | ExecutionException e) {
        // look again
      }
    }
  }

  /**
   * Cuts grpc-java's connect backoff short (ManagedChannel.resetConnectBackoff)
   * when the channel, in state s at now (System.nanoTime), is in
   * TRANSIENT_FAILURE and the last reset was at least {@link
   * ClientOptions#connectRetry()} ago; reports whether it did. The one place
   * that does: while the client waits for its sidecar (awaitReady) and when a
   * publish fails (publishFailed).
   */
  private boolean cutBackoffShort(ConnectivityState s, long now) {
    long next = nextBackoffReset.get();
    if (s != ConnectivityState.TRANSIENT_FAILURE || now - next < 0 || !nextBackoffReset.compareAndSet(next, now + opts.connectRetry().toNanos())) {
      return false;
    }
    channel.resetConnectBackoff();
    return true;
  }

  /**
   * Called when a publish failed: an app that only publishes has no
   * subscription waiting for its sidecar (awaitReconnect), so its failed
   * publishes cut the connect backoff short instead, and its next publish
   * after the sidecar is back finds the channel connected (within about
   * connectRetry) rather than waiting out grpc-java's growing backoff.
   */
  void publishFailed() {
    cutBackoffShort(channel.getState(false), System.nanoTime());
  }

  /** The sidecar address this client uses. */
  public String addr() {
    return addr;
  }

  SubscriberServiceGrpc.SubscriberServiceStub subscriberStub() {
    return SubscriberServiceGrpc.newStub(channel);
  }

  PublisherServiceGrpc.PublisherServiceStub publisherStub() {
    return PublisherServiceGrpc.newStub(channel);
  }

  // ---- publishing ----

  /**
   * Appends one message to topic and returns once it is durable (on a quorum
   * of the partition's replicas). On an error the message may or may not be
   * stored: publish it again with the same id.
   */
  public PublishResult publish(String topic, OutMessage m) {
    return publish(topic, m, Acks.ALL);
  }

  /** {@link #publish(String, OutMessage)} answered once acks says so. */
  public PublishResult publish(String topic, OutMessage m, Acks acks) {
    return publishBatch(topic, List.of(m), acks).get(0);
  }

  /**
   * Appends messages to topic in one call (at most limits.max_batch_messages,
   * 10,000 by default) and returns one result per message, in order, once all
   * are durable. It fails or succeeds as a whole: one bad message refuses the
   * request and nothing is written. After another failure some may be stored:
   * publish them again with the same ids.
   */
  public List<PublishResult> publishBatch(String topic, List<OutMessage> msgs) {
    return publishBatch(topic, msgs, Acks.ALL);
  }

  /** {@link #publishBatch(String, List)} answered once acks says so. */
  public List<PublishResult> publishBatch(String topic, List<OutMessage> msgs, Acks acks) {
    if (msgs.isEmpty()) {
      checkTopic(topic);
      return List.of();
    }
    PublishRequest req = request(topic, msgs, acks);
    PublisherServiceGrpc.PublisherServiceBlockingStub stub = pub;
    if (!opts.publishTimeout().isZero()) {
      stub = stub.withDeadlineAfter(opts.publishTimeout().toNanos(), TimeUnit.NANOSECONDS);
    }
    PublishResponse resp;
    try {
      resp = stub.publish(req);
    } catch (StatusRuntimeException e) {
      publishFailed();
      throw Errors.wrap("spool: publish to \"" + topic + "\"", e, addr, Errors.Op.PUBLISH);
    }
    return results(topic, msgs.size(), resp);
  }

  /**
   * Cancels the scheduled message {@code at} (its publish's result) before its time
   * (docs/scheduling.md): a group that reads the cancel before the message is due does not
   * deliver it. Throws a {@link SpoolException} with reason {@link Reason#UNKNOWN_SCHEDULED_MESSAGE}
   * or {@link Reason#SCHEDULE_DUE}. Cancelling twice is not an error.
   */
  public void cancelScheduled(String topic, PublishResult at) {
    cancelScheduled(topic, dev.spool.v1.CancelScheduledRequest.newBuilder()
        .setTopic(topic).setId(at.id()).setPartition(at.partition()).setOffset(at.offset()).build());
  }

  /**
   * Cancels the scheduled message {@code id} of topic, searched for in every partition of the
   * topic (see {@link #cancelScheduled(String, PublishResult)}, which reads one record).
   */
  public void cancelScheduled(String topic, String id) {
    cancelScheduled(topic, dev.spool.v1.CancelScheduledRequest.newBuilder().setTopic(topic).setId(id).build());
  }

  private void cancelScheduled(String topic, dev.spool.v1.CancelScheduledRequest req) {
    checkTopic(topic);
    PublisherServiceGrpc.PublisherServiceBlockingStub stub = pub;
    if (!opts.publishTimeout().isZero()) {
      stub = stub.withDeadlineAfter(opts.publishTimeout().toNanos(), TimeUnit.NANOSECONDS);
    }
    try {
      stub.cancelScheduled(req);
    } catch (StatusRuntimeException e) {
      throw Errors.wrap("spool: cancel scheduled \"" + req.getId() + "\" of \"" + topic + "\"", e, addr, Errors.Op.CALL);
    }
  }

  /**
   * {@link #publish(String, OutMessage)} without blocking: the future
   * completes once the message is durable, or exceptionally with the
   * {@link SpoolException} {@code publish} would throw. It completes on a
   * gRPC thread: chain quick steps, or use the {@code *Async} methods with
   * your executor for blocking ones. Cancelling it cancels the call (the
   * message may or may not be stored). An empty topic throws at once.
   */
  public CompletableFuture<PublishResult> publishAsync(String topic, OutMessage m) {
    return publishAsync(topic, m, Acks.ALL);
  }

  /** {@link #publishAsync(String, OutMessage)} answered once acks says so. */
  public CompletableFuture<PublishResult> publishAsync(String topic, OutMessage m, Acks acks) {
    return publishBatchAsync(topic, List.of(m), acks).thenApply(rs -> rs.get(0));
  }

  /** {@link #publishBatch(String, List)} without blocking; see {@link #publishAsync(String, OutMessage)}. */
  public CompletableFuture<List<PublishResult>> publishBatchAsync(String topic, List<OutMessage> msgs) {
    return publishBatchAsync(topic, msgs, Acks.ALL);
  }

  /** {@link #publishBatchAsync(String, List)} answered once acks says so. */
  public CompletableFuture<List<PublishResult>> publishBatchAsync(String topic, List<OutMessage> msgs, Acks acks) {
    if (msgs.isEmpty()) {
      checkTopic(topic);
      return CompletableFuture.completedFuture(List.of());
    }
    PublishRequest req = request(topic, msgs, acks); // the trace context of the calling thread
    PublisherServiceGrpc.PublisherServiceStub stub = publisherStub();
    if (!opts.publishTimeout().isZero()) {
      stub = stub.withDeadlineAfter(opts.publishTimeout().toNanos(), TimeUnit.NANOSECONDS);
    }
    CompletableFuture<List<PublishResult>> f = new CompletableFuture<>();
    stub.publish(req, new ClientResponseObserver<PublishRequest, PublishResponse>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<PublishRequest> call) {
        f.whenComplete((r, e) -> {
          if (f.isCancelled()) {
            call.cancel("spool: the publish future was cancelled", null);
          }
        });
      }

      @Override
      public void onNext(PublishResponse resp) {
        try {
          f.complete(results(topic, msgs.size(), resp));
        } catch (SpoolException e) {
          f.completeExceptionally(e);
        }
      }

      @Override
      public void onError(Throwable t) {
        publishFailed();
        f.completeExceptionally(Errors.wrap("spool: publish to \"" + topic + "\"", t, addr, Errors.Op.PUBLISH));
      }

      @Override
      public void onCompleted() {}
    });
    return f;
  }

  private static void checkTopic(String topic) {
    if (topic == null || topic.isEmpty()) {
      throw new IllegalArgumentException("spool: publish: topic is empty: name the topic to publish to");
    }
  }

  private static PublishRequest request(String topic, List<OutMessage> msgs, Acks acks) {
    checkTopic(topic);
    PublishRequest.Builder req = PublishRequest.newBuilder().setTopic(topic).setAcks(acks.proto());
    Context ctx = Context.current();
    for (OutMessage m : msgs) {
      req.addMessages(m.withTraceContext(ctx).toProto());
    }
    return req.build();
  }

  private static List<PublishResult> results(String topic, int n, PublishResponse resp) {
    if (resp.getResultsCount() != n) {
      throw new SpoolException("spool: publish to \"" + topic + "\": the sidecar answered " + resp.getResultsCount() + " results for " + n
          + " messages: the sidecar and SDK disagree on the protocol; upgrade them together", Status.Code.INTERNAL);
    }
    List<PublishResult> out = new ArrayList<>(n);
    for (dev.spool.v1.PublishResult r : resp.getResultsList()) {
      out.add(PublishResult.of(r));
    }
    return out;
  }

  /** A pipelined publisher to topic over one PublishStream (defaults of {@link PublisherOptions}). Close it when done. */
  public Publisher publisher(String topic) {
    return publisher(topic, PublisherOptions.defaults());
  }

  /** A pipelined publisher to topic over one PublishStream. Close it when done. */
  public Publisher publisher(String topic, PublisherOptions opts) {
    return new Publisher(this, topic, opts);
  }

  // ---- subscribing ----

  /** {@link #subscribe(String, List, Handler, SubscribeOptions)} with the default options. */
  public Subscription subscribe(String group, List<String> topics, Handler handler) {
    return subscribe(group, topics, handler, SubscribeOptions.defaults());
  }

  /**
   * Starts consuming topics (empty: every topic of the group) as consumer
   * group group, calling handler for each delivery, and returns at once. It
   * runs until {@link Subscription#close()} (or a JVM shutdown, unless
   * drainOnShutdown is off), then drains.
   *
   * <p>When the stream to the sidecar breaks (a sidecar restart), it
   * reconnects with exponential backoff and full jitter, forever, logging
   * each attempt at WARNING. It ends by itself only when the sidecar refuses
   * the subscription for good (unknown group or topic: {@link
   * Subscription#awaitTermination()} throws why) or a delivery frame exceeds
   * the receive limit.
   */
  public Subscription subscribe(String group, List<String> topics, Handler handler, SubscribeOptions opts) {
    if (group == null || group.isEmpty()) {
      throw new IllegalArgumentException("spool: subscribe: group is empty: name the consumer group declared in the sidecar's subscriptions");
    }
    if (handler == null) {
      throw new IllegalArgumentException("spool: subscribe: handler is null: pass a Handler (m -> { ... })");
    }
    Subscription s = new Subscription(this, group, topics == null ? List.of() : topics, handler, Objects.requireNonNull(opts));
    s.start();
    return s;
  }

  /** Closes the connection. Calls in progress fail; subscriptions and publishers should be closed first. */
  @Override
  public void close() {
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }
}
