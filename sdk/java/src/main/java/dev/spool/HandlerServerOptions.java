package dev.spool;

import io.opentelemetry.api.trace.TracerProvider;
import java.time.Duration;
import java.util.Objects;

/** How a {@link HandlerServer} runs. Immutable; build with {@link #builder()}. */
public final class HandlerServerOptions {
  private final int concurrency;
  private final Duration drainTimeout;
  private final boolean drainOnShutdown;
  private final Duration shutdownGrace;
  private final System.Logger logger;
  private final TracerProvider tracerProvider;
  private final String token;

  private HandlerServerOptions(Builder b) {
    this.token = b.token;
    this.concurrency = b.concurrency;
    this.drainTimeout = b.drainTimeout;
    this.drainOnShutdown = b.drainOnShutdown;
    this.shutdownGrace = b.shutdownGrace;
    this.logger = b.logger != null ? b.logger : System.getLogger("dev.spool");
    this.tracerProvider = b.tracerProvider;
  }

  public static HandlerServerOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public int concurrency() { return concurrency; }
  public Duration drainTimeout() { return drainTimeout; }
  public boolean drainOnShutdown() { return drainOnShutdown; }
  public Duration shutdownGrace() { return shutdownGrace; }
  public System.Logger logger() { return logger; }
  /** The provider of the handler spans, or null for the global one. */
  public TracerProvider tracerProvider() { return tracerProvider; }
  /** The token every call must carry, or null for none. */
  String token() { return token; }

  @Override
  public String toString() {
    return "HandlerServerOptions{concurrency=" + concurrency + ", drainTimeout=" + drainTimeout + ", token=" + (token == null ? "none" : "[redacted]") + "}";
  }

  public static final class Builder {
    private int concurrency = SubscribeOptions.DEFAULT_CONCURRENCY;
    private Duration drainTimeout = SubscribeOptions.DEFAULT_DRAIN_TIMEOUT;
    private boolean drainOnShutdown = true;
    private Duration shutdownGrace = SubscribeOptions.DEFAULT_SHUTDOWN_GRACE;
    private System.Logger logger;
    private TracerProvider tracerProvider;
    private String token;

    private Builder() {}

    /**
     * Required of every call when set: {@code authorization: Bearer <token>}, what spoold sends
     * with the subscription's {@code app_token_file}. Other calls are refused with
     * UNAUTHENTICATED before the handler runs. Default: none.
     */
    public Builder token(String t) {
      if (t != null && t.isEmpty()) {
        throw new IllegalArgumentException("spool: token is empty: pass the token of spoold's app_token_file, or null for none");
      }
      token = t;
      return this;
    }

    /**
     * Platform threads for handlers where the JDK has no virtual threads
     * (default 64); calls beyond it wait. With virtual threads each call has
     * its own. The sidecar bounds the calls (max_in_flight per partition).
     */
    public Builder concurrency(int n) { concurrency = n; return this; }

    /** How long close() lets running calls finish (default 30 s). */
    public Builder drainTimeout(Duration d) { drainTimeout = Objects.requireNonNull(d); return this; }

    /** Whether a JVM shutdown closes the server first (default true). */
    public Builder drainOnShutdown(boolean on) { drainOnShutdown = on; return this; }

    /**
     * How long a JVM shutdown waits, once the server is closed, for each
     * thread that was waiting in {@link HandlerServer#awaitTermination()} to
     * end (default 5 s): the app's code after it runs to its end. Zero: do
     * not wait.
     */
    public Builder shutdownGrace(Duration d) { shutdownGrace = Objects.requireNonNull(d); return this; }

    /** Where handler errors go (default System.getLogger("dev.spool")). */
    public Builder logger(System.Logger l) { logger = l; return this; }

    /**
     * Where the handler spans go (default: the global OpenTelemetry, followed
     * when the app sets it later). See "Tracing" in docs/sdk-java.md.
     */
    public Builder tracerProvider(TracerProvider tp) { tracerProvider = tp; return this; }

    public HandlerServerOptions build() {
      if (concurrency < 1 || concurrency > SubscribeOptions.MAX_CONCURRENCY) {
        throw new IllegalArgumentException("spool: concurrency " + concurrency + ": use 1.." + SubscribeOptions.MAX_CONCURRENCY);
      }
      if (shutdownGrace.isNegative()) {
        throw new IllegalArgumentException("spool: shutdownGrace " + shutdownGrace + ": use zero (do not wait) or a positive duration");
      }
      if (drainTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: drainTimeout " + drainTimeout + ": use zero or a positive duration");
      }
      return new HandlerServerOptions(this);
    }
  }
}
