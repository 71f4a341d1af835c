import dev.spool.Client;
import dev.spool.Stats;
import dev.spool.SubscribeOptions;
import dev.spool.Subscription;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Java SDK's consumer program for the loadtest (consumer_sdk: java):
 * loadtest/consumers/README.md is the contract. A JSON spec as the only
 * argument; "ready" once connected; subscribe at the first line on stdin;
 * the handled ids in batches on stdout ("i ID ID ..."); when stdin ends,
 * drain, write the ids left and an exit line, exit 0. The handler acks
 * (returns) after one append of the id under a lock.
 */
public final class Consumer {
  private static final OutputStream OUT = new FileOutputStream(FileDescriptor.out);
  /** A batch this large is written at once, without waiting for the timer. */
  private static final int FLUSH_CHARS = 64 << 10;

  private static final Object LOCK = new Object();
  private static StringBuilder buf = new StringBuilder(FLUSH_CHARS + 64);
  private static long handled;

  public static void main(String[] args) throws Exception {
    String spec = args[0];
    Client client = Client.connect(str(spec, "addr"));
    write("ready\n");
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    if (in.readLine() == null) {
      System.err.println("consumer: stdin ended before the start line");
      System.exit(1);
    }
    Stats stats = new Stats();
    SubscribeOptions.Builder opts = SubscribeOptions.builder()
        .concurrency((int) num(spec, "concurrency"))
        .consumerName(str(spec, "name"))
        .drainTimeout(Duration.ofSeconds(5))
        .stats(stats)
        .drainOnShutdown(false);
    long prefetch = num(spec, "prefetch");
    if (prefetch >= 0) {
      opts.prefetch((int) prefetch);
    }
    Subscription sub = client.subscribe(str(spec, "group"), List.of(str(spec, "topic")), m -> add(m.id()), opts.build());

    long reportMs = Math.max(1, num(spec, "report_ms"));
    Thread reporter = new Thread(() -> {
      try {
        while (true) {
          Thread.sleep(reportMs); // sleep-ok: the report interval
          flush();
        }
      } catch (InterruptedException e) {
        // stopped
      }
    }, "consumer-report");
    reporter.setDaemon(true);
    reporter.start();

    while (in.readLine() != null) {
      // stdin ending is the stop
    }
    int code = 0;
    try {
      sub.close();
    } catch (RuntimeException e) {
      System.err.println("consumer: " + e);
      code = 1;
    }
    reporter.interrupt();
    reporter.join();
    flush();
    write("{\"ev\":\"exit\",\"handled\":" + handled + ",\"settle_errors\":" + stats.settleErrors() + ",\"reconnects\":" + stats.reconnects() + "}\n");
    client.close();
    System.exit(code);
  }

  private static void add(String id) {
    synchronized (LOCK) {
      if (buf.length() == 0) {
        buf.append('i');
      }
      buf.append(' ').append(id);
      handled++;
      if (buf.length() >= FLUSH_CHARS) {
        flushLocked();
      }
    }
  }

  private static void flush() {
    synchronized (LOCK) {
      flushLocked();
    }
  }

  private static void flushLocked() {
    if (buf.length() == 0) {
      return;
    }
    buf.append('\n');
    write(buf.toString());
    buf.setLength(0);
  }

  private static void write(String s) {
    try {
      OUT.write(s.getBytes(StandardCharsets.US_ASCII));
      OUT.flush();
    } catch (IOException e) {
      System.err.println("consumer: stdout: " + e);
      System.exit(1);
    }
  }

  private static String str(String spec, String key) {
    Matcher m = Pattern.compile("\"" + key + "\":\"([^\"]*)\"").matcher(spec);
    if (!m.find()) {
      throw new IllegalArgumentException("spec has no string " + key + ": " + spec);
    }
    return m.group(1);
  }

  private static long num(String spec, String key) {
    Matcher m = Pattern.compile("\"" + key + "\":(-?\\d+)").matcher(spec);
    if (!m.find()) {
      throw new IllegalArgumentException("spec has no number " + key + ": " + spec);
    }
    return Long.parseLong(m.group(1));
  }
}
