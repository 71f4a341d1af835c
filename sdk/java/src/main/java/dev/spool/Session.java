package dev.spool;

import dev.spool.v1.Delivery;
import dev.spool.v1.SettleError;
import dev.spool.v1.Start;
import dev.spool.v1.SubscribeRequest;
import dev.spool.v1.SubscribeResponse;
import dev.spool.v1.SubscriberServiceGrpc;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One Subscribe stream. gRPC's callback thread receives its frames; every
 * outbound call (the Start frame, the coalesced frames of settlements,
 * extensions and credit, the half-close, the cancel) runs on the
 * subscription's single io thread, which also runs the lease timers.
 * Everything queued before a flush runs leaves in one frame: frames batch
 * under load and leave at once when idle.
 *
 * <p>A delivery's lease is kept from its receipt to its settlement, whether
 * it runs or waits (prefetched) for a worker: one timer per delivery. The
 * timer queues an extension and its settlement marks it done under the same
 * lock, so no extension is queued after the settlement.
 */
final class Session implements ClientResponseObserver<SubscribeRequest, SubscribeResponse> {
  static final Duration CLOSE_STREAM_TIMEOUT = Duration.ofSeconds(5);

  /** A delivery's lease, from receipt to settlement. Fields guarded by Session.lock. */
  static final class Lease {
    final Ref ref;
    ScheduledFuture<?> timer;
    long everyMs;
    boolean done;

    Lease(Ref ref) {
      this.ref = ref;
    }
  }

  private final Subscription sub;
  private final ScheduledExecutorService io;
  private final Stats stats;
  private final System.Logger log;
  /** Completes with the reason once the stream is broken or closed. */
  final CompletableFuture<Throwable> broken = new CompletableFuture<>();
  private volatile boolean started;
  private volatile long visibilityMs;
  private volatile boolean dead; // written under lock
  private ClientCallStreamObserver<SubscribeRequest> out; // used on the io thread only

  private final ReentrantLock lock = new ReentrantLock();
  // Guarded by lock:
  private boolean noCredit; // draining: settle without returning credit
  private boolean halfClosed;
  private boolean flushScheduled;
  /**
   * Credit handed to the transport minus deliveries received: what the
   * sidecar may still send. Credit queued but not yet sent does not count
   * (the sidecar cannot have used it); it is added just before the send, so
   * a delivery sent against it is never seen before it is counted.
   */
  private long available;
  private final Outbox pending = new Outbox();

  Session(Subscription sub, ScheduledExecutorService io) {
    this.sub = sub;
    this.io = io;
    this.stats = sub.stats();
    this.log = sub.log;
  }

  /** Opens the stream and sends Start with the initial credit. */
  void open(SubscriberServiceGrpc.SubscriberServiceStub stub) {
    SubscribeOptions cfg = sub.cfg;
    int credit = cfg.credit();
    lock.lock();
    try {
      available = credit;
    } finally {
      lock.unlock();
    }
    SubscribeRequest first = SubscribeRequest.newBuilder()
        .setStart(Start.newBuilder()
            .setGroup(sub.group)
            .addAllTopics(sub.topics)
            // The bound on outstanding deliveries is what runs plus what is
            // prefetched; the credit enforces the same number.
            .setMaxInFlight(credit)
            .setConsumerName(cfg.consumerName())
            .setAppVersion(cfg.appVersion())
            .setMaxReceiveBytes(cfg.maxReceiveBytes()))
        .setCredit(credit)
        .build();
    // The receive limit is set on the call (it overrides the channel's) and
    // stated in Start, so that the sidecar sizes its frames below it.
    stub.withMaxInboundMessageSize(cfg.maxReceiveBytes()).subscribe(this);
    onIo(() -> send(first));
  }

  @Override
  public void beforeStart(ClientCallStreamObserver<SubscribeRequest> requestStream) {
    this.out = requestStream;
  }

  boolean started() {
    return started;
  }

  boolean isDead() {
    return dead;
  }

  // ---- receiving (gRPC's callback thread, one frame at a time) ----

  @Override
  public void onNext(SubscribeResponse resp) {
    if (dead) {
      return;
    }
    if (resp.hasStarted()) {
      visibilityMs = Integer.toUnsignedLong(resp.getStarted().getVisibilityTimeoutMs());
      started = true;
    }
    for (SettleError se : resp.getSettleErrorsList()) {
      stats.settleErrors.incrementAndGet();
      Log.log(log, Level.WARNING, "spool: the sidecar rejected a settlement (the message may be redelivered; handlers should be idempotent)",
          "reason", se.getReason(), "message", se.getMessage(), "topic", se.getRef().getTopic(), "partition", se.getRef().getPartition(),
          "offset", se.getRef().getOffset(), "fencing_token", Long.toUnsignedString(se.getRef().getFencingToken()));
    }
    List<Delivery> ds = resp.getDeliveriesList();
    if (ds.isEmpty()) {
      return;
    }
    stats.delivered.addAndGet(ds.size());
    // The sidecar sent this frame against the credit it had then: take it
    // for the whole frame before any delivery reaches a worker, whose
    // settlement would return credit the sidecar had not seen.
    int covered;
    lock.lock();
    try {
      covered = (int) Math.min(Math.max(available, 0), ds.size());
      available -= covered;
    } finally {
      lock.unlock();
    }
    for (int i = 0; i < ds.size(); i++) {
      Delivery d = ds.get(i);
      if (i >= covered) {
        Log.log(log, Level.WARNING, "spool: the sidecar sent more deliveries than the credit granted; handing the excess back",
            "topic", d.getTopic(), "partition", d.getPartition(), "offset", d.getOffset());
        release(new Lease(Ref.of(d)));
        continue;
      }
      sub.accept(this, d);
    }
  }

  @Override
  public void onError(Throwable t) {
    fail(t);
  }

  @Override
  public void onCompleted() {
    fail(new IllegalStateException("the sidecar ended the stream"));
  }

  // ---- leases ----

  /** Starts keeping the lease of a delivery just received. */
  Lease startLease(Delivery d) {
    Lease l = new Lease(Ref.of(d));
    LeasePlan plan = LeasePlan.of(System.currentTimeMillis(), d.getLeaseDeadlineMs(), visibilityMs);
    lock.lock();
    try {
      if (dead) {
        l.done = true;
      } else if (plan != null) {
        l.everyMs = plan.everyMs();
        l.timer = schedule(() -> fire(l), plan.firstMs());
      }
    } finally {
      lock.unlock();
    }
    return l;
  }

  /** A lease timer: queue an extension unless the delivery is settled, and arm the next. */
  private void fire(Lease l) {
    lock.lock();
    try {
      if (dead || l.done) {
        return;
      }
      pending.extend(l.ref);
      l.timer = schedule(() -> fire(l), l.everyMs);
      scheduleFlushLocked();
    } finally {
      lock.unlock();
    }
    stats.extended.incrementAndGet();
  }

  private ScheduledFuture<?> schedule(Runnable r, long delayMs) {
    try {
      return io.schedule(r, delayMs, TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      return null; // the subscription has ended
    }
  }

  // ---- settling ----

  /** Queues a handler's outcome; returnCredit asks for one more delivery in the same frame. */
  void settle(Lease l, Settlement st, boolean returnCredit) {
    lock.lock();
    try {
      if (dead) {
        stats.dropped.incrementAndGet();
        return;
      }
      l.done = true;
      if (l.timer != null) {
        l.timer.cancel(false);
      }
      pending.settle(l.ref, st, returnCredit && !noCredit);
      scheduleFlushLocked();
    } finally {
      lock.unlock();
    }
    switch (st.outcome()) {
      case OUTCOME_ACK:
        stats.acked.incrementAndGet();
        break;
      case OUTCOME_RETRY:
        stats.retried.incrementAndGet();
        break;
      case OUTCOME_DEAD_LETTER:
        stats.deadLettered.incrementAndGet();
        break;
      default:
        stats.released.incrementAndGet();
    }
  }

  /** Hands back a delivery that was never started, without credit: no attempt is counted. */
  void release(Lease l) {
    settle(l, Settlement.RELEASE, false);
  }

  /** The drain: no more credit. */
  void stopCredit() {
    lock.lock();
    try {
      noCredit = true;
      pending.clearCredit();
    } finally {
      lock.unlock();
    }
  }

  private void scheduleFlushLocked() {
    if (!flushScheduled && !halfClosed) {
      flushScheduled = true;
      onIo(this::flush);
    }
  }

  /** Sends everything queued as one frame (io thread). */
  private void flush() {
    SubscribeRequest frame;
    lock.lock();
    try {
      flushScheduled = false;
      if (dead || halfClosed || pending.isEmpty()) {
        return;
      }
      available += pending.credit(); // before the send: see available
      frame = pending.take();
    } finally {
      lock.unlock();
    }
    send(frame);
  }

  private void send(SubscribeRequest frame) {
    if (dead) {
      return;
    }
    try {
      out.onNext(frame);
    } catch (RuntimeException e) {
      fail(e);
    }
  }

  private void onIo(Runnable r) {
    try {
      io.execute(r);
    } catch (RejectedExecutionException e) {
      // The subscription has ended: its streams were closed before the io
      // thread stopped, so there is nothing left to send or cancel.
    }
  }

  // ---- ending ----

  /**
   * Marks the stream broken: settlements are dropped from now on (the
   * sidecar releases the outstanding deliveries itself), running handlers
   * lose their lease (they are interrupted) and the call is cancelled.
   */
  void fail(Throwable err) {
    lock.lock();
    try {
      if (dead) {
        return;
      }
      dead = true;
    } finally {
      lock.unlock();
    }
    broken.complete(err);
    sub.sessionFailed(this);
    onIo(() -> {
      if (out != null) {
        out.cancel("spool: stream closed", null);
      }
    });
  }

  /** Ends the stream (a broken one, or after finish). */
  void close() {
    fail(new CancellationException("closed"));
  }

  /**
   * The end of a drain: sends what is queued, half-closes, waits (bounded)
   * for the sidecar to end the stream, then closes it. Every settlement must
   * be queued before: on the half-close the sidecar releases what is still
   * outstanding, counted as an attempt.
   */
  void finish() {
    onIo(() -> {
      flush();
      lock.lock();
      try {
        if (dead) {
          return;
        }
        halfClosed = true;
      } finally {
        lock.unlock();
      }
      try {
        out.onCompleted();
      } catch (RuntimeException e) {
        fail(e);
      }
    });
    try {
      broken.get(CLOSE_STREAM_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      Log.log(log, Level.WARNING, "spool: the sidecar did not end the stream after the drain; closing it", "timeout", CLOSE_STREAM_TIMEOUT);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      // broken never completes exceptionally
    }
    close();
  }
}
