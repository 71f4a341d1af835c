package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The outputs in testdata/ are the tools' own, captured from runs on this
// machine (Kafka 4.1.1's ProducerPerformance and ConsumerPerformance,
// natscli v0.5.0's nats bench).
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseKafkaProducer(t *testing.T) {
	out := readTestdata(t, "kafka-producer-perf-test.txt")
	f, err := parseKafkaProducer(out, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	// The summary, not the progress lines printed every 5 s before it.
	if f.msgsPerS != 16935.7 || !strings.HasPrefix(f.line, "1000000 records sent, 16935.7 records/sec") || !strings.HasSuffix(f.line, "99.9th.") {
		t.Errorf("got %.1f msgs/s from %q", f.msgsPerS, f.line)
	}
	if _, err := parseKafkaProducer(out, 2_000_000); err == nil || !strings.Contains(err.Error(), "sent 1000000 records, want 2000000") {
		t.Errorf("a short run: %v", err)
	}
	progressOnly := strings.Join(strings.Split(out, "\n")[:3], "\n")
	if _, err := parseKafkaProducer(progressOnly, 1_000_000); err == nil {
		t.Error("progress lines without the summary were taken for a result")
	}
}

func TestParseKafkaConsumer(t *testing.T) {
	out := readTestdata(t, "kafka-consumer-perf-test.txt")
	// What runTool hands over: stdout, then stderr (SLF4J's complaints).
	f, err := parseKafkaConsumer(out+"\nSLF4J: Defaulting to no-operation (NOP) logger implementation\n", 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if f.msgsPerS != 86610.0814 || f.fetchMsgsPerS != 104843.7828 || f.rebalanceMs != 2008 {
		t.Errorf("got nMsg.sec %v, fetch.nMsg.sec %v, rebalance.time.ms %v", f.msgsPerS, f.fetchMsgsPerS, f.rebalanceMs)
	}
	if !strings.HasPrefix(f.line, kafkaConsumerHeader+"\n2026-12-02 01:59:22:484, ") {
		t.Errorf("line %q", f.line)
	}
	if _, err := parseKafkaConsumer(out, 999_999); err == nil {
		t.Error("a count other than the backlog's was accepted")
	}
	gaveUp := "WARNING: Exiting before consuming the expected number of messages: timeout (60000 ms) exceeded. You can use the --timeout option to increase the timeout.\n" + out
	if _, err := parseKafkaConsumer(gaveUp, 1_000_000); err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("a consumer that timed out: %v", err)
	}
	if _, err := parseKafkaConsumer(kafkaConsumerHeader+"\n", 1_000_000); err == nil {
		t.Error("a header without a result was accepted")
	}
}

func TestParseNatsBench(t *testing.T) {
	for file, want := range map[string]float64{
		"nats-bench-js-pub-async.txt": 19295, // four clients: the aggregated line, not a client's
		"nats-bench-js-ordered.txt":   22296,
		"nats-bench-js-consume.txt":   9132,
		"nats-bench-js-get-batch.txt": 7067,
		"nats-bench-js-pub-sync.txt":  2082,
	} {
		out := readTestdata(t, file)
		f, err := parseNatsBench(out+"\n02:00:01 Starting JetStream benchmark [clients=1]\n", 100_000)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if f.msgsPerS != want || !strings.HasPrefix(f.line, "NATS JetStream ") {
			t.Errorf("%s: %v msgs/s from %q, want %v", file, f.msgsPerS, f.line, want)
		}
		warned := out + "\n02:00:01 WARNING: at least one of the clients disconnected or experienced an error during the benchmark. These results are not optimal!\n"
		if _, err := parseNatsBench(warned, 100_000); err == nil {
			t.Errorf("%s: a run nats bench warned about was accepted", file)
		}
	}
	if _, err := parseNatsBench("No publisher or subscribers. Nothing to report.\n", 100_000); err == nil {
		t.Error("no result was accepted")
	}
	// The synchronous publisher prints its latencies: 347.64us, 2,960.29us.
	f, err := parseNatsBench(readTestdata(t, "nats-bench-js-pub-sync.txt"), 2000)
	if err != nil || f.p50Ms != 0.348 || f.p99Ms != 2.96 {
		t.Errorf("js pub sync: p50 %v ms, p99 %v ms, %v; want 0.348, 2.96", f.p50Ms, f.p99Ms, err)
	}
	for line, want := range map[string]float64{
		"NATS x stats: 1 msgs/sec ~ P50: 1.5ms ~ P99: 2s": 1.5,
		"NATS x stats: 1 msgs/sec ~ P50: 900ns":           0.001,
		"NATS x stats: 1 msgs/sec ~ P90: 3us":             0,
	} {
		if got, err := natsBenchLatency(line, "P50"); got != want || err != nil {
			t.Errorf("%q: P50 %v ms, %v; want %v", line, got, err, want)
		}
	}
}

func TestBrokerToolArgs(t *testing.T) {
	sc := &Scenario{Name: "drain-kafka", Mode: "drain", Backend: "kafka", Messages: 1000, MessageBytes: 1024, Partitions: 8, Producers: 4, BatchMessages: 100}
	p := kafkaProduceArgs("/jars", "127.0.0.1:9092", "spoolbench", sc)
	if p[0] != "java" || !slices.Contains(p, "/jars/*") || !slices.Contains(p, "org.apache.kafka.tools.ProducerPerformance") {
		t.Errorf("producer: %q", p)
	}
	if got := strings.Join(p[slices.Index(p, "--topic"):], " "); got != "--topic spoolbench --num-records 1000 --record-size 1024 --throughput -1 --producer-props bootstrap.servers=127.0.0.1:9092 acks=all" {
		t.Errorf("producer's arguments: %s", got)
	}
	c := kafkaConsumeArgs("/jars", "127.0.0.1:9092", "spoolbench", sc)
	if got := strings.Join(c[slices.Index(c, "org.apache.kafka.tools.ConsumerPerformance"):], " "); got != "org.apache.kafka.tools.ConsumerPerformance --bootstrap-server 127.0.0.1:9092 --topic spoolbench --messages 1000 --group perf-spoolbench --timeout 60000" {
		t.Errorf("consumer's arguments: %s", got)
	}

	sc.Backend = "jetstream"
	pub := strings.Join(natsPublishArgs("nats", "nats://127.0.0.1:4222", "spoolbench", sc), " ")
	// Room for twice the backlog: nats bench's streams discard new
	// messages once full (its default is 1 GB, less than a 1 GiB backlog).
	if want := "nats --server nats://127.0.0.1:4222 bench js pub async spoolbench.data --create --storage file --replicas 1 --dedup --maxbytes 69156864 --stream spoolbench --clients 4 --batch 100 --msgs 1000 --size 1024 --no-progress"; pub != want {
		t.Errorf("publisher:\n got %s\nwant %s", pub, want)
	}
	sync := &Scenario{Name: "publish-sync-jetstream", Mode: "publish", Backend: "jetstream", Messages: 1000, MessageBytes: 1024, Producers: 1, PipelineDepth: 1, BatchMessages: 1}
	if got, want := strings.Join(natsPublishArgs("nats", "nats://127.0.0.1:4222", "spoolbench", sync), " "),
		"nats --server nats://127.0.0.1:4222 bench js pub sync spoolbench.data --create --storage file --replicas 1 --dedup --maxbytes 69156864 --stream spoolbench --clients 1 --msgs 1000 --size 1024 --no-progress"; got != want {
		t.Errorf("synchronous publisher:\n got %s\nwant %s", got, want)
	}
	get := strings.Join(natsConsumeArgs("nats", "nats://127.0.0.1:4222", "spoolbench", "get batch", sc), " ")
	if want := "nats --server nats://127.0.0.1:4222 bench js get batch --stream spoolbench --clients 1 --msgs 1000 --size 1024 --no-progress"; get != want {
		t.Errorf("getter:\n got %s\nwant %s", get, want)
	}
}

func TestCheckBrokerTool(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "loadtest", "scenarios")
	for name, ok := range map[string]bool{"drain-kafka": true, "drain-jetstream": true, "publish-sync-jetstream": true, "e2e-kafka": false, "drain": false, "e2e-jetstream": false} {
		sc, err := loadScenario(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkBrokerTool(sc); (err == nil) != ok {
			t.Errorf("%s: %v", name, err)
		} else if err != nil && !strings.Contains(err.Error(), "drain-") {
			t.Errorf("%s: the error does not name the scenarios to use: %v", name, err)
		}
	}
}

// TestMeasureToolsGoesOnAfterAFailedReader runs stand-ins for the tools
// (sh printing the tools' captured output) with this process as the
// "broker": a reader that fails is reported in its line, and the next
// reader is still measured.
func TestMeasureToolsGoesOnAfterAFailedReader(t *testing.T) {
	tmp := t.TempDir()
	cat := func(file string) []string {
		return []string{"sh", "-c", `cat "$1"`, "sh", filepath.Join("testdata", file)}
	}
	sc := &Scenario{Name: "drain-kafka", Mode: "drain", Backend: "kafka", Messages: 1_000_000, MessageBytes: 1024, Partitions: 8}
	readers := []toolReader{
		{name: "fails", argv: []string{"sh", "-c", "echo no such topic >&2; exit 3"}, parse: parseKafkaConsumer},
		{name: "reads", argv: cat("kafka-consumer-perf-test.txt"), parse: parseKafkaConsumer},
	}
	rs, err := measureTools(t.Context(), os.Getpid(), tmp, sc, ToolResult{Scenario: sc.Name}, cat("kafka-producer-perf-test.txt"), parseKafkaProducer, readers)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want one per reader", len(rs))
	}
	if rs[0].Tool != "fails" || !strings.Contains(rs[0].Error, "exit status 3") || !strings.Contains(rs[0].Error, "no such topic") || rs[0].MsgsPerS != 0 {
		t.Errorf("the failed reader: %+v", rs[0])
	}
	if r := rs[1]; r.Tool != "reads" || r.Error != "" || r.MsgsPerS != 86610 || r.FetchMsgsPerS != 104844 || r.RebalanceMs != 2008 || r.ProduceMsgsPerS != 16936 || r.WallMsgsPerS <= 0 {
		t.Errorf("the reader after it: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(tmp, "consume-1.err")); err != nil {
		t.Errorf("the failed reader's stderr was not kept: %v", err)
	}
}
