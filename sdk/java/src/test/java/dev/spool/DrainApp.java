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
 * hook). Arguments: sidecar address, record file, work in milliseconds.
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
      }, SubscribeOptions.builder().concurrency(4).prefetch(4).drainTimeout(Duration.ofSeconds(10)).build());
      sub.awaitTermination();
    }
  }

  private static void line(Writer out, String s) throws IOException {
    synchronized (out) {
      out.write(s + "\n");
      out.flush();
    }
  }
}
