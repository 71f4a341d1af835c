import dev.spool.Client;
import dev.spool.DeadLetter;
import dev.spool.OutMessage;
import dev.spool.PublishResult;
import dev.spool.Release;
import dev.spool.Retry;
import dev.spool.SpoolException;
import dev.spool.Stats;
import dev.spool.SubscribeOptions;
import dev.spool.Subscription;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Java SDK's conformance app: the harness in sdk/conformance starts it
 * with a JSON spec as its only argument and reads one JSON event per line
 * from its stdout. Every SDK has the same app (sdk/conformance/apps/<lang>);
 * sdk/conformance/README.md is the contract. The spec is flat enough to be
 * read with a few patterns (the SDK brings no JSON library).
 */
public final class App {
  private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

  public static void main(String[] args) throws Exception {
    String spec = args[0];
    Client client = Client.connect(str(spec, "addr"));
    if (str(spec, "mode").equals("consume")) {
      consume(client, spec);
    } else {
      publish(client, spec);
      client.close();
    }
  }

  static void consume(Client client, String spec) throws Exception {
    Map<String, Integer> seen = new ConcurrentHashMap<>();
    long delayMs = num(spec, "delay_ms", 0);
    Stats stats = new Stats();
    Subscription sub = client.subscribe(str(spec, "group"), strs(spec, "topics"), m -> {
      int n = seen.merge(m.id(), 1, Integer::sum);
      Map<String, Object> start = new LinkedHashMap<>();
      start.put("ev", "start");
      start.put("id", m.id());
      start.put("key", m.keyUtf8());
      start.put("payload", m.payloadUtf8());
      start.put("attempt", m.attempt());
      start.put("partition", m.partition());
      start.put("offset", m.offset());
      start.put("token", m.fencingToken());
      start.put("last_error", m.lastError());
      start.put("time_ms", System.currentTimeMillis());
      emit(start);
      if (delayMs > 0) {
        try {
          Thread.sleep(delayMs); // sleep-ok: the handler's work
        } catch (InterruptedException e) {
          finish(m.id(), m.keyUtf8(), m.attempt(), "cancelled");
          throw e;
        }
      }
      Map<String, String> d = directives(m.payloadUtf8());
      if (d.containsKey("release") && n <= Integer.parseInt(d.get("release"))) {
        finish(m.id(), m.keyUtf8(), m.attempt(), "release");
        throw new Release();
      }
      if (d.containsKey("fail") && m.attempt() <= Integer.parseInt(d.get("fail"))) {
        finish(m.id(), m.keyUtf8(), m.attempt(), "retry");
        String err = "fail attempt " + m.attempt();
        if (d.containsKey("retry_after")) {
          throw new Retry(Duration.ofMillis(Long.parseLong(d.get("retry_after"))), err);
        }
        throw new RuntimeException(err);
      }
      if (d.containsKey("dead")) {
        finish(m.id(), m.keyUtf8(), m.attempt(), "dead");
        throw new DeadLetter(d.get("dead"));
      }
      finish(m.id(), m.keyUtf8(), m.attempt(), "ack");
    }, SubscribeOptions.builder()
        .concurrency((int) num(spec, "concurrency", 1))
        .prefetch((int) num(spec, "prefetch", 0))
        .drainTimeout(Duration.ofMillis(num(spec, "drain_timeout_ms", 30000)))
        .appVersion("conformance-java")
        .stats(stats)
        // The app's own hook drains, writes the exit event and exits 0.
        .drainOnShutdown(false)
        .build());
    AtomicBoolean ended = new AtomicBoolean();
    Runnable end = () -> {
      if (!ended.compareAndSet(false, true)) {
        return;
      }
      int code = 0;
      try {
        sub.close();
        Map<String, Object> exit = new LinkedHashMap<>();
        exit.put("ev", "exit");
        exit.put("released", stats.released());
        exit.put("settle_errors", stats.settleErrors());
        emit(exit);
      } catch (SpoolException e) {
        emit(errorEvent("subscribe_error", e));
        code = 1;
      }
      client.close();
      Runtime.getRuntime().halt(code);
    };
    Runtime.getRuntime().addShutdownHook(new Thread(end, "conformance-drain"));
    try {
      sub.awaitTermination();
    } catch (SpoolException e) {
      emit(errorEvent("subscribe_error", e));
      Runtime.getRuntime().halt(1);
    }
  }

  static void publish(Client client, String spec) {
    List<OutMessage> msgs = new ArrayList<>();
    Matcher m = Pattern.compile("\\{\"id\":\"([^\"]*)\",\"key\":\"([^\"]*)\",\"payload\":\"([^\"]*)\"(?:,\"payload_bytes\":(\\d+))?\\}").matcher(spec);
    while (m.find()) {
      String payload = m.group(4) != null ? "x".repeat(Integer.parseInt(m.group(4))) : m.group(3);
      msgs.add(OutMessage.of(payload).withId(m.group(1)).withKey(m.group(2)));
    }
    try {
      List<PublishResult> rs = client.publishBatch(str(spec, "topic"), msgs);
      StringBuilder b = new StringBuilder("{\"ev\":\"published\",\"results\":[");
      for (int i = 0; i < rs.size(); i++) {
        PublishResult r = rs.get(i);
        b.append(i > 0 ? "," : "").append("{\"id\":").append(quote(r.id())).append(",\"partition\":").append(r.partition())
            .append(",\"offset\":").append(r.offset()).append('}');
      }
      OUT.println(b.append("]}"));
    } catch (SpoolException e) {
      emit(errorEvent("publish_error", e));
    }
  }

  static void finish(String id, String key, int attempt, String outcome) {
    Map<String, Object> ev = new LinkedHashMap<>();
    ev.put("ev", "finish");
    ev.put("id", id);
    ev.put("key", key);
    ev.put("attempt", attempt);
    ev.put("outcome", outcome);
    ev.put("time_ms", System.currentTimeMillis());
    emit(ev);
  }

  static Map<String, Object> errorEvent(String kind, SpoolException e) {
    Map<String, Object> ev = new LinkedHashMap<>();
    ev.put("ev", kind);
    ev.put("type", e.getClass().getSimpleName());
    ev.put("code", String.valueOf(e.code()));
    ev.put("reason", e.reason());
    ev.put("message", String.valueOf(e.getMessage()));
    return ev;
  }

  static Map<String, String> directives(String payload) {
    Map<String, String> d = new HashMap<>();
    for (String w : payload.trim().split("\\s+")) {
      int i = w.indexOf('=');
      d.put(i < 0 ? w : w.substring(0, i), i < 0 ? "" : w.substring(i + 1));
    }
    return d;
  }

  static void emit(Map<String, Object> ev) {
    StringBuilder b = new StringBuilder("{");
    for (Map.Entry<String, Object> e : ev.entrySet()) {
      if (b.length() > 1) {
        b.append(',');
      }
      b.append(quote(e.getKey())).append(':');
      Object v = e.getValue();
      b.append(v instanceof Number ? v.toString() : quote(String.valueOf(v)));
    }
    synchronized (OUT) {
      OUT.println(b.append('}'));
    }
  }

  static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }

  static String str(String spec, String name) {
    Matcher m = Pattern.compile("\"" + name + "\":\"([^\"]*)\"").matcher(spec);
    return m.find() ? m.group(1) : "";
  }

  static long num(String spec, String name, long def) {
    Matcher m = Pattern.compile("\"" + name + "\":(\\d+)").matcher(spec);
    return m.find() ? Long.parseLong(m.group(1)) : def;
  }

  static List<String> strs(String spec, String name) {
    Matcher m = Pattern.compile("\"" + name + "\":\\[([^\\]]*)\\]").matcher(spec);
    List<String> out = new ArrayList<>();
    if (m.find()) {
      Matcher q = Pattern.compile("\"([^\"]*)\"").matcher(m.group(1));
      while (q.find()) {
        out.add(q.group(1));
      }
    }
    return out;
  }
}
