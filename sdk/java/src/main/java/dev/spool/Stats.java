package dev.spool;

import java.util.concurrent.atomic.AtomicLong;

/** Counts what a subscription did; read it at any time (for example to export metrics). */
public final class Stats {
  final AtomicLong delivered = new AtomicLong();
  final AtomicLong acked = new AtomicLong();
  final AtomicLong retried = new AtomicLong();
  final AtomicLong deadLettered = new AtomicLong();
  final AtomicLong released = new AtomicLong();
  final AtomicLong dropped = new AtomicLong();
  final AtomicLong extended = new AtomicLong();
  final AtomicLong settleErrors = new AtomicLong();
  final AtomicLong reconnects = new AtomicLong();
  final AtomicLong handlerErrors = new AtomicLong();

  /** Deliveries received. */
  public long delivered() { return delivered.get(); }

  /** Settled ACK. */
  public long acked() { return acked.get(); }

  /** Settled RETRY (outcomes and other exceptions). */
  public long retried() { return retried.get(); }

  /** Settled DEAD_LETTER. */
  public long deadLettered() { return deadLettered.get(); }

  /** Handed back unstarted (drain, beyond credit) or by the handler ({@link Release}). */
  public long released() { return released.get(); }

  /** Settlements dropped because their stream broke (the sidecar released those deliveries). */
  public long dropped() { return dropped.get(); }

  /** Lease extensions sent. */
  public long extended() { return extended.get(); }

  /** Settlements the sidecar rejected (SettleError frames). */
  public long settleErrors() { return settleErrors.get(); }

  /** Streams opened after the first. */
  public long reconnects() { return reconnects.get(); }

  /** Handlers that threw something other than an outcome. */
  public long handlerErrors() { return handlerErrors.get(); }

  @Override
  public String toString() {
    return "Stats{delivered=" + delivered + ", acked=" + acked + ", retried=" + retried + ", deadLettered=" + deadLettered
        + ", released=" + released + ", dropped=" + dropped + ", extended=" + extended + ", settleErrors=" + settleErrors
        + ", reconnects=" + reconnects + ", handlerErrors=" + handlerErrors + "}";
  }
}
