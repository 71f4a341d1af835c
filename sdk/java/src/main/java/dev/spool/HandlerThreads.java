package dev.spool;

import java.lang.reflect.Method;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Where handlers run: a virtual thread per handler where the JDK has them
 * (Java 21+, found at run time: the SDK is compiled for Java 17), else a pool
 * of at most {@code bound} platform threads. Either way the SDK itself keeps
 * at most {@code bound} handlers running.
 */
final class HandlerThreads {
  private HandlerThreads() {}

  private static final Method OF_VIRTUAL = method(Thread.class, "ofVirtual");
  private static final Method IS_VIRTUAL = method(Thread.class, "isVirtual");

  private static Method method(Class<?> c, String name, Class<?>... params) {
    try {
      return c.getMethod(name, params);
    } catch (NoSuchMethodException e) {
      return null;
    }
  }

  /** Whether this JDK has virtual threads. */
  static boolean virtualAvailable() {
    return OF_VIRTUAL != null;
  }

  /** Whether t is a virtual thread (false on a JDK without them). */
  static boolean isVirtual(Thread t) {
    if (IS_VIRTUAL == null) {
      return false;
    }
    try {
      return (Boolean) IS_VIRTUAL.invoke(t);
    } catch (ReflectiveOperationException e) {
      return false;
    }
  }

  /** An executor running each task on its own virtual thread, or a pool of bound daemon threads. */
  static ExecutorService executor(String namePrefix, int bound) {
    ExecutorService v = virtualExecutor(namePrefix);
    if (v != null) {
      return v;
    }
    ThreadPoolExecutor pool = new ThreadPoolExecutor(bound, bound, 30, TimeUnit.SECONDS, new LinkedBlockingQueue<>(), daemonFactory(namePrefix));
    pool.allowCoreThreadTimeOut(true);
    return pool;
  }

  // Thread.ofVirtual().name(prefix, 0).factory() and
  // Executors.newThreadPerTaskExecutor(factory), by reflection.
  private static ExecutorService virtualExecutor(String namePrefix) {
    if (OF_VIRTUAL == null) {
      return null;
    }
    try {
      Object builder = OF_VIRTUAL.invoke(null);
      Class<?> ofVirtual = Class.forName("java.lang.Thread$Builder$OfVirtual");
      builder = ofVirtual.getMethod("name", String.class, long.class).invoke(builder, namePrefix, 0L);
      ThreadFactory f = (ThreadFactory) Class.forName("java.lang.Thread$Builder").getMethod("factory").invoke(builder);
      Method perTask = java.util.concurrent.Executors.class.getMethod("newThreadPerTaskExecutor", ThreadFactory.class);
      return (ExecutorService) perTask.invoke(null, f);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null; // a JDK whose API differs: fall back to platform threads
    }
  }

  static ThreadFactory daemonFactory(String namePrefix) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, namePrefix + n.getAndIncrement());
      t.setDaemon(true);
      return t;
    };
  }
}
