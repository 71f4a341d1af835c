package dev.spool;

/**
 * When to extend a delivery's lease: at 2/3 of the lease (from the
 * delivery's lease deadline), then every 2/3 of the visibility timeout, from
 * its receipt until its settlement. Pure.
 *
 * @param firstMs delay from now to the first extension
 * @param everyMs delay between later extensions
 */
record LeasePlan(long firstMs, long everyMs) {
  /** Bounds how often one delivery's lease is extended. */
  static final long MIN_EVERY_MS = 5;

  /**
   * The plan for a delivery received at nowMs, or null without lease
   * information (no deadline and no visibility timeout: nothing to extend).
   */
  static LeasePlan of(long nowMs, long deadlineMs, long visibilityMs) {
    long vis = visibilityMs;
    long first;
    if (deadlineMs > 0) {
      long lease = deadlineMs - nowMs;
      first = Math.max(lease * 2 / 3, 0);
      if (vis <= 0) {
        vis = lease; // the visibility timeout unknown: assume an extension grants as much again
      }
    } else if (vis > 0) {
      first = vis * 2 / 3;
    } else {
      return null;
    }
    return new LeasePlan(first, Math.max(vis * 2 / 3, MIN_EVERY_MS));
  }
}
