package main

// --broker-tool: the brokers' own benchmark tools, on the broker a
// backend scenario starts, to set Spool's figures beside (docs/benchmarks/backends.md,
// "The brokers' own tools beside drain-<backend>"). Instead of spoold, the run starts the
// scenario's broker as a spoold run would (broker.go), writes the
// scenario's backlog (messages × message_bytes) with the broker's own
// producer, then reads all of it with the broker's own consumer(s):
//
//   - kafka: org.apache.kafka.tools.ProducerPerformance and
//     ConsumerPerformance (kafka-producer-perf-test, kafka-consumer-perf-test)
//     of the broker's release, from jars copied by testkafka.ToolsJars, on a
//     topic created as Spool creates its topics (the scenario's partitions,
//     replication factor 1, LogAppendTime, no retention limit).
//   - jetstream: `nats bench` (natscli testnats.CLIVersion, testnats.CLI):
//     asynchronous publishes, each acked, into one file-storage R1 stream with
//     message ids (Spool's duplicate window), then three readers of the whole
//     backlog one after another: an ordered ephemeral consumer, a durable
//     consumer with explicit acks, and batched direct gets (Spool's own read).
//     A publish scenario (publish-sync-jetstream) runs only the producer,
//     one synchronous publish at a time (`js pub sync`), and reports the
//     rate and the latencies it prints.
//
// Each tool runs as a process of its own; its CPU is its rusage at exit
// (all its threads, start-up included: /proc/PID/stat, which procCPU
// reads, is gone by then, and a read before the exit would miss the
// end), the broker's is procCPU at the process's start and end. Rates are
// the ones the tool prints.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/internal/testkafka"
	"github.com/spoolmq/spool/internal/testnats"
)

// ToolResult is the JSON line of one consumer tool's read of the backlog
// (with the producer's figures of the run that wrote it).
type ToolResult struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	Backend  string `json:"backend"`
	// Tool is the consumer that read the backlog; ProduceTool the producer
	// that wrote it.
	Tool        string `json:"tool"`
	ProduceTool string `json:"produce_tool"`
	// MsgsPerS is the consume rate the tool printed. Kafka: nMsg.sec, from
	// the consumer's subscribe to its last message (the group join
	// included); FetchMsgsPerS is fetch.nMsg.sec, the same without the
	// join (RebalanceMs). nats bench: from the first message to the last.
	MsgsPerS      float64 `json:"msgs_per_s"`
	FetchMsgsPerS float64 `json:"fetch_msgs_per_s,omitempty"`
	RebalanceMs   int64   `json:"rebalance_ms,omitempty"`
	// P50Ms, P99Ms (mode publish, nats bench js pub sync): the publish
	// latencies the tool printed, request to acknowledgement.
	P50Ms float64 `json:"p50_ms,omitempty"`
	P99Ms float64 `json:"p99_ms,omitempty"`
	// WallMsgsPerS: messages over the tool process's whole life (JVM or
	// process start, connect, read, exit).
	WallMsgsPerS      float64 `json:"wall_msgs_per_s"`
	ToolCPUUsPerMsg   float64 `json:"tool_cpu_us_per_msg"`
	BrokerCPUUsPerMsg float64 `json:"broker_cpu_us_per_msg"`
	// The produce phase: the rate the producer printed, its CPU and the
	// broker's per message.
	ProduceMsgsPerS          float64 `json:"produce_msgs_per_s"`
	ProduceToolCPUUsPerMsg   float64 `json:"produce_tool_cpu_us_per_msg"`
	ProduceBrokerCPUUsPerMsg float64 `json:"produce_broker_cpu_us_per_msg"`
	Messages                 int64   `json:"messages"`
	MessageBytes             int     `json:"message_bytes"`
	Partitions               int     `json:"partitions"` // Kafka's topic; nats bench writes one stream whatever the scenario says
	// Output is the tool's result as it printed it.
	Output    string `json:"output"`
	Nproc     int    `json:"nproc"`
	LoadAvg   string `json:"loadavg"` // /proc/loadavg's 1, 5 and 15 minutes when the run started
	CPU       string `json:"cpu"`
	Kernel    string `json:"kernel"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	// Error: the consumer tool failed or hung (its figures are then 0).
	Error string `json:"error,omitempty"`
}

// brokerToolTopic is the topic (Kafka) or stream (JetStream) the tools use.
const brokerToolTopic = "spoolbench"

// toolTimeout bounds one tool process: a run of 1,000,000 messages takes
// about a minute here, and a tool can hang (nats bench's durable consumer
// waits forever once the server deleted it as inactive, which happened
// on this loaded machine).
const toolTimeout = 5 * time.Minute

func checkBrokerTool(sc *Scenario) error {
	if sc.Backend != "kafka" && sc.Backend != "jetstream" {
		return fmt.Errorf("loadtest: --broker-tool runs the brokers' own tools: scenario %s has backend %q, want kafka or jetstream (drain-kafka, drain-jetstream, publish-sync-jetstream)", sc.Name, sc.Backend)
	}
	switch {
	case sc.Mode == "drain":
		return nil
	case sc.Mode == "publish" && sc.Backend == "jetstream" && max(sc.PipelineDepth, 1) == 1 && max(sc.BatchMessages, 1) == 1:
		return nil
	case sc.Mode == "publish":
		return fmt.Errorf("loadtest: --broker-tool measures publishes one at a time (nats bench js pub sync): scenario %s is mode publish with backend %s, pipeline_depth %d, batch_messages %d; use publish-sync-jetstream", sc.Name, sc.Backend, sc.PipelineDepth, sc.BatchMessages)
	}
	return fmt.Errorf("loadtest: --broker-tool measures a drain (a backlog written, then read) or synchronous publishes: scenario %s is mode %s; use drain-%s or publish-sync-jetstream", sc.Name, sc.Mode, sc.Backend)
}

// runBrokerTool starts sc's broker, writes and reads the backlog with the
// broker's tools and returns one result per consumer tool.
func runBrokerTool(ctx context.Context, sc *Scenario, tmp string) ([]*ToolResult, error) {
	if err := checkBrokerTool(sc); err != nil {
		return nil, err
	}
	base := ToolResult{
		Scenario: sc.Name, Mode: sc.Mode, Backend: sc.Backend, Messages: int64(sc.Messages), MessageBytes: sc.MessageBytes,
		Nproc: runtime.NumCPU(), LoadAvg: loadAvg(), CPU: cpuModel(), Kernel: kernel(), GoVersion: runtime.Version(),
		Date: time.Now().UTC().Format(time.RFC3339),
	}
	var produce []string
	var readers []toolReader
	switch sc.Backend {
	case "kafka":
		jars, err := testkafka.ToolsJars()
		if err != nil {
			return nil, fmt.Errorf("loadtest: Kafka's tools: %w", err)
		}
		brk, err := startBroker(ctx, sc, tmp)
		if err != nil {
			return nil, err
		}
		defer brk.stop()
		if err := createKafkaTopic(ctx, brk.addr, brokerToolTopic, sc.Partitions); err != nil {
			return nil, err
		}
		base.Partitions = sc.Partitions
		base.ProduceTool = "kafka-producer-perf-test " + testkafka.Version() + " (ProducerPerformance, acks=all)"
		produce = kafkaProduceArgs(jars, brk.addr, brokerToolTopic, sc)
		readers = []toolReader{{
			name:  "kafka-consumer-perf-test " + testkafka.Version() + " (ConsumerPerformance)",
			argv:  kafkaConsumeArgs(jars, brk.addr, brokerToolTopic, sc),
			parse: parseKafkaConsumer,
		}}
		return measureTools(ctx, brk.pid, tmp, sc, base, produce, parseKafkaProducer, readers)
	default:
		bin, err := testnats.CLI()
		if err != nil {
			return nil, fmt.Errorf("loadtest: nats bench: %w", err)
		}
		brk, err := startBroker(ctx, sc, tmp)
		if err != nil {
			return nil, err
		}
		defer brk.stop()
		base.Partitions = 1
		if sc.Mode == "publish" {
			return measurePublishTool(ctx, brk.pid, tmp, sc, base, "nats bench "+testnats.CLIVersion+" js pub sync",
				natsPublishArgs(bin, brk.addr, brokerToolTopic, sc), parseNatsBench)
		}
		base.ProduceTool = "nats bench " + testnats.CLIVersion + " js pub async"
		produce = natsPublishArgs(bin, brk.addr, brokerToolTopic, sc)
		for _, kind := range natsReaders {
			readers = append(readers, toolReader{name: "nats bench " + testnats.CLIVersion + " js " + kind,
				argv: natsConsumeArgs(bin, brk.addr, brokerToolTopic, kind, sc), parse: parseNatsBench})
		}
		return measureTools(ctx, brk.pid, tmp, sc, base, produce, parseNatsBench, readers)
	}
}

// toolReader is one consumer tool: its command line and the parser of
// what it prints.
type toolReader struct {
	name  string
	argv  []string
	parse func(output string, messages int64) (toolFigures, error) // stdout, then stderr
}

// toolFigures is what a tool printed about its run (a producer's: the
// rate and the line).
type toolFigures struct {
	msgsPerS      float64
	fetchMsgsPerS float64 // Kafka's consumer only
	rebalanceMs   int64   // Kafka's consumer only
	p50Ms, p99Ms  float64 // nats bench only: the latencies it printed
	line          string  // the printed result, as it was
}

// measurePublishTool runs a producer tool alone (mode publish): one
// result, the producer's rate and latencies.
func measurePublishTool(ctx context.Context, brokerPid int, tmp string, sc *Scenario, base ToolResult, name string, argv []string,
	parse func(string, int64) (toolFigures, error)) ([]*ToolResult, error) {
	p, err := runTool(ctx, brokerPid, tmp, "produce", argv)
	if err != nil {
		return nil, err
	}
	f, err := parse(p.output, int64(sc.Messages))
	if err != nil {
		return nil, fmt.Errorf("loadtest: %s: %w\n%s", name, err, lastLines(p.output, 30))
	}
	n := float64(sc.Messages)
	r := base
	r.Tool, r.ProduceTool, r.Output = name, name, f.line
	r.MsgsPerS, r.ProduceMsgsPerS = round(f.msgsPerS, 0), round(f.msgsPerS, 0)
	r.P50Ms, r.P99Ms = f.p50Ms, f.p99Ms
	r.WallMsgsPerS = round(n/p.wall.Seconds(), 0)
	r.ToolCPUUsPerMsg = round(p.toolCPU.Seconds()*1e6/n, 2)
	r.BrokerCPUUsPerMsg = round(p.brokerCPU.Seconds()*1e6/n, 2)
	r.ProduceToolCPUUsPerMsg, r.ProduceBrokerCPUUsPerMsg = r.ToolCPUUsPerMsg, r.BrokerCPUUsPerMsg
	return []*ToolResult{&r}, nil
}

func measureTools(ctx context.Context, brokerPid int, tmp string, sc *Scenario, base ToolResult, produce []string,
	parseProduce func(string, int64) (toolFigures, error), readers []toolReader) ([]*ToolResult, error) {
	n := float64(sc.Messages)
	p, err := runTool(ctx, brokerPid, tmp, "produce", produce)
	if err != nil {
		return nil, err
	}
	pf, err := parseProduce(p.output, int64(sc.Messages))
	if err != nil {
		return nil, fmt.Errorf("loadtest: %s: %w\n%s", base.ProduceTool, err, lastLines(p.output, 30))
	}
	base.ProduceMsgsPerS = round(pf.msgsPerS, 0)
	base.ProduceToolCPUUsPerMsg = round(p.toolCPU.Seconds()*1e6/n, 2)
	base.ProduceBrokerCPUUsPerMsg = round(p.brokerCPU.Seconds()*1e6/n, 2)
	var out []*ToolResult
	for i, rd := range readers {
		r := base
		r.Tool = rd.name
		out = append(out, &r)
		// A reader that fails (or hangs until toolTimeout) is reported
		// in its line; the next one still reads the backlog.
		c, err := runTool(ctx, brokerPid, tmp, fmt.Sprintf("consume-%d", i+1), rd.argv)
		if err != nil {
			r.Error = err.Error()
			continue
		}
		cf, err := rd.parse(c.output, int64(sc.Messages))
		if err != nil {
			r.Error = fmt.Sprintf("loadtest: %s: %v\n%s", rd.name, err, lastLines(c.output, 30))
			continue
		}
		r.Output = cf.line
		r.MsgsPerS, r.FetchMsgsPerS, r.RebalanceMs = round(cf.msgsPerS, 0), round(cf.fetchMsgsPerS, 0), cf.rebalanceMs
		r.WallMsgsPerS = round(n/c.wall.Seconds(), 0)
		r.ToolCPUUsPerMsg = round(c.toolCPU.Seconds()*1e6/n, 2)
		r.BrokerCPUUsPerMsg = round(c.brokerCPU.Seconds()*1e6/n, 2)
	}
	return out, nil
}

// toolRun is one tool process: what it printed (stdout, then stderr), its
// wall time and CPU, and the broker's CPU meanwhile.
type toolRun struct {
	output             string
	wall               time.Duration
	toolCPU, brokerCPU time.Duration
}

// runTool runs argv to its end; its stdout and stderr are kept in
// tmp/<name>.out and .err (--keep).
func runTool(ctx context.Context, brokerPid int, tmp, name string, argv []string) (*toolRun, error) {
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	b0, err := procCPU(brokerPid)
	if err != nil {
		return nil, fmt.Errorf("loadtest: broker: %w", err)
	}
	t0 := time.Now()
	err = cmd.Run()
	wall := time.Since(t0)
	b1, berr := procCPU(brokerPid)
	_ = os.WriteFile(filepath.Join(tmp, name+".out"), stdout.Bytes(), 0o644)
	_ = os.WriteFile(filepath.Join(tmp, name+".err"), stderr.Bytes(), 0o644)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %s: %w\n%s%s", strings.Join(argv, " "), err, lastLines(stdout.String(), 10), lastLines(stderr.String(), 20))
	}
	if berr != nil {
		return nil, fmt.Errorf("loadtest: the broker exited during %s: %w", name, berr)
	}
	ps := cmd.ProcessState
	return &toolRun{output: stdout.String() + "\n" + stderr.String(), wall: wall, toolCPU: ps.UserTime() + ps.SystemTime(),
		brokerCPU: time.Duration(b1-b0) * time.Second / clockTicks}, nil
}

// createKafkaTopic creates the topic as Spool's Kafka backend creates its
// topics (engine/kafka): the partitions, the broker's replication factor
// (1 here), the broker's append time, no retention limit.
func createKafkaTopic(ctx context.Context, addr, topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	str := func(s string) *string { return &s }
	configs := map[string]*string{"message.timestamp.type": str("LogAppendTime"), "retention.ms": str("-1"), "retention.bytes": str("-1")}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), -1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("loadtest: creating Kafka topic %s with %d partitions: %w", topic, partitions, err)
	}
	return nil
}

// kafkaJVM are the JVM flags Kafka's bin/kafka-producer-perf-test.sh and
// kafka-consumer-perf-test.sh run the tools with (KAFKA_HEAP_OPTS and
// kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS).
var kafkaJVM = []string{"-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"}

func kafkaTool(jars, class string, args ...string) []string {
	argv := append([]string{"java"}, kafkaJVM...)
	argv = append(argv, "-cp", filepath.Join(jars, "*"), class)
	return append(argv, args...)
}

// kafkaProduceArgs: the whole backlog as fast as acks=all allows (the
// producer's other settings are Kafka's defaults: idempotent, linger 5 ms,
// 16 KiB batches).
func kafkaProduceArgs(jars, addr, topic string, sc *Scenario) []string {
	return kafkaTool(jars, "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(sc.Messages), "--record-size", strconv.Itoa(sc.MessageBytes),
		"--throughput", "-1", "--producer-props", "bootstrap.servers="+addr, "acks=all")
}

// kafkaConsumeArgs: one consumer (one thread) in a new group reads the
// backlog from the start; it gives up 60 s after the last record.
func kafkaConsumeArgs(jars, addr, topic string, sc *Scenario) []string {
	return kafkaTool(jars, "org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", addr, "--topic", topic, "--messages", strconv.Itoa(sc.Messages),
		"--group", "perf-"+topic, "--timeout", "60000")
}

// kafkaProducerSummary is ProducerPerformance's last line.
var kafkaProducerSummary = regexp.MustCompile(`(?m)^(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, \d+ ms 50th.*$`)

func parseKafkaProducer(output string, messages int64) (toolFigures, error) {
	m := kafkaProducerSummary.FindStringSubmatch(output)
	if m == nil {
		return toolFigures{}, errors.New(`no summary line ("N records sent, R records/sec ... 99.9th.") in ProducerPerformance's output`)
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != messages {
		return toolFigures{}, fmt.Errorf("ProducerPerformance sent %d records, want %d", n, messages)
	}
	rate, err := strconv.ParseFloat(m[2], 64)
	return toolFigures{msgsPerS: rate, line: m[0]}, err
}

// kafkaConsumerHeader is ConsumerPerformance's header; its result is the
// next line, the same ten columns: start and end of the run (from the
// consumer's subscribe to its last record), MiB and MiB/s, records and
// records/s over that time (nMsg.sec), the time spent joining the group
// (rebalance.time.ms), the rest of the time (fetch.time.ms) and the rates
// over it (fetch.MB.sec, fetch.nMsg.sec).
const kafkaConsumerHeader = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"

func parseKafkaConsumer(output string, messages int64) (toolFigures, error) {
	if strings.Contains(output, "WARNING: Exiting before consuming the expected number of messages") {
		return toolFigures{}, fmt.Errorf("ConsumerPerformance gave up before it read %d records (its --timeout)", messages)
	}
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != kafkaConsumerHeader || !sc.Scan() {
			continue
		}
		line := strings.TrimSpace(sc.Text())
		f := strings.Split(line, ", ")
		if len(f) != 10 {
			return toolFigures{}, fmt.Errorf("ConsumerPerformance's result %q: %d columns, want 10", line, len(f))
		}
		n, err1 := strconv.ParseInt(f[4], 10, 64)
		rate, err2 := strconv.ParseFloat(f[5], 64)
		rebalance, err3 := strconv.ParseInt(f[6], 10, 64)
		fetchRate, err4 := strconv.ParseFloat(f[9], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return toolFigures{}, fmt.Errorf("ConsumerPerformance's result %q: %w", line, err)
		}
		if n != messages {
			return toolFigures{}, fmt.Errorf("ConsumerPerformance read %d records, want %d", n, messages)
		}
		return toolFigures{msgsPerS: rate, fetchMsgsPerS: fetchRate, rebalanceMs: rebalance, line: kafkaConsumerHeader + "\n" + line}, nil
	}
	return toolFigures{}, fmt.Errorf("no result after the header %q in ConsumerPerformance's output", kafkaConsumerHeader)
}

// natsReaders are the `nats bench js` consumers run over the backlog, in
// this order: an ordered ephemeral consumer (flow control, no acks), a
// durable consumer with explicit acks (a callback, 500 buffered), batched
// direct gets (500 a batch; Spool reads this way, 1,000 a batch).
var natsReaders = []string{"ordered", "consume", "get batch"}

// natsPublishArgs: the stream created file storage, R1, message ids
// (deduplication, 2 min window, as Spool publishes), room for twice the
// backlog; the scenario's producers as clients, each with up to
// batch_messages asynchronous publishes awaiting their acks, or (mode
// publish) one synchronous publish at a time.
func natsPublishArgs(bin, url, stream string, sc *Scenario) []string {
	maxBytes := 2*int64(sc.Messages)*int64(sc.MessageBytes) + 64<<20
	kind := []string{"async"}
	if sc.Mode == "publish" {
		kind = []string{"sync"}
	}
	argv := append([]string{bin, "--server", url, "bench", "js", "pub"}, kind...)
	argv = append(argv, stream+".data",
		"--create", "--storage", "file", "--replicas", "1", "--dedup", "--maxbytes", strconv.FormatInt(maxBytes, 10),
		"--stream", stream, "--clients", strconv.Itoa(max(sc.Producers, 1)))
	if sc.Mode != "publish" {
		argv = append(argv, "--batch", strconv.Itoa(max(sc.BatchMessages, 1)))
	}
	return append(argv, "--msgs", strconv.Itoa(sc.Messages), "--size", strconv.Itoa(sc.MessageBytes), "--no-progress")
}

// natsConsumeArgs: one client reads the whole stream.
func natsConsumeArgs(bin, url, stream, kind string, sc *Scenario) []string {
	argv := []string{bin, "--server", url, "bench", "js"}
	argv = append(argv, strings.Fields(kind)...)
	return append(argv, "--stream", stream, "--clients", "1", "--msgs", strconv.Itoa(sc.Messages),
		"--size", strconv.Itoa(sc.MessageBytes), "--no-progress")
}

// natsBenchStats is nats bench's result: "NATS <what> stats: R msgs/sec ~
// ..." for one client, "NATS <what> aggregated stats: R msgs/sec ~ ..." over
// several (from the first client's start to the last one's end).
var natsBenchStats = regexp.MustCompile(`(?m)^\s*NATS .*? stats: ([0-9,]+) msgs/sec ~ .*$`)

func parseNatsBench(output string, _ int64) (toolFigures, error) {
	var m []string
	for _, x := range natsBenchStats.FindAllStringSubmatch(output, -1) {
		if m == nil || strings.Contains(x[0], "aggregated stats:") {
			m = x
		}
	}
	if m == nil {
		return toolFigures{}, errors.New(`no "NATS ... stats: R msgs/sec" line in nats bench's output`)
	}
	if strings.Contains(output, "WARNING:") {
		return toolFigures{}, errors.New("nats bench warned that its results are not valid (a timeout, a disconnection, fewer messages than asked): see its output")
	}
	rate, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	if err != nil {
		return toolFigures{}, err
	}
	f := toolFigures{msgsPerS: rate, line: strings.TrimSpace(m[0])}
	if f.p50Ms, err = natsBenchLatency(m[0], "P50"); err != nil {
		return toolFigures{}, err
	}
	if f.p99Ms, err = natsBenchLatency(m[0], "P99"); err != nil {
		return toolFigures{}, err
	}
	return f, nil
}

// natsBenchPercentile is one latency on a nats bench stats line: "~ P50:
// 231.25us ~" (publishers print them, readers do not).
var natsBenchPercentile = regexp.MustCompile(`\b(P[0-9.]+): ([0-9,.]+)(ns|us|µs|ms|s)\b`)

// natsBenchLatency is the latency named q ("P50") on line, in
// milliseconds; 0 when the line has none.
func natsBenchLatency(line, q string) (float64, error) {
	for _, m := range natsBenchPercentile.FindAllStringSubmatch(line, -1) {
		if m[1] != q {
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[2], ",", ""), 64)
		if err != nil {
			return 0, fmt.Errorf("%s latency %q: %w", q, m[0], err)
		}
		scale := map[string]float64{"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1e3}[m[3]]
		return round(v*scale, 3), nil
	}
	return 0, nil
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
