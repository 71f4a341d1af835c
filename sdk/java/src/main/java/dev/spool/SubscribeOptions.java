package dev.spool;

import io.opentelemetry.api.trace.TracerProvider;
import java.time.Duration;
import java.util.Objects;

/**
 * How {@link Client#subscribe} runs. Immutable; build with {@link #builder()}.
 *
 * <pre>{@code
 * SubscribeOptions.builder().concurrency(32).consumerName(System.getenv("POD_NAME")).build()
 * }</pre>
 */
public final class SubscribeOptions {
  /** Handlers running at once by default. */
  public static final int DEFAULT_CONCURRENCY = 64;
  /** How long the drain waits for running handlers by default. */
  public static final Duration DEFAULT_DRAIN_TIMEOUT = Duration.ofSeconds(30);
  /** The reconnect delay's first ceiling by default. */
  public static final Duration DEFAULT_RECONNECT_BASE = Duration.ofMillis(100);
  /** The reconnect delay's largest ceiling by default. */
  public static final Duration DEFAULT_RECONNECT_MAX = Duration.ofSeconds(5);
  /**
   * The largest delivery frame accepted by default: 64 MiB, the largest
   * limits.max_message_bytes spoold allows, plus 1 MiB for a delivery's
   * other fields. gRPC's own default, 4 MiB, would refuse a message the
   * sidecar accepted.
   */
  public static final int DEFAULT_MAX_RECEIVE_BYTES = 65 << 20;
  /** How long a JVM shutdown waits, after the drain, for the code after awaitTermination by default. */
  public static final Duration DEFAULT_SHUTDOWN_GRACE = Duration.ofSeconds(5);

  static final int MAX_CONCURRENCY = 1 << 16;
  static final int MAX_CREDIT = 1 << 20;
  static final int MIN_RECEIVE_BYTES = 64 << 10;
  static final int MAX_RECEIVE_BYTES = 1 << 30;

  private final int concurrency;
  private final int prefetch;
  private final String consumerName;
  private final String appVersion;
  private final Duration drainTimeout;
  private final Backoff backoff;
  private final int maxReceiveBytes;
  private final boolean drainOnShutdown;
  private final Duration shutdownGrace;
  private final Runnable onDrained;
  private final System.Logger logger;
  private final TracerProvider tracerProvider;
  private final Stats stats;

  private SubscribeOptions(Builder b) {
    this.concurrency = b.concurrency;
    this.prefetch = b.prefetch < 0 ? b.concurrency : b.prefetch;
    this.consumerName = b.consumerName;
    this.appVersion = b.appVersion;
    this.drainTimeout = b.drainTimeout;
    this.backoff = new Backoff(b.reconnectBase, b.reconnectMax);
    this.maxReceiveBytes = b.maxReceiveBytes;
    this.drainOnShutdown = b.drainOnShutdown;
    this.shutdownGrace = b.shutdownGrace;
    this.onDrained = b.onDrained;
    this.logger = b.logger != null ? b.logger : System.getLogger("dev.spool");
    this.tracerProvider = b.tracerProvider;
    this.stats = b.stats != null ? b.stats : new Stats();
  }

  /** The defaults: 64 handlers, prefetch 64, drain timeout 30 s, reconnect 100 ms .. 5 s, drain on JVM shutdown. */
  public static SubscribeOptions defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  public int concurrency() { return concurrency; }
  public int prefetch() { return prefetch; }
  public String consumerName() { return consumerName; }
  public String appVersion() { return appVersion; }
  public Duration drainTimeout() { return drainTimeout; }
  public Duration reconnectBase() { return backoff.base(); }
  public Duration reconnectMax() { return backoff.max(); }
  public int maxReceiveBytes() { return maxReceiveBytes; }
  public boolean drainOnShutdown() { return drainOnShutdown; }
  public Duration shutdownGrace() { return shutdownGrace; }
  /** The callback run once the drain has ended, or null. */
  public Runnable onDrained() { return onDrained; }
  public System.Logger logger() { return logger; }
  /** The provider of the handler spans, or null for the global one. */
  public TracerProvider tracerProvider() { return tracerProvider; }
  public Stats stats() { return stats; }

  Backoff backoff() { return backoff; }

  /** Deliveries outstanding at most: running plus prefetched. It is the initial credit and Start.max_in_flight. */
  int credit() { return concurrency + prefetch; }

  /** Builds {@link SubscribeOptions}; {@link #build()} rejects nonsense once, saying what to use. */
  public static final class Builder {
    private int concurrency = DEFAULT_CONCURRENCY;
    private int prefetch = -1;
    private String consumerName = "";
    private String appVersion = "";
    private Duration drainTimeout = DEFAULT_DRAIN_TIMEOUT;
    private Duration reconnectBase = DEFAULT_RECONNECT_BASE;
    private Duration reconnectMax = DEFAULT_RECONNECT_MAX;
    private int maxReceiveBytes = DEFAULT_MAX_RECEIVE_BYTES;
    private boolean drainOnShutdown = true;
    private Duration shutdownGrace = DEFAULT_SHUTDOWN_GRACE;
    private Runnable onDrained;
    private System.Logger logger;
    private TracerProvider tracerProvider;
    private Stats stats;

    private Builder() {}

    /** Handlers running at once (default 64): the concurrency limit. */
    public Builder concurrency(int n) { concurrency = n; return this; }

    /**
     * Deliveries received ahead, beyond those running (default: the
     * concurrency). 0 disables prefetching: a delivery is only asked for when
     * a handler finishes. Their leases are extended while they wait.
     */
    public Builder prefetch(int n) { prefetch = Math.max(n, 0); return this; }

    /** This consumer's name in the sidecar's logs and metrics (for example the pod name). */
    public Builder consumerName(String name) { consumerName = name == null ? "" : name; return this; }

    /** The application's version, recorded in dead-letter entries. */
    public Builder appVersion(String v) { appVersion = v == null ? "" : v; return this; }

    /**
     * How long the drain waits for running handlers (default 30 s); then they
     * are interrupted. Keep it below the pod's termination grace period.
     */
    public Builder drainTimeout(Duration d) { drainTimeout = Objects.requireNonNull(d); return this; }

    /** The reconnect delay: exponential from base up to max, with full jitter (default 100 ms, 5 s). */
    public Builder reconnectBackoff(Duration base, Duration max) {
      reconnectBase = Objects.requireNonNull(base);
      reconnectMax = Objects.requireNonNull(max);
      return this;
    }

    /**
     * The largest delivery frame accepted (gRPC's max inbound message size of
     * the stream; default 65 MiB), stated in Start.max_receive_bytes so that
     * the sidecar keeps its frames below it. It needs to exceed the sidecar's
     * limits.max_message_bytes by 1 MiB.
     */
    public Builder maxReceiveBytes(int n) { maxReceiveBytes = n; return this; }

    /**
     * Whether a JVM shutdown (SIGTERM, Ctrl-C, System.exit) drains the
     * subscription first (default true): a shutdown hook closes it.
     */
    public Builder drainOnShutdown(boolean on) { drainOnShutdown = on; return this; }

    /**
     * How long a JVM shutdown waits, once the drain has ended, for each thread
     * that was waiting in {@link Subscription#awaitTermination()} to end
     * (default 5 s): the JVM halts when its shutdown hooks return, so without
     * this wait the app's code after awaitTermination (its cleanup) was cut
     * off. Zero: do not wait. A thread that lives on (a pool's) is waited for
     * the whole grace; cleanup that runs there belongs in {@link #onDrained}.
     */
    public Builder shutdownGrace(Duration d) { shutdownGrace = Objects.requireNonNull(d); return this; }

    /**
     * Runs once the subscription has ended and its drain is over (after
     * {@link Subscription#close()}, a JVM shutdown or a refusal), on the
     * SDK's thread, before close() and awaitTermination() return: the place
     * for the app's own cleanup (closing a pool, flushing a batch). On a JVM
     * shutdown it runs inside the SDK's shutdown hook, so the JVM waits for
     * it; keep it within the pod's termination grace period. An exception it
     * throws is logged (ERROR) and does not change how the subscription ended.
     */
    public Builder onDrained(Runnable callback) { onDrained = callback; return this; }

    /** Where reconnects and rejected settlements (WARNING) and handler errors go (default System.getLogger("dev.spool")). */
    public Builder logger(System.Logger l) { logger = l; return this; }

    /**
     * Where the handler spans go (default: the global OpenTelemetry, followed
     * when the app sets it later). See "Tracing" in docs/sdk-java.md.
     */
    public Builder tracerProvider(TracerProvider tp) { tracerProvider = tp; return this; }

    /** Counters the caller can read at any time. */
    public Builder stats(Stats s) { stats = s; return this; }

    public SubscribeOptions build() {
      if (concurrency < 1 || concurrency > MAX_CONCURRENCY) {
        throw new IllegalArgumentException("spool: concurrency " + concurrency + ": use 1.." + MAX_CONCURRENCY);
      }
      int pf = prefetch < 0 ? concurrency : prefetch;
      if ((long) concurrency + pf > MAX_CREDIT) {
        throw new IllegalArgumentException("spool: prefetch " + pf + ": concurrency + prefetch must be at most " + MAX_CREDIT);
      }
      if (shutdownGrace.isNegative()) {
        throw new IllegalArgumentException("spool: shutdownGrace " + shutdownGrace + ": use zero (do not wait) or a positive duration");
      }
      if (drainTimeout.isNegative()) {
        throw new IllegalArgumentException("spool: drainTimeout " + drainTimeout + ": use zero (do not wait) or a positive duration");
      }
      if (reconnectBase.isZero() || reconnectBase.isNegative() || reconnectMax.compareTo(reconnectBase) < 0) {
        throw new IllegalArgumentException("spool: reconnectBackoff(" + reconnectBase + ", " + reconnectMax + "): base must be positive and max at least base");
      }
      if (maxReceiveBytes < MIN_RECEIVE_BYTES || maxReceiveBytes > MAX_RECEIVE_BYTES) {
        throw new IllegalArgumentException("spool: maxReceiveBytes " + maxReceiveBytes + ": use " + MIN_RECEIVE_BYTES + ".." + MAX_RECEIVE_BYTES
            + ", at least the sidecar's limits.max_message_bytes plus 1 MiB");
      }
      return new SubscribeOptions(this);
    }
  }
}
