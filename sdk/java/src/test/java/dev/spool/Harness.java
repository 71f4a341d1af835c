package dev.spool;

import dev.spool.v1.AdminServiceGrpc;
import dev.spool.v1.DeadLetter;
import dev.spool.v1.ListGroupsRequest;
import dev.spool.v1.PeekDeadLettersRequest;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * Real processes for the tests: spoold built from this repository (the
 * spoold.bin property, else `go build` into target/), redis-server, free
 * ports.
 */
final class Harness {
  private Harness() {}

  static final Path REPO = Path.of(System.getProperty("spool.repo", "../..")).toAbsolutePath().normalize();
  static final Path TARGET = Path.of(System.getProperty("spool.target", "target")).toAbsolutePath().normalize();
  private static String spooldBin;

  static synchronized String spoold() {
    if (spooldBin != null) {
      return spooldBin;
    }
    String given = System.getProperty("spoold.bin", "");
    if (given.isEmpty()) {
      given = System.getenv().getOrDefault("SPOOLD", "");
    }
    if (!given.isEmpty()) {
      return spooldBin = given;
    }
    Path out = TARGET.resolve("spoold");
    run(REPO, List.of("go", "build", "-o", out.toString(), "./cmd/spoold"));
    return spooldBin = out.toString();
  }

  static void run(Path dir, List<String> cmd) {
    try {
      Process p = new ProcessBuilder(cmd).directory(dir.toFile()).inheritIO().start();
      if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new AssertionError(String.join(" ", cmd) + " failed");
      }
    } catch (IOException e) {
      throw new AssertionError(String.join(" ", cmd) + ": " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted: " + cmd);
    }
  }

  /**
   * The ports [lo, hi) free ports are picked from: below the kernel's
   * ephemeral range (Linux: 32768-60999), whose ports any outgoing connection
   * may take as its local port. A port from new ServerSocket(0) is an
   * ephemeral one: between the close and spoold's or redis-server's bind, a
   * connection on the machine may take it ("address already in use"). Above
   * the range when there is no room below it.
   */
  private static int[] portWindow() {
    int start = 32768;
    int end = 60999;
    try {
      String[] f = Files.readString(Path.of("/proc/sys/net/ipv4/ip_local_port_range")).trim().split("\\s+");
      if (f.length == 2) {
        start = Integer.parseInt(f[0]);
        end = Integer.parseInt(f[1]);
      }
    } catch (IOException | NumberFormatException e) {
      // not Linux: 32768 is below macOS's range too
    }
    if (start - 10000 >= 1000) {
      return new int[] {10000, start};
    }
    if (65536 - (end + 1) >= 1000) {
      return new int[] {end + 1, 65536};
    }
    throw new AssertionError("the ephemeral port range " + start + "-" + end
        + " leaves no room for test servers: narrow it (sysctl net.ipv4.ip_local_port_range)");
  }

  /**
   * n distinct ports on 127.0.0.1 that are free now, outside the ephemeral
   * range (see portWindow); each is held until all are found.
   */
  static int[] freePorts(int n) {
    int[] w = portWindow();
    List<ServerSocket> held = new ArrayList<>();
    int[] ports = new int[n];
    int found = 0;
    try {
      for (int i = 0; i < 200 && found < n; i++) {
        int port = ThreadLocalRandom.current().nextInt(w[0], w[1]);
        try {
          held.add(new ServerSocket(port, 0, java.net.InetAddress.getLoopbackAddress()));
        } catch (IOException e) {
          continue; // taken
        }
        ports[found++] = port;
      }
    } finally {
      for (ServerSocket s : held) {
        try {
          s.close();
        } catch (IOException e) {
          // closing a listener that never accepted
        }
      }
    }
    if (found < n) {
      throw new AssertionError("found " + found + " of " + n + " free ports in " + w[0] + "-" + (w[1] - 1) + " on 127.0.0.1");
    }
    return ports;
  }

  static int freePort() {
    return freePorts(1)[0];
  }

  static Path tmpDir(String prefix) {
    try {
      return Files.createTempDirectory("spool-java-" + prefix + "-");
    } catch (IOException e) {
      throw new AssertionError(e);
    }
  }

  /** The classpath of the tests, for child JVMs (surefire's, else this JVM's). */
  static String testClasspath() {
    String cp = System.getProperty("surefire.test.class.path");
    return cp != null && !cp.isEmpty() ? cp : System.getProperty("java.class.path");
  }

  /**
   * The java launcher of this JVM, set for a quick start (the child JVMs of
   * the tests are short-lived apps: C1 only, the serial collector).
   */
  static List<String> java() {
    return List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC");
  }

  /** orders (4 partitions) with a subscription of group workers; ordering key. */
  static String ordersConfig(String visibility, int maxAttempts, String redis) {
    return ordersConfig(visibility, maxAttempts, redis, "key");
  }

  static String ordersConfig(String visibility, int maxAttempts, String redis, String ordering) {
    String ledger = redis == null ? "" : "redis:\n  addrs: [\"" + redis + "\"]\n";
    return ledger
        + "topics:\n"
        + "  - name: orders\n"
        + "    partitions: 4\n"
        + "subscriptions:\n"
        + "  - topic: orders\n"
        + "    group: workers\n"
        + "    max_attempts: " + maxAttempts + "\n"
        + "    visibility_timeout: " + visibility + "\n"
        + "    ordering: " + ordering + "\n"
        + "    backoff: {base: 20ms, max: 100ms, multiplier: 2}\n";
  }

  /** A spoold process with its own config, data dir and free ports. */
  static final class Spoold implements AutoCloseable {
    final Path dir = tmpDir("spoold");
    final Path logPath = dir.resolve("spoold.log");
    private final String config; // null: --dev
    private final boolean unix;
    private String nodeExtra = ""; // more settings of the node section (indented YAML lines)
    String app;
    String admin;
    private Process proc;
    private ManagedChannel adminChannel;

    private Spoold(String config, boolean unix) {
      this.config = config;
      this.unix = unix;
    }

    /** The unix socket spoold also listens on (startWithUnixSocket), as an address. */
    String unixAddr() {
      return "unix://" + dir.resolve("app.sock");
    }

    /** spoold --config with this YAML (without the node section), on a fresh data dir. */
    static Spoold start(String config) {
      Spoold s = new Spoold(config, false);
      s.startFresh();
      return s;
    }

    /** start with more settings of the node section (indented YAML lines, e.g. "  dev: true\n"). */
    static Spoold start(String config, String nodeExtra) {
      Spoold s = new Spoold(config, false);
      s.nodeExtra = nodeExtra;
      s.startFresh();
      return s;
    }

    /** start, also listening on a unix socket (unixAddr()). */
    static Spoold startWithUnixSocket(String config) {
      Spoold s = new Spoold(config, true);
      s.startFresh();
      return s;
    }

    /** spoold --dev (topic "demo", group "demo-app") on free ports. */
    static Spoold dev() {
      Spoold s = new Spoold(null, false);
      s.startFresh();
      return s;
    }

    private void pickPorts() {
      int[] ports = freePorts(2);
      app = "127.0.0.1:" + ports[0];
      admin = "127.0.0.1:" + ports[1];
      if (config != null) {
        String listen = "\"" + app + "\"" + (unix ? ", \"" + unixAddr() + "\"" : "");
        String node = "node:\n  id: java\n  data_dir: " + dir.resolve("data") + "\n  app_listen: [" + listen + "]\n  admin_listen: \"" + admin
            + "\"\n  drain_timeout: 5s\n" + nodeExtra;
        try {
          Files.writeString(dir.resolve("spool.yaml"), node + config);
        } catch (IOException e) {
          throw new AssertionError(e);
        }
      }
    }

    private List<String> args() {
      List<String> a = new ArrayList<>(List.of(spoold()));
      if (config == null) {
        a.addAll(List.of("--dev", "--app-listen", app, "--admin-listen", admin));
      } else {
        a.addAll(List.of("--config", dir.resolve("spool.yaml").toString()));
      }
      return a;
    }

    /** start, on other free ports if another process took ours meanwhile. */
    private void startFresh() {
      for (int i = 0; ; i++) {
        pickPorts();
        try {
          run();
          return;
        } catch (AssertionError e) {
          if (i >= 2 || !log().contains("address already in use")) {
            throw e;
          }
        }
      }
    }

    private void run() {
      try {
        proc = new ProcessBuilder(args()).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(logPath.toFile())).start();
      } catch (IOException e) {
        throw new AssertionError("starting spoold: " + e, e);
      }
      Eventually.await("spoold ready", Duration.ofSeconds(20), () -> {
        if (!proc.isAlive()) {
          throw new AssertionError("spoold exited during start-up with code " + proc.exitValue() + ":\n" + log());
        }
        return httpStatus(admin, "/readyz") == 200;
      });
    }

    String log() {
      try {
        List<String> lines = Files.readAllLines(logPath, StandardCharsets.UTF_8);
        return String.join("\n", lines.subList(Math.max(0, lines.size() - 60), lines.size()));
      } catch (IOException e) {
        return "";
      }
    }

    /** SIGTERM and a graceful exit (code 0). */
    void stop() {
      proc.destroy();
      try {
        if (!proc.waitFor(20, TimeUnit.SECONDS)) {
          throw new AssertionError("spoold did not exit within 20 s of SIGTERM:\n" + log());
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted");
      }
      if (proc.exitValue() != 0) {
        throw new AssertionError("spoold exited with code " + proc.exitValue() + " after SIGTERM:\n" + log());
      }
    }

    void restart() {
      stop();
      run();
    }

    /** Starts spoold again after {@link #stop()}, on the same addresses and data, and waits until it is ready. */
    void startAgain() {
      run();
    }

    AdminServiceGrpc.AdminServiceBlockingStub admin() {
      if (adminChannel == null) {
        adminChannel = Grpc.newChannelBuilder(admin, InsecureChannelCredentials.create()).build();
      }
      return AdminServiceGrpc.newBlockingStub(adminChannel).withDeadlineAfter(10, TimeUnit.SECONDS);
    }

    List<DeadLetter> deadLetters(String group, String topic) {
      return admin().peekDeadLetters(PeekDeadLettersRequest.newBuilder().setGroup(group).setTopic(topic).build()).getEntriesList();
    }

    /** Messages of group not yet processed, plus those in flight. */
    long backlog(String group) {
      long n = 0;
      for (var g : admin().listGroups(ListGroupsRequest.newBuilder().setGroup(group).build()).getGroupsList()) {
        for (var p : g.getPartitionsList()) {
          n += p.getLagMessages() + p.getInFlight();
        }
      }
      return n;
    }

    @Override
    public void close() {
      if (adminChannel != null) {
        adminChannel.shutdownNow();
      }
      if (proc != null && proc.isAlive()) {
        proc.destroyForcibly();
        try {
          proc.waitFor(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      deleteTree(dir.toFile());
    }
  }

  /** The status of GET path at hostPort (HTTP/1.0 over a plain socket: cheaper than java.net.http's first use), or 0. */
  static int httpStatus(String hostPort, String path) {
    int colon = hostPort.lastIndexOf(':');
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1))), 1000);
      s.setSoTimeout(1000);
      s.getOutputStream().write(("GET " + path + " HTTP/1.0\r\nHost: " + hostPort + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      String status = new String(s.getInputStream().readNBytes(12), StandardCharsets.US_ASCII); // "HTTP/1.1 200"
      return status.length() == 12 ? Integer.parseInt(status.substring(9, 12)) : 0;
    } catch (IOException | NumberFormatException e) {
      return 0;
    }
  }

  /** A redis-server on a free port, without persistence. */
  static final class Redis implements AutoCloseable {
    final String addr;
    private final Process proc;
    private final Path dir = tmpDir("redis");

    Redis() {
      int port = freePort();
      addr = "127.0.0.1:" + port;
      try {
        proc = new ProcessBuilder("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir.toString())
            .redirectErrorStream(true).redirectOutput(dir.resolve("redis.log").toFile()).start();
      } catch (IOException e) {
        throw new AssertionError("redis-server is not installed: run `make deps` (scripts/ensure-deps.sh): " + e, e);
      }
      Eventually.await("redis-server answering PING", Duration.ofSeconds(10), () -> ping(port));
    }

    private static boolean ping(int port) {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
        s.setSoTimeout(1000);
        OutputStream out = s.getOutputStream();
        out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
        out.flush();
        InputStream in = s.getInputStream();
        byte[] b = new byte[5];
        int n = in.readNBytes(b, 0, 5);
        return n == 5 && new String(b, StandardCharsets.US_ASCII).equals("+PONG");
      } catch (IOException e) {
        return false;
      }
    }

    @Override
    public void close() {
      proc.destroyForcibly();
      try {
        proc.waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      deleteTree(dir.toFile());
    }
  }

  /** Deletes a directory tree, ignoring what is gone. */
  static void deleteTree(File f) {
    File[] kids = f.listFiles();
    if (kids != null) {
      for (File k : kids) {
        deleteTree(k);
      }
    }
    f.delete();
  }
}
