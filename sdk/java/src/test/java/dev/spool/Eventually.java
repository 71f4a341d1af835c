package dev.spool;

import java.time.Duration;
import java.util.concurrent.Callable;

/** Awaits a condition with a deadline instead of sleeping: polls every 20 ms. */
final class Eventually {
  private Eventually() {}

  static final Duration DEFAULT = Duration.ofSeconds(20);

  static void await(String what, Callable<Boolean> cond) {
    await(what, DEFAULT, cond);
  }

  static void await(String what, Duration timeout, Callable<Boolean> cond) {
    long deadline = System.nanoTime() + timeout.toNanos();
    Exception last = null;
    while (true) {
      try {
        if (Boolean.TRUE.equals(cond.call())) {
          return;
        }
      } catch (Exception e) {
        last = e;
      }
      if (System.nanoTime() > deadline) {
        AssertionError err = new AssertionError("timed out after " + timeout.toMillis() + " ms waiting for: " + what);
        if (last != null) {
          err.initCause(last);
        }
        throw err;
      }
      try {
        Thread.sleep(20); // sleep-ok: the polling interval of a condition wait
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted waiting for: " + what);
      }
    }
  }
}
