package dev.spool;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Exponential backoff with full jitter: attempt n (from 0) waits a uniformly
 * random time in [0, min(max, base * 2^n)).
 *
 * @param base the ceiling of the first attempt
 * @param max the largest ceiling
 */
record Backoff(Duration base, Duration max) {
  Backoff {
    Objects.requireNonNull(base);
    Objects.requireNonNull(max);
  }

  /** Pure: draw is a uniform number in [0, 1). */
  Duration delay(int attempt, double draw) {
    long ceiling = base.toNanos();
    long cap = max.toNanos();
    for (int i = 0; i < attempt && ceiling < cap; i++) {
      ceiling *= 2;
    }
    ceiling = Math.min(ceiling, cap);
    return Duration.ofNanos((long) (draw * ceiling));
  }

  Duration next(int attempt) {
    return delay(attempt, ThreadLocalRandom.current().nextDouble());
  }
}
