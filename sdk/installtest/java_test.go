package installtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestJavaInstall: the jar built by docs/sdk-java.md's command, installed
// into a scratch local repository; a project outside the repository with the
// doc's consumer pom builds a producer and a worker against it, and they move
// ten messages through a real spoold. The worker runs on a JDK 21+ (the
// Temurin JDK, SPOOL_JAVA21_HOME) so that its handlers run on virtual threads.
func TestJavaInstall(t *testing.T) {
	selected(t, "java")
	sd := startSpoold(t)
	scratch := scratchDir(t)
	m2 := filepath.Join(scratch, "m2")
	settings := mavenSettings(t, scratch)
	mvn := []string{"-B", "-ntp", "-q", "-s", settings, "-Dmaven.repo.local=" + m2}
	// Maven's own JVM with the quick JIT only: these builds are short.
	mvnEnv := []string{"MAVEN_OPTS=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

	// docs/sdk-java.md, "Install", into the scratch local repository, built
	// from nothing in a scratch build directory (sdk/java/target/ keeps its
	// incremental state: a build against another repository's jars would
	// compile it all again, here and in the next build there).
	run(t, 5*time.Minute, repo, mvnEnv, "mvn", append(mvn, "-f", "sdk/java", "install", "-DskipTests",
		"-Dspool.build.directory="+filepath.Join(scratch, "sdk-build"))...)
	jar := filepath.Join(m2, "dev", "spool", "spool", version(t), "spool-"+version(t)+".jar")
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("mvn install put no %s: %v", jar, err)
	}

	app := filepath.Join(scratch, "shop")
	writeFile(t, filepath.Join(app, "pom.xml"), consumerPom(t))
	for _, f := range []string{"Producer.java", "Worker.java"} {
		b, err := os.ReadFile(filepath.Join("testdata", "java", "shop", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(app, "src", "main", "java", "shop", f), string(b))
	}
	run(t, 3*time.Minute, app, mvnEnv, "mvn", append(mvn, "package", "dependency:build-classpath", "-Dmdep.outputFile=cp.txt")...)
	cp, err := os.ReadFile(filepath.Join(app, "cp.txt"))
	if err != nil {
		t.Fatal(err)
	}
	classpath := filepath.Join(app, "target", "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(cp))

	java21 := os.Getenv("SPOOL_JAVA21_HOME")
	if java21 == "" {
		java21 = "/usr/lib/jvm/temurin-25-jdk-amd64"
	}
	workerJava := filepath.Join(java21, "bin", "java")
	if _, err := os.Stat(workerJava); err != nil {
		t.Fatalf("no JDK 21+ at %s (SPOOL_JAVA21_HOME): the worker runs on one to exercise virtual threads: %v", java21, err)
	}
	ids := orderIDs(10)
	env := []string{"SPOOL_ADDR=" + sd.app}
	worker := start(t, app, env, workerJava, "-cp", classpath, "shop.Worker", "10")
	run(t, time.Minute, app, env, "java", "-cp", classpath, "shop.Producer", "10")
	out := worker.wait(t, time.Minute)
	checkHandled(t, out, ids)
	if !strings.Contains(out, "spool jar "+jar+"\n") {
		t.Errorf("the worker did not load the SDK from the scratch repository's %s; its output:\n%s", jar, out)
	}
	if n := strings.Count(out, "VirtualThread"); n != len(ids) {
		t.Errorf("%d of %d handlers ran on a virtual thread on Java 21+; the worker's output:\n%s", n, len(ids), out)
	}
}

// consumerPom is the consumer pom of docs/sdk-java.md, "Install".
func consumerPom(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "sdk-java.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- consumer-pom:[^\n]*\n```xml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/sdk-java.md has no ```xml block after <!-- consumer-pom: ... -->")
	}
	return string(m[1])
}

// mavenSettings writes a settings.xml that reads what it can from the
// user's ~/.m2/repository as a file repository, before Maven Central: a
// scratch local repository then fills from the disk, not the network.
func mavenSettings(t *testing.T, dir string) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	repos := ""
	if cache := filepath.Join(home, ".m2", "repository"); dirExists(cache) {
		r := fmt.Sprintf(`<id>user-m2</id><url>file://%s</url><snapshots><enabled>false</enabled></snapshots>`, cache)
		repos = fmt.Sprintf(`<repositories><repository>%s</repository></repositories>
      <pluginRepositories><pluginRepository>%s</pluginRepository></pluginRepositories>`, r, r)
	}
	settings := fmt.Sprintf(`<settings>
  <profiles>
    <profile>
      <id>user-m2</id>
      %s
    </profile>
  </profiles>
  <activeProfiles><activeProfile>user-m2</activeProfile></activeProfiles>
</settings>
`, repos)
	path := filepath.Join(dir, "settings.xml")
	writeFile(t, path, settings)
	return path
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
