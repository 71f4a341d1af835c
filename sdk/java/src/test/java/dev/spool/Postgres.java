package dev.spool;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A throwaway PostgreSQL server: initdb into a temporary directory and
 * postgres on a free port (Debian's postgresql package, in
 * /usr/lib/postgresql/N/bin). As root it runs as the postgres user:
 * PostgreSQL refuses to run as root.
 */
final class Postgres implements AutoCloseable {
  final String url;
  private final Process proc;
  private final Path dir;
  private final Path data;

  /** The newest /usr/lib/postgresql/N/bin with initdb and postgres, or null. */
  static Path findBin() {
    Path base = Path.of("/usr/lib/postgresql");
    if (!Files.isDirectory(base)) {
      return null;
    }
    try (Stream<Path> vs = Files.list(base)) {
      return vs.map(v -> v.resolve("bin"))
          .filter(b -> Files.isExecutable(b.resolve("initdb")) && Files.isExecutable(b.resolve("postgres")))
          .max((a, b) -> Integer.compare(version(a), version(b)))
          .orElse(null);
    } catch (IOException e) {
      return null;
    }
  }

  private static int version(Path bin) {
    try {
      return Integer.parseInt(bin.getParent().getFileName().toString());
    } catch (NumberFormatException e) {
      return 0;
    }
  }

  private static boolean asRoot() {
    return "root".equals(System.getProperty("user.name"));
  }

  private static List<String> cmd(String... args) {
    List<String> c = new ArrayList<>();
    if (asRoot()) {
      c.addAll(List.of("runuser", "-u", "postgres", "--"));
    }
    c.addAll(List.of(args));
    return c;
  }

  Postgres(Path bin) {
    dir = Harness.tmpDir("pg");
    data = dir.resolve("data");
    if (asRoot()) {
      Harness.run(dir, List.of("chown", "postgres", dir.toString()));
    }
    try {
      Process init = new ProcessBuilder(cmd(bin.resolve("initdb").toString(), "-D", data.toString(), "-U", "spool", "--auth=trust", "-E", "UTF8", "--no-sync"))
          .redirectErrorStream(true).redirectOutput(dir.resolve("initdb.log").toFile()).start();
      if (!init.waitFor(120, TimeUnit.SECONDS) || init.exitValue() != 0) {
        throw new AssertionError("initdb failed:\n" + Files.readString(dir.resolve("initdb.log")));
      }
      int port = Harness.freePort();
      proc = new ProcessBuilder(cmd(bin.resolve("postgres").toString(), "-D", data.toString(), "-p", String.valueOf(port), "-k", dir.toString(),
          "-h", "127.0.0.1", "-c", "fsync=off"))
          .redirectErrorStream(true).redirectOutput(dir.resolve("postgres.log").toFile()).start();
      url = "jdbc:postgresql://127.0.0.1:" + port + "/postgres?user=spool";
    } catch (IOException e) {
      throw new AssertionError("starting PostgreSQL: " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted");
    }
    Eventually.await("postgres accepting connections", Duration.ofSeconds(30), () -> {
      if (!proc.isAlive()) {
        throw new AssertionError("postgres exited:\n" + Files.readString(dir.resolve("postgres.log")));
      }
      try (Connection c = DriverManager.getConnection(url)) {
        return c.isValid(1);
      } catch (SQLException e) {
        return false;
      }
    });
  }

  PGSimpleDataSource dataSource() {
    PGSimpleDataSource ds = new PGSimpleDataSource();
    ds.setURL(url);
    return ds;
  }

  @Override
  public void close() {
    // Signal the postmaster itself (runuser does not pass signals on): SIGINT is a fast shutdown.
    try {
      String pid = Files.readAllLines(data.resolve("postmaster.pid")).get(0).trim();
      new ProcessBuilder("kill", "-INT", pid).start().waitFor(10, TimeUnit.SECONDS);
      proc.waitFor(20, TimeUnit.SECONDS);
    } catch (IOException | InterruptedException e) {
      proc.destroyForcibly();
    }
    Harness.deleteTree(dir.toFile());
  }
}
