package dev.spool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The README's example runs as written against `spoold --dev`. */
class ReadmeTest {
  @Test
  void readmeExampleRunsAgainstSpooldDev() throws Exception {
    String readme = Files.readString(Harness.REPO.resolve("sdk/java/README.md"));
    Matcher m = Pattern.compile("```java\n(.*?)```", Pattern.DOTALL).matcher(readme);
    assertTrue(m.find(), "no ```java block in README.md");
    String code = m.group(1);
    long lines = code.lines().filter(l -> !l.isBlank() && !l.strip().startsWith("//") && !l.startsWith("import ")).count();
    assertTrue(lines <= 16, "the README example grew to " + lines + " lines");
    Path dir = Harness.tmpDir("readme");
    Path file = dir.resolve("Example.java");
    Files.writeString(file, code);
    Path out = dir.resolve("out.txt");
    try (var s = Harness.Spoold.dev()) {
      List<String> cmd = new ArrayList<>(Harness.java());
      cmd.addAll(List.of("-cp", Harness.testClasspath(), file.toString()));
      ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile());
      pb.environment().put(Client.ENV_ADDR, s.app);
      Process p = pb.start();
      try {
        assertTrue(p.waitFor(90, TimeUnit.SECONDS), "the example did not finish:\n" + Files.readString(out));
        assertEquals(0, p.exitValue(), Files.readString(out));
      } finally {
        p.destroyForcibly();
      }
      assertTrue(Files.readString(out).lines().anyMatch(l -> l.equals("order-1001 hello attempt 2")), Files.readString(out));
    } finally {
      Harness.deleteTree(dir.toFile());
    }
  }
}
