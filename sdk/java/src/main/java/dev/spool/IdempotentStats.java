package dev.spool;

import java.util.concurrent.atomic.AtomicLong;

/** Counts what an {@link Idempotent} handler did; read it at any time. */
public final class IdempotentStats {
  final AtomicLong processed = new AtomicLong();
  final AtomicLong duplicates = new AtomicLong();
  final AtomicLong failed = new AtomicLong();

  /** Messages whose work and id record committed. */
  public long processed() { return processed.get(); }

  /** Deliveries skipped and acked: the id was recorded, the work had committed before. */
  public long duplicates() { return duplicates.get(); }

  /** Deliveries rolled back: the work threw, or the database failed (begin, insert, commit). */
  public long failed() { return failed.get(); }

  @Override
  public String toString() {
    return "IdempotentStats{processed=" + processed + ", duplicates=" + duplicates + ", failed=" + failed + "}";
  }
}
