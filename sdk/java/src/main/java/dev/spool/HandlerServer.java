package dev.spool;

import dev.spool.v1.HandleRequest;
import dev.spool.v1.HandleResponse;
import dev.spool.v1.HandlerServiceGrpc;
import dev.spool.v1.Outcome;
import io.grpc.Context;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Scope;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.System.Logger.Level;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Callback mode: serves {@code HandlerService} for subscriptions with
 * {@code delivery: callback}; the sidecar calls {@code Handle} once per
 * delivery. The same {@link Handler} and outcomes as {@link Client#subscribe}:
 * returning = OUTCOME_ACK; {@link Retry}, {@link RetryDownstream} and other
 * exceptions = OUTCOME_RETRY (with retry_after_ms, downstream, error); {@link
 * DeadLetter} = OUTCOME_DEAD_LETTER with its reason. {@link Release} is
 * answered with gRPC status CANCELLED, which the sidecar takes as a RELEASE
 * (no attempt counted): HandleResponse has no release outcome.
 *
 * <p>There is no lease extension in callback mode: the call's deadline is the
 * delivery's lease deadline. The handler's thread is interrupted when the
 * sidecar cancels the call or its deadline passes.
 *
 * <pre>{@code
 * try (HandlerServer server = HandlerServer.start(handler)) {   // 127.0.0.1:7080
 *   server.awaitTermination();   // until close() or SIGTERM (drains)
 * }
 * }</pre>
 */
public final class HandlerServer implements AutoCloseable {
  /**
   * Where a callback server listens unless told otherwise: loopback (the sidecar is in the same
   * pod), on a port none of spoold's (app 7070, admin 7071, cluster 7072, probe 7073). The same in
   * every SDK.
   */
  public static final String DEFAULT_ADDRESS = "127.0.0.1:7080";

  private final Server server;
  private final ExecutorService executor;
  private final HandlerServerOptions opts;
  private final Thread hook;
  private final Awaiters awaiters = new Awaiters();
  private final ReentrantLock mu = new ReentrantLock();
  private final List<Thread> running = new ArrayList<>(); // guarded by mu
  private boolean closed; // guarded by mu

  private HandlerServer(String address, Handler handler, HandlerServerOptions opts) {
    this.opts = opts;
    InetSocketAddress sa = parse(address);
    this.executor = HandlerThreads.executor("spool-callback-", opts.concurrency());
    try {
      // On the host asked for only (the sidecar is local), not every interface.
      this.server = NettyServerBuilder.forAddress(sa)
          .executor(executor)
          .addService(opts.token() == null ? new Impl(handler).bindService()
              : ServerInterceptors.intercept(new Impl(handler), new TokenCheck(opts.token())))
          .build()
          .start();
    } catch (IOException e) {
      executor.shutdownNow();
      throw new UncheckedIOException("spool: HandlerServer: listening on " + address + ": " + e.getMessage()
          + ": give a free host:port (the subscription's app_address)", e);
    }
    if (opts.token() == null && sa.getAddress() != null && !sa.getAddress().isLoopbackAddress()) {
      Log.log(opts.logger(), Level.WARNING, "spool: the callback server listens beyond loopback without a token: anyone who reaches it can hand it messages", null,
          "address", address);
    }
    this.hook = opts.drainOnShutdown() ? new Thread(this::closeAtShutdown, "spool-callback-drain") : null;
    if (hook != null) {
      Runtime.getRuntime().addShutdownHook(hook);
    }
  }

  /** Serves HandlerService at {@link #DEFAULT_ADDRESS} with the default options. */
  public static HandlerServer start(Handler handler) {
    return start(DEFAULT_ADDRESS, handler, HandlerServerOptions.defaults());
  }

  /** Serves HandlerService at {@link #DEFAULT_ADDRESS}. */
  public static HandlerServer start(Handler handler, HandlerServerOptions opts) {
    return start(DEFAULT_ADDRESS, handler, opts);
  }

  /** Serves HandlerService at address ("host:port"; port 0 picks a free one) with the default options. */
  public static HandlerServer start(String address, Handler handler) {
    return start(address, handler, HandlerServerOptions.defaults());
  }

  /** Serves HandlerService at address ("host:port"; port 0 picks a free one); returns once listening. */
  public static HandlerServer start(String address, Handler handler, HandlerServerOptions opts) {
    Objects.requireNonNull(handler, "spool: HandlerServer: handler is null: pass a Handler (m -> { ... })");
    return new HandlerServer(address, handler, Objects.requireNonNull(opts));
  }

  private static InetSocketAddress parse(String address) {
    if (address.startsWith(":")) {
      address = "127.0.0.1" + address; // no host: loopback, not every interface
    }
    try {
      URI u = new URI("tcp://" + address);
      if (u.getHost() == null || u.getPort() < 0) {
        throw new IllegalArgumentException();
      }
      return new InetSocketAddress(u.getHost(), u.getPort());
    } catch (Exception e) {
      throw new IllegalArgumentException("spool: HandlerServer: address " + address + ": give host:port (the subscription's app_address; port 0 picks a free one)");
    }
  }

  /** The port listened on (useful with port 0). */
  public int port() {
    return server.getPort();
  }

  /** The address listened on, with the port chosen. */
  public InetSocketAddress address() {
    for (SocketAddress a : server.getListenSockets()) {
      if (a instanceof InetSocketAddress) {
        return (InetSocketAddress) a;
      }
    }
    throw new IllegalStateException("spool: HandlerServer: not listening");
  }

  /**
   * Refuses a call without {@code authorization: Bearer <token>} (UNAUTHENTICATED) before the
   * handler runs. The comparison is of SHA-256 digests in constant time, so neither the token's
   * length nor its bytes show in the time taken.
   */
  private static final class TokenCheck implements ServerInterceptor {
    private static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final byte[] want;

    TokenCheck(String token) {
      this.want = sha256(token);
    }

    private static byte[] sha256(String s) {
      try {
        return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
      } catch (NoSuchAlgorithmException e) {
        throw new IllegalStateException("spool: SHA-256 is missing from this JVM", e);
      }
    }

    @Override
    public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
      String given = headers.get(AUTHORIZATION);
      given = given == null ? "" : given;
      int sp = given.indexOf(' ');
      boolean ok = MessageDigest.isEqual(sha256(sp < 0 ? "" : given.substring(sp + 1)), want);
      if (!ok || !given.substring(0, Math.max(sp, 0)).equalsIgnoreCase("bearer")) {
        call.close(Status.UNAUTHENTICATED.withDescription("spool: this handler needs the sidecar's token (app_token_file)"), new Metadata());
        return new ServerCall.Listener<Q>() { };
      }
      return next.startCall(call, headers);
    }
  }

  /**
   * Stops taking calls, lets running ones finish (up to the drain timeout),
   * then interrupts what still runs and closes.
   */
  @Override
  public void close() {
    mu.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
    } finally {
      mu.unlock();
    }
    server.shutdown();
    try {
      if (!server.awaitTermination(opts.drainTimeout().toMillis(), TimeUnit.MILLISECONDS)) {
        mu.lock();
        try {
          for (Thread t : running) {
            t.interrupt();
          }
        } finally {
          mu.unlock();
        }
        server.shutdownNow();
        server.awaitTermination(1, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      server.shutdownNow();
      Thread.currentThread().interrupt();
    }
    executor.shutdown();
    if (hook != null && Thread.currentThread() != hook) {
      try {
        Runtime.getRuntime().removeShutdownHook(hook);
      } catch (IllegalStateException e) {
        // the JVM is shutting down
      }
    }
  }

  /**
   * Waits until the server has stopped (close() or a JVM shutdown). On a JVM
   * shutdown (SIGTERM) the calling thread's code after it runs before the
   * JVM halts: the SDK's shutdown hook waits, after closing, for this thread
   * to end, up to {@link HandlerServerOptions.Builder#shutdownGrace} (5 s).
   */
  public void awaitTermination() throws InterruptedException {
    Thread me = awaiters.enter();
    try {
      server.awaitTermination();
    } catch (InterruptedException e) {
      awaiters.leave(me);
      throw e;
    }
  }

  private void closeAtShutdown() {
    close();
    awaiters.awaitAtShutdown(opts.shutdownGrace(), opts.logger(), "callback server");
  }

  private final class Impl extends HandlerServiceGrpc.HandlerServiceImplBase {
    private final Handler handler;
    private final Tracing.Handlers tracing;

    Impl(Handler handler) {
      this.handler = handler;
      this.tracing = new Tracing.Handlers(opts.tracerProvider());
    }

    @Override
    public void handle(HandleRequest req, StreamObserver<HandleResponse> out) {
      if (!req.hasDelivery()) {
        out.onError(Status.INVALID_ARGUMENT.withDescription("HandleRequest without a delivery").asRuntimeException());
        return;
      }
      Thread self = Thread.currentThread();
      ReentrantLock callMu = new ReentrantLock();
      boolean[] live = {true};
      // The sidecar cancelled the call, or its deadline (the lease) passed: stop the handler.
      Context.CancellationListener onCancel = ctx -> {
        callMu.lock();
        try {
          if (live[0]) {
            self.interrupt();
          }
        } finally {
          callMu.unlock();
        }
      };
      Context.current().addListener(onCancel, Runnable::run);
      mu.lock();
      try {
        running.add(self);
      } finally {
        mu.unlock();
      }
      Message m = Message.of(req.getDelivery());
      io.opentelemetry.context.Context parent = Tracing.extract(m.headers());
      Span span = tracing.start(m, parent);
      Throwable thrown = null;
      try (Scope ignored = parent.with(span).makeCurrent()) {
        handler.handle(m);
      } catch (Throwable t) {
        thrown = t;
      } finally {
        callMu.lock();
        try {
          live[0] = false;
        } finally {
          callMu.unlock();
        }
        Context.current().removeListener(onCancel);
        mu.lock();
        try {
          running.remove(self);
        } finally {
          mu.unlock();
        }
        Thread.interrupted(); // an interrupt aimed at this call ends with it
      }
      if (thrown != null && Settlement.findOutcome(thrown) == null) {
        Log.log(opts.logger(), thrown instanceof Error ? Level.ERROR : Level.DEBUG, "spool: callback handler failed; the message will be retried", thrown,
            "topic", req.getDelivery().getTopic(), "offset", req.getDelivery().getOffset(), "id", req.getDelivery().getMessageId());
      }
      Settlement st = Settlement.of(thrown);
      tracing.end(span, st);
      try {
        if (st.outcome() == Outcome.OUTCOME_RELEASE) {
          out.onError(Status.CANCELLED.withDescription("released by the handler").asRuntimeException());
          return;
        }
        out.onNext(HandleResponse.newBuilder()
            .setOutcome(st.outcome())
            .setRetryAfterMs(st.retryAfterMs())
            .setReason(st.reason())
            .setError(st.error())
            .setDownstream(st.downstream())
            .build());
        out.onCompleted();
      } catch (RuntimeException e) {
        // the call was cancelled meanwhile: nobody is waiting for the answer
      }
    }
  }
}
