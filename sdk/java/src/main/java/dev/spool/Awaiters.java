package dev.spool;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The threads an awaitTermination released, which a JVM shutdown waits for.
 *
 * <p>The JVM halts as soon as its shutdown hooks return. The SDK's hook
 * drains (a {@link Subscription}) or closes (a {@link HandlerServer}) and
 * returned, so the app's code after {@code awaitTermination()} (main's
 * cleanup) raced the halt. The hook now waits for those threads to end, up to
 * a grace. main's thread ends when main returns: the launcher detaches it
 * before it destroys the VM.
 */
final class Awaiters {
  private final Set<Thread> threads = ConcurrentHashMap.newKeySet();

  /** The calling thread waits in an awaitTermination. */
  Thread enter() {
    Thread me = Thread.currentThread();
    threads.add(me);
    return me;
  }

  /** The thread's wait did not end with the termination (a timeout, an interrupt): not waited for. */
  void leave(Thread t) {
    threads.remove(t);
  }

  /** Waits for every released thread to end, at most grace in all; logs at WARNING when one still runs. */
  void awaitAtShutdown(Duration grace, System.Logger log, String what) {
    long deadline = System.nanoTime() + grace.toNanos();
    for (Thread t : threads) {
      if (t == Thread.currentThread()) {
        continue;
      }
      long left = deadline - System.nanoTime();
      try {
        if (left > 0) {
          t.join(TimeUnit.NANOSECONDS.toMillis(left), (int) (left % 1_000_000));
        }
      } catch (InterruptedException e) {
        return;
      }
      if (t.isAlive()) {
        Log.log(log, Level.WARNING, "spool: shutdown: code after awaitTermination still runs after the grace; the JVM halts now",
            "of", what, "thread", t.getName(), "grace_ms", grace.toMillis());
        return;
      }
    }
  }
}
