package dev.spool;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

/**
 * A consumer process for the drain test: records when each handler starts
 * and finishes, one line each, and drains on SIGTERM (the SDK's shutdown
 * hook), then does its own cleanup after awaitTermination and records it.
 * Arguments: sidecar address, record file, work in milliseconds.
 */
public final class DrainApp {
  public static void main(String[] args) throws Exception {
    String addr = args[0];
    long workMs = Long.parseLong(args[2]);
    try (Writer out = new OutputStreamWriter(new FileOutputStream(args[1], true), StandardCharsets.UTF_8);
        Client client = Client.connect(addr)) {
      Subscription sub = client.subscribe("workers", List.of("orders"), m -> {
        line(out, "start " + m.id() + " " + m.attempt());
        Thread.sleep(workMs); // sleep-ok: the work
        line(out, "done " + m.id() + " " + m.attempt());
      }, SubscribeOptions.builder().concurrency(4).prefetch(4).drainTimeout(Duration.ofSeconds(10))
          // Far above the test's 30 s wait for the exit: the hook must see main end, not time out.
          .shutdownGrace(Duration.ofMinutes(2))
          .onDrained(() -> {
            try {
              line(out, "cleanup on-drained 0");
            } catch (IOException e) {
              throw new java.io.UncheckedIOException(e);
            }
          }).build());
      sub.awaitTermination();
      // The app's own cleanup after the drain (flushing, closing a pool): it
      // must run to the end on SIGTERM too.
      Thread.sleep(500); // sleep-ok: the cleanup's work
      line(out, "cleanup after-await 0");
    }
  }

  private static void line(Writer out, String s) throws IOException {
    synchronized (out) {
      out.write(s + "\n");
      out.flush();
    }
  }
}
