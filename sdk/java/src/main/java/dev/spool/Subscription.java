package dev.spool;

import dev.spool.v1.Delivery;
import dev.spool.v1.SubscriberServiceGrpc;
import io.grpc.ConnectivityState;
import io.grpc.Status;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A running {@link Client#subscribe} call: it consumes until {@link #close()}
 * (or a JVM shutdown, or a refusal the sidecar will not change its mind
 * about), then drains.
 *
 * <p>It owns the concurrency bound and the queue of deliveries received but
 * not started; it outlives the streams ({@link Session}s) it opens one after
 * the other when a stream breaks, so the bound holds across reconnects. Its
 * runner thread is not a daemon: a running subscription keeps the JVM alive,
 * like a server.
 *
 * <p>The drain: no more credit; deliveries received but not started are
 * handed back (RELEASE, no attempt counted); running handlers finish, up to
 * the drain timeout, and their settlements are sent; then they are
 * interrupted, and those still running a second later are abandoned ({@link
 * DrainException}); the stream is half-closed and the SDK waits up to 5 s for
 * the sidecar to end it.
 */
public final class Subscription implements AutoCloseable {
  private static final Duration ABANDON_AFTER_INTERRUPT = Duration.ofSeconds(1);

  private record Work(Session s, Delivery d, Session.Lease lease) {}

  private record Running(Session s, Thread thread) {}

  final Client client;
  final SubscribeOptions cfg;
  final String group;
  final List<String> topics;
  final System.Logger log;
  private final Handler handler;
  private final Tracing.Handlers tracing;
  private final Stats stats;
  private final ExecutorService handlers;
  private final ScheduledThreadPoolExecutor io;
  private final Thread runner;
  private final Thread hook;
  private final CompletableFuture<Void> stop = new CompletableFuture<>();
  private final CompletableFuture<Void> done = new CompletableFuture<>();
  private final Awaiters awaiters = new Awaiters();

  private final ReentrantLock mu = new ReentrantLock();
  private final Condition idle = mu.newCondition();
  // Guarded by mu:
  private final ArrayDeque<Work> queue = new ArrayDeque<>(); // received, not started
  private final List<Running> active = new ArrayList<>();
  private int running;
  private boolean draining;

  Subscription(Client client, String group, List<String> topics, Handler handler, SubscribeOptions cfg) {
    this.client = client;
    this.cfg = cfg;
    this.group = group;
    this.topics = List.copyOf(topics);
    this.handler = handler;
    this.tracing = new Tracing.Handlers(cfg.tracerProvider());
    this.stats = cfg.stats();
    this.log = cfg.logger();
    this.handlers = HandlerThreads.executor("spool-handler-" + group + "-", cfg.concurrency());
    this.io = new ScheduledThreadPoolExecutor(1, HandlerThreads.daemonFactory("spool-io-" + group + "-"));
    io.setRemoveOnCancelPolicy(true);
    io.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
    this.runner = new Thread(this::run, "spool-subscribe-" + group);
    this.hook = cfg.drainOnShutdown() ? new Thread(this::drainAtShutdown, "spool-drain-" + group) : null;
  }

  void start() {
    if (hook != null) {
      Runtime.getRuntime().addShutdownHook(hook);
    }
    runner.start();
  }

  /** The counters of this subscription. */
  public Stats stats() {
    return stats;
  }

  /** Whether it still runs (it has not finished its drain). */
  public boolean isRunning() {
    return !done.isDone();
  }

  /**
   * Drains and waits for the drain to end (at most the drain timeout plus
   * about 6 s). Throws what ended the subscription, if anything did: a
   * refusal of the subscription ({@link NotFoundException} for an unknown
   * group...) or handlers abandoned at the drain ({@link DrainException}).
   * Called from a handler, it starts the drain and returns at once.
   */
  @Override
  public void close() {
    stop.complete(null);
    if (inHandler()) {
      return;
    }
    boolean interrupted = false;
    while (true) {
      try {
        done.get();
        break;
      } catch (InterruptedException e) {
        interrupted = true;
      } catch (ExecutionException e) {
        throw rethrown(e);
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Waits until the subscription has ended: after {@link #close()}, a JVM
   * shutdown, or a refusal of the subscription, which it throws (a {@link
   * SpoolException}, for example {@link NotFoundException} with reason
   * UNKNOWN_GROUP).
   */
  public void awaitTermination() throws InterruptedException {
    awaitTermination(null);
  }

  /**
   * {@link #awaitTermination()} for at most timeout; false if it still runs
   * then. On a JVM shutdown (SIGTERM) the calling thread's code after it
   * runs before the JVM halts: the SDK's shutdown hook waits, after the
   * drain, for this thread to end, up to {@link
   * SubscribeOptions.Builder#shutdownGrace} (5 s).
   */
  public boolean awaitTermination(Duration timeout) throws InterruptedException {
    Thread me = awaiters.enter();
    boolean ended = false;
    try {
      if (timeout == null) {
        done.get();
      } else {
        done.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
      }
      ended = true;
      return true;
    } catch (TimeoutException e) {
      return false;
    } catch (ExecutionException e) {
      ended = true;
      throw rethrown(e);
    } finally {
      if (!ended) {
        awaiters.leave(me);
      }
    }
  }

  private static RuntimeException rethrown(ExecutionException e) {
    Throwable c = e.getCause();
    return c instanceof RuntimeException ? (RuntimeException) c : new SpoolException(String.valueOf(c), Status.Code.INTERNAL);
  }

  private boolean inHandler() {
    mu.lock();
    try {
      for (Running r : active) {
        if (r.thread == Thread.currentThread()) {
          return true;
        }
      }
      return false;
    } finally {
      mu.unlock();
    }
  }

  private void drainAtShutdown() {
    stop.complete(null);
    try {
      done.get();
    } catch (InterruptedException | ExecutionException e) {
      // logged by the runner; the JVM is exiting
    }
    awaiters.awaitAtShutdown(cfg.shutdownGrace(), log, "subscription " + group);
  }

  // ---- the runner: streams, reconnects, drain ----

  private void run() {
    SpoolException runErr = null;
    SpoolException drainErr = null;
    try {
      Session live = null;
      int attempt = 0;
      int opened = 0;
      SubscriberServiceGrpc.SubscriberServiceStub stub = client.subscriberStub();
      while (!stop.isDone()) {
        // Our backoff decides when to reconnect, not the channel's own.
        if (client.channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
          client.channel.resetConnectBackoff();
        }
        Session s = new Session(this, io);
        try {
          s.open(stub);
        } catch (RuntimeException e) {
          s.fail(e);
        }
        if (opened++ > 0) {
          stats.reconnects.incrementAndGet();
        }
        CompletableFuture.anyOf(s.broken, stop).join();
        if (!s.broken.isDone()) { // stopped with the stream alive: drain through it
          live = s;
          break;
        }
        Throwable err = s.broken.join();
        s.close();
        if (client.channel.isShutdown()) {
          runErr = new SpoolException("spool: subscribe group \"" + group + "\": the Client was closed while the subscription ran: close subscriptions before their Client",
              Status.Code.CANCELLED);
          break;
        }
        if (s.started()) {
          attempt = 0;
        }
        if (Errors.frameTooLarge(err)) {
          SpoolException w = Errors.wrap("spool: subscribe group \"" + group + "\"", err, client.addr(), Errors.Op.CALL);
          runErr = Errors.make("spool: subscribe group \"" + group + "\": the sidecar at " + client.addr()
              + " sent a delivery frame larger than this client's receive limit of " + cfg.maxReceiveBytes() + " bytes (" + w.details()
              + "): raise SubscribeOptions.maxReceiveBytes above the sidecar's limits.max_message_bytes plus 1 MiB, or upgrade spoold so that it bounds frames by Start.max_receive_bytes; reconnecting would only get the same frame again",
              w.code(), w.reason(), w.details(), w.metadata(), err);
          Log.log(log, Level.ERROR, "spool: subscribe stopped: a delivery frame is larger than this client can receive", "err", runErr.getMessage());
          break;
        }
        if (Errors.permanent(err)) {
          SpoolException w = Errors.wrap("spool: subscribe group \"" + group + "\"", err, client.addr(), Errors.Op.CALL);
          runErr = Errors.make(w.getMessage() + ": the sidecar at " + client.addr()
              + " refused the subscription; check the group and topics against the sidecar's subscriptions", w.code(), w.reason(), w.details(), w.metadata(), err);
          Log.log(log, Level.ERROR, "spool: subscribe stopped", "err", runErr.getMessage());
          break;
        }
        if (stop.isDone()) {
          break;
        }
        Duration delay = cfg.backoff().next(attempt);
        attempt++;
        String msg = Errors.sidecarUnreachable(err)
            ? "spool: no sidecar answering; reconnecting (is spoold running? deliveries in progress will be redelivered)"
            : "spool: subscribe stream to the sidecar broke; reconnecting (deliveries in progress will be redelivered)";
        Log.log(log, Level.WARNING, msg, "group", group, "addr", client.addr(), "err", Settlement.text(err), "retry_in_ms", delay.toMillis(), "attempt", attempt);
        try {
          if (Errors.sidecarUnreachable(err)) {
            client.awaitReconnect(delay, stop); // or as soon as the sidecar is back
          } else {
            stop.get(delay.toNanos(), TimeUnit.NANOSECONDS);
          }
        } catch (TimeoutException e) {
          // the backoff passed
        } catch (InterruptedException | ExecutionException e) {
          break;
        }
      }
      drainErr = drain(live);
    } catch (RuntimeException | Error e) {
      Log.log(log, Level.ERROR, "spool: subscribe failed", e, "group", group);
      runErr = new SpoolException("spool: subscribe group \"" + group + "\": " + e, Status.Code.INTERNAL, "", null, "", e);
    } finally {
      io.shutdownNow();
      if (drainErr == null) {
        handlers.shutdown();
      } else {
        handlers.shutdownNow();
      }
      if (hook != null && Thread.currentThread() != hook) {
        try {
          Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
          // the JVM is shutting down: the hook is waiting for us
        }
      }
      SpoolException err = runErr != null ? runErr : drainErr;
      runOnDrained();
      if (err != null) {
        done.completeExceptionally(err);
      } else {
        done.complete(null);
      }
    }
  }

  private void runOnDrained() {
    Runnable cb = cfg.onDrained();
    if (cb == null) {
      return;
    }
    try {
      cb.run();
    } catch (RuntimeException | Error e) {
      Log.log(log, Level.ERROR, "spool: the onDrained callback threw", e, "group", group);
    }
  }

  private SpoolException drain(Session live) {
    mu.lock();
    try {
      draining = true;
    } finally {
      mu.unlock();
    }
    if (live != null) {
      live.stopCredit();
    }
    releaseQueued();
    SpoolException err = null;
    if (!awaitIdle(cfg.drainTimeout())) {
      Log.log(log, Level.WARNING, "spool: drain timeout passed with handlers running; interrupting them", "running", runningNow(), "drain_timeout", cfg.drainTimeout());
      interruptActive(null);
      if (!awaitIdle(ABANDON_AFTER_INTERRUPT)) {
        int n = runningNow();
        err = new DrainException("spool: drain: " + n + " handlers still running after the drain timeout interrupted them; they were abandoned and their messages will be redelivered when the lease ends: make handlers return when interrupted", n);
        Log.log(log, Level.ERROR, "spool: drain: handlers ignore interrupts; abandoning them", "running", n);
      }
    }
    releaseQueued();
    if (live != null) {
      live.finish();
    }
    return err;
  }

  private int runningNow() {
    mu.lock();
    try {
      return running;
    } finally {
      mu.unlock();
    }
  }

  private boolean awaitIdle(Duration d) {
    mu.lock();
    try {
      long nanos = d.toNanos();
      while (running > 0) {
        if (nanos <= 0) {
          return false;
        }
        nanos = idle.awaitNanos(nanos);
      }
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return running == 0;
    } finally {
      mu.unlock();
    }
  }

  /** Hands back every delivery received but not started. */
  private void releaseQueued() {
    mu.lock();
    try {
      for (Work w; (w = queue.poll()) != null; ) {
        if (!w.s.isDead()) {
          w.s.release(w.lease);
        }
      }
    } finally {
      mu.unlock();
    }
  }

  // ---- work: called by sessions ----

  /** A delivery within credit, just received: queue it (its lease is kept from now) or hand it back at a drain. */
  void accept(Session s, Delivery d) {
    mu.lock();
    try {
      if (draining) {
        s.release(new Session.Lease(Ref.of(d)));
        return;
      }
      queue.add(new Work(s, d, s.startLease(d)));
      pump();
    } finally {
      mu.unlock();
    }
  }

  /** A stream broke: drop its queued deliveries (the sidecar released them) and interrupt its handlers. */
  void sessionFailed(Session s) {
    mu.lock();
    try {
      queue.removeIf(w -> w.s == s);
    } finally {
      mu.unlock();
    }
    interruptActive(s);
  }

  /** Interrupts the running handlers of s (all of them when s is null). */
  private void interruptActive(Session s) {
    mu.lock();
    try {
      for (Running r : active) {
        if (s == null || r.s == s) {
          r.thread.interrupt();
        }
      }
    } finally {
      mu.unlock();
    }
  }

  /** Starts queued deliveries while fewer than concurrency handlers run. mu held. */
  private void pump() {
    while (running < cfg.concurrency() && !queue.isEmpty()) {
      Work w = queue.poll();
      if (w.s.isDead()) {
        continue; // the stream broke: the sidecar released it already
      }
      if (draining) {
        w.s.release(w.lease);
        continue;
      }
      running++;
      try {
        handlers.execute(() -> process(w));
      } catch (RejectedExecutionException e) {
        running--;
        w.s.release(w.lease);
      }
    }
  }

  private void process(Work w) {
    Running r = new Running(w.s, Thread.currentThread());
    boolean started = false;
    try {
      mu.lock();
      try {
        if (!w.s.isDead()) {
          active.add(r);
          started = true;
        }
      } finally {
        mu.unlock();
      }
      if (!started) {
        return;
      }
      Message m = Message.of(w.d);
      Context parent = Tracing.extract(m.headers());
      Span span = tracing.start(m, parent);
      Throwable thrown = null;
      try (Scope ignored = parent.with(span).makeCurrent()) {
        handler.handle(m);
      } catch (Throwable t) {
        thrown = t;
      }
      mu.lock();
      try {
        active.remove(r);
      } finally {
        mu.unlock();
      }
      // Interrupts aimed at this handler (lease lost, drain timeout) end with
      // it: the thread may run another handler next.
      Thread.interrupted();
      if (thrown != null && Settlement.findOutcome(thrown) == null) {
        stats.handlerErrors.incrementAndGet();
        Log.log(log, thrown instanceof Error ? Level.ERROR : Level.DEBUG, "spool: handler failed; the message will be retried", thrown,
            "topic", w.d.getTopic(), "partition", w.d.getPartition(), "offset", w.d.getOffset(), "id", w.d.getMessageId());
      }
      Settlement st = Settlement.of(thrown);
      tracing.end(span, st);
      w.s.settle(w.lease, st, true);
    } finally {
      mu.lock();
      try {
        if (started) {
          active.remove(r);
        }
        running--;
        if (running == 0) {
          idle.signalAll();
        }
        pump();
      } finally {
        mu.unlock();
      }
    }
  }
}
