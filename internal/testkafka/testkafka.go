// Package testkafka starts a real Apache Kafka broker for tests: one
// process in KRaft mode (broker and controller combined), on free
// loopback ports, with a log directory of its own, -Xmx512m. It can stop
// and start the broker again (same ports, same log directory) for
// broker-restart tests.
//
// The broker's jars (org.apache.kafka:kafka_2.13 and its runtime
// dependencies, pom.xml beside this file) are copied from Maven Central
// with mvn, once, into the user's cache directory, kafka-<version>/libs
// (scripts/ensure-deps.sh copies them there ahead of `make test`). A test
// skips, saying why, only when they cannot be had: no java, no mvn, or no
// Maven repository. ToolsJars copies Kafka's own benchmark tools
// (tools-pom.xml) the same way, for the loadtest's --broker-tool.
//
// Starting a broker takes seconds: a test package starts one and shares
// it (each test under a topic prefix of its own), not one per test.
package testkafka

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testport"
)

//go:embed pom.xml
var pom []byte

//go:embed tools-pom.xml
var toolsPom []byte

// ErrUnavailable: the broker's jars or a JVM cannot be had on this
// machine; tests skip with the error's message.
var ErrUnavailable = errors.New("no Apache Kafka for the Kafka backend's tests")

// startTimeout bounds a broker's start (JVM start, log recovery, the
// controller's election of itself).
const startTimeout = 90 * time.Second

// Version is the Kafka release the tests run: pom.xml's version.
func Version() string {
	m := regexp.MustCompile(`<artifactId>kafka-broker</artifactId>\s*<version>([^<]+)</version>`).FindSubmatch(pom)
	return string(m[1])
}

// Jars returns the directory holding the broker's jars, copying them
// from the Maven repository the first time (a minute or so).
func Jars() (string, error) {
	return copyJars(pom, "kafka-"+Version(), "kafka_2.13-"+Version()+".jar", "org.apache.kafka:kafka_2.13")
}

// ToolsJars returns the directory holding Kafka's own tools
// (org.apache.kafka:kafka-tools, tools-pom.xml: ProducerPerformance,
// ConsumerPerformance) and their dependencies, the broker's version,
// copying them from the Maven repository the first time. Only the
// loadtest's --broker-tool runs them.
func ToolsJars() (string, error) {
	if m := regexp.MustCompile(`<artifactId>kafka-tools</artifactId>\s*<version>([^<]+)</version>`).FindSubmatch(toolsPom); m == nil || string(m[1]) != Version() {
		return "", fmt.Errorf("testkafka: tools-pom.xml's version differs from pom.xml's %s: keep them equal", Version())
	}
	return copyJars(toolsPom, "kafka-tools-"+Version(), "kafka-tools-"+Version()+".jar", "org.apache.kafka:kafka-tools")
}

// copyJars copies the runtime dependencies of pomXML into the user's
// cache dir, spool/<name>/libs, unless marker (a jar) is there already.
func copyJars(pomXML []byte, name, marker, what string) (string, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("%w: java is not on PATH (install a JDK 17 or later: scripts/ensure-deps.sh)", ErrUnavailable)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	dir := filepath.Join(cache, "spool", name)
	libs := filepath.Join(dir, "libs")
	if _, err := os.Stat(filepath.Join(libs, marker)); err == nil {
		return libs, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("%w: the jars of %s are not in %s and mvn is not on PATH to copy them (run scripts/ensure-deps.sh)", ErrUnavailable, what, libs)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	tmp, err := os.MkdirTemp(dir, "fetch-")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "pom.xml"), pomXML, 0o644); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cmd := exec.Command("mvn", "-q", "-B", "-f", filepath.Join(tmp, "pom.xml"), "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(tmp, "libs"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: mvn dependency:copy-dependencies of %s:%s: %v: %s", ErrUnavailable, what, Version(), err, tail(out.String(), 20))
	}
	// Atomic: a package copying at the same time renames the same jars.
	if err := os.Rename(filepath.Join(tmp, "libs"), libs); err != nil {
		if _, serr := os.Stat(filepath.Join(libs, marker)); serr == nil {
			return libs, nil
		}
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return libs, nil
}

// Broker is one Kafka broker process.
type Broker struct {
	libs     string
	dir      string
	port     int
	ctrlPort int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// clusterID is a random cluster id as Kafka's Uuid.randomUuid makes them:
// 16 random bytes in unpadded base64url, never starting with "-" (the
// storage tool would read such an id as an option, and refuse the format:
// one launch in 64 failed so).
func clusterID() string {
	id := make([]byte, 16)
	for {
		_, _ = rand.Read(id)
		if s := base64.RawURLEncoding.EncodeToString(id); s[0] != '-' {
			return s
		}
	}
}

// Launch formats a log directory under dir and starts a broker on it.
// Errors wrapping ErrUnavailable mean the machine cannot run one.
func Launch(dir string) (*Broker, error) {
	libs, err := Jars()
	if err != nil {
		return nil, err
	}
	b := &Broker{libs: libs, dir: dir}
	if b.port, b.ctrlPort, err = freePorts(); err != nil {
		return nil, err
	}
	if err := b.writeConfig(); err != nil {
		return nil, err
	}
	format := exec.Command("java", "-Xmx256m", "-cp", filepath.Join(libs, "*"), "-Dlog4j2.configurationFile="+b.path("log4j2.properties"),
		"kafka.tools.StorageTool", "format", "-t", clusterID(), "-c", b.path("server.properties"))
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testkafka: formatting the log directory: %v: %s", err, out)
	}
	return b, b.Start()
}

// Start starts a broker for the test, sharing nothing, and kills it when
// the test ends, printing its log's tail if the test failed. It skips the
// test when Kafka cannot be had. Prefer one broker per package (Launch in
// TestMain, or one per top-level test with subtests).
func Start(t testing.TB) *Broker {
	t.Helper()
	b, err := Launch(t.TempDir())
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Kill()
		if t.Failed() {
			t.Logf("kafka broker log (tail):\n%s", b.LogTail(40))
		}
	})
	return b
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

func (b *Broker) path(name string) string { return filepath.Join(b.dir, name) }

// writeConfig writes server.properties (settings for one broker that
// starts fast: small internal topics, no rebalance delay, session
// timeouts down to 1s so that tests can use Spool's shortest group
// session timeout, no automatic topic creation) and log4j2.properties (the log in server.log).
func (b *Broker) writeConfig() error {
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=%[3]s
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
`, b.port, b.ctrlPort, b.path("data"))
	if err := os.WriteFile(b.path("server.properties"), []byte(props), 0o644); err != nil {
		return err
	}
	log4j := fmt.Sprintf(`rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=%s
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%%d] %%p %%m (%%c)%%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.kafka.appenderRef.f.ref=F
logger.kafka.additivity=false
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
logger.started.appenderRef.f.ref=F
logger.started.additivity=false
`, b.path("server.log"))
	return os.WriteFile(b.path("log4j2.properties"), []byte(log4j), 0o644)
}

// started is the line the broker logs once it serves.
const started = "Kafka Server started"

// Start starts the broker (again) on its ports and log directory and
// waits until it serves.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return nil
	}
	logPath := b.path("server.log")
	from := int64(0)
	if fi, err := os.Stat(logPath); err == nil {
		from = fi.Size()
	}
	out, err := os.OpenFile(b.path("stdout.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("java", "-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+b.path("log4j2.properties"),
		"-cp", filepath.Join(b.libs, "*"), "kafka.Kafka", b.path("server.properties"))
	cmd.Stdout, cmd.Stderr = out, out
	setDeathSignal(cmd) // dies with the test binary
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("testkafka: start java: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }() // owned: ends with the process
	b.cmd, b.exited = cmd, exited
	deadline := time.Now().Add(startTimeout)
	for {
		if log, err := os.ReadFile(logPath); err == nil && int64(len(log)) > from && bytes.Contains(log[from:], []byte(started)) {
			return nil
		}
		select {
		case <-exited:
			b.cmd = nil
			return fmt.Errorf("testkafka: the broker exited during start-up:\n%s", b.logTail(30))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testkafka: the broker did not start within %v:\n%s", startTimeout, b.logTail(30))
		}
		time.Sleep(50 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// Stop shuts the broker down cleanly (SIGTERM: controlled shutdown, logs
// flushed) and waits for it to exit.
func (b *Broker) Stop() { b.signalAndWait(syscall.SIGTERM) }

// Kill kills the broker at once (SIGKILL).
func (b *Broker) Kill() { b.signalAndWait(syscall.SIGKILL) }

func (b *Broker) signalAndWait(sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(sig)
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}

// LogTail is the last lines of the broker's log and its standard output.
func (b *Broker) LogTail(lines int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logTail(lines)
}

func (b *Broker) logTail(lines int) string {
	log, _ := os.ReadFile(b.path("server.log"))
	out, _ := os.ReadFile(b.path("stdout.log"))
	return tail(string(log), lines) + "\n" + tail(string(out), 10)
}

// freePorts are two distinct free ports for the broker's and the
// controller's listeners, outside the ephemeral port range: the broker
// keeps them across restarts, and a port from listen(":0") may be taken
// by an outgoing connection meanwhile (see internal/testport).
func freePorts() (broker, controller int, err error) {
	ports, err := testport.Ports("127.0.0.1", 2)
	if err != nil {
		return 0, 0, err
	}
	return ports[0], ports[1], nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// Pid is the broker process's id (0 while it is stopped), for measuring
// its CPU.
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	return b.cmd.Process.Pid
}
