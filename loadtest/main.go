// Command loadtest drives a real spoold process with a scenario and prints
// throughput, latency, lost/duplicated messages and the sidecar's CPU and
// memory.
//
//	go run ./loadtest --scenario publish --json
//
// It builds cmd/spoold once into a temp dir, starts it as a separate process
// with a generated config (fresh data dir, free ports on 127.0.0.1), waits
// for /readyz, runs publishers and consumers in this process over gRPC,
// samples /proc/<pid>/{stat,status} of spoold every 100 ms and stops spoold
// with SIGTERM. A scenario with nodes > 1 runs a cluster of spoold
// processes (cluster.go); mode rebalance restarts them one after another
// under load and measures the partitions' pauses (rebalance.go, pause.go).
// Scenarios are loadtest/scenarios/NAME.yaml; results are recorded in
// docs/benchmarks.md (today's figures) and docs/benchmarks/ (the dated
// runs; the harness and its fields: docs/benchmarks/single-node.md,
// "Sidecar load tests"). With --broker-tool a
// drain-kafka or drain-jetstream scenario runs the broker's own benchmark
// tools instead of spoold (brokertool.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
)

func main() {
	scenario := flag.String("scenario", "", "scenario name (loadtest/scenarios/NAME.yaml) or path to a .yaml file")
	asJSON := flag.Bool("json", false, "print one line of JSON instead of a table")
	bin := flag.String("spoold", "", "use this spoold binary instead of building cmd/spoold")
	pkg := flag.String("spoold-pkg", "./cmd/spoold", "package to build as the sidecar")
	keep := flag.Bool("keep", false, "keep the temp dir (config, data, spoold log)")
	profile := flag.String("profile", "", "write CPU and heap profiles of spoold here (fetched from its admin port)")
	profileSeconds := flag.Int("profile-seconds", defaultCPUSeconds, "with --profile: length of the CPU profile, from the start of the measured phase")
	rounds := flag.Int("rounds", 0, "failover scenarios: kill rounds (0: the scenario's rounds, 20 by default)")
	clusterTLS := flag.Bool("cluster-tls", false, "cluster scenarios: the nodes talk mutual TLS (certificates made for the run) instead of plaintext")
	brokerTool := flag.Bool("broker-tool", false, "drain-kafka, drain-jetstream: instead of spoold, write and read the backlog with the broker's own tools (kafka-*-perf-test, nats bench) on the same broker; publish-sync-jetstream: nats bench js pub sync")
	flag.Parse()
	if *scenario == "" {
		fmt.Fprintln(os.Stderr, "loadtest: --scenario NAME is required (see loadtest/scenarios/)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *brokerTool {
		rs, err := runBrokerTools(ctx, *scenario, *keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		failed := false
		for _, r := range rs {
			if *asJSON {
				b, _ := json.Marshal(r)
				fmt.Println(string(b))
			} else {
				printToolTable(r)
			}
			failed = failed || r.Error != ""
		}
		if failed {
			fmt.Fprintln(os.Stderr, "loadtest: a broker tool failed (the error field of its line)")
			os.Exit(1)
		}
		return
	}
	r, err := runScenario(ctx, *scenario, *bin, *pkg, *keep, profileSpec{Dir: *profile, CPUSeconds: *profileSeconds}, *rounds, *clusterTLS)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *asJSON {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	} else {
		printTable(r)
	}
	if r.Lost > 0 || r.Duplicates > 0 || len(r.Errors) > 0 {
		fmt.Fprintln(os.Stderr, errFailed)
		os.Exit(1)
	}
}

func runScenario(ctx context.Context, name, bin, pkg string, keep bool, profile profileSpec, rounds int, clusterTLS bool) (*Result, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	sc, err := loadScenario(filepath.Join(root, "loadtest", "scenarios"), name)
	if err != nil {
		return nil, err
	}
	if rounds > 0 {
		if sc.Mode != "failover" {
			return nil, fmt.Errorf("loadtest: --rounds is for failover scenarios; %s is mode %s", sc.Name, sc.Mode)
		}
		sc.Rounds = rounds
	}
	tmp, done, err := runDir(keep)
	if err != nil {
		return nil, err
	}
	defer done()
	if clusterTLS {
		if sc.Nodes < 2 {
			return nil, fmt.Errorf("loadtest: --cluster-tls is for cluster scenarios; %s runs one node", sc.Name)
		}
		files, err := peerCerts(tmp)
		if err != nil {
			return nil, err
		}
		sc.clusterTLS = &files
		sc.Name += "+tls"
	}
	if bin == "" {
		if bin, err = buildSpoold(root, tmp, pkg); err != nil {
			return nil, err
		}
	}
	return run(ctx, bin, tmp, sc, profile)
}

// runDir makes the run's temp dir; done removes it, unless keep.
func runDir(keep bool) (dir string, done func(), err error) {
	dir, err = os.MkdirTemp("", "spool-loadtest-")
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "loadtest: keeping", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

func runBrokerTools(ctx context.Context, name string, keep bool) ([]*ToolResult, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	sc, err := loadScenario(filepath.Join(root, "loadtest", "scenarios"), name)
	if err != nil {
		return nil, err
	}
	if err := checkBrokerTool(sc); err != nil {
		return nil, err
	}
	tmp, done, err := runDir(keep)
	if err != nil {
		return nil, err
	}
	defer done()
	return runBrokerTool(ctx, sc, tmp)
}

func printToolTable(r *ToolResult) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("scenario", r.Scenario+" ("+r.Mode+", "+r.Backend+"), the broker's own tools")
	row("backlog", fmt.Sprintf("%d × %d B, %d partitions", r.Messages, r.MessageBytes, r.Partitions))
	row("produce", fmt.Sprintf("%s: %.0f msgs/s; tool CPU %.2f µs/msg, broker CPU %.2f µs/msg", r.ProduceTool, r.ProduceMsgsPerS, r.ProduceToolCPUUsPerMsg, r.ProduceBrokerCPUUsPerMsg))
	row("consume", fmt.Sprintf("%s: %.0f msgs/s (process start to exit: %.0f)", r.Tool, r.MsgsPerS, r.WallMsgsPerS))
	if r.FetchMsgsPerS > 0 {
		row("without the group join", fmt.Sprintf("%.0f msgs/s (join %d ms)", r.FetchMsgsPerS, r.RebalanceMs))
	}
	row("consume CPU", fmt.Sprintf("tool %.2f µs/msg, broker %.2f µs/msg", r.ToolCPUUsPerMsg, r.BrokerCPUUsPerMsg))
	row("machine", fmt.Sprintf("%d × %s, Linux %s, load average %s, %s", r.Nproc, r.CPU, r.Kernel, r.LoadAvg, r.Date))
	if r.Error != "" {
		row("error", r.Error)
	}
	w.Flush()
	fmt.Println(r.Output)
}

func printTable(r *Result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("scenario", r.Scenario+" ("+r.Mode+")")
	row("messages", r.Messages)
	row("duration", fmt.Sprintf("%.3f s", r.DurationS))
	row("throughput", fmt.Sprintf("%.0f msgs/s, %.1f MiB/s", r.MsgsPerS, r.MBPerS))
	row("latency", fmt.Sprintf("p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms", r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs))
	if r.Verified {
		row("lost / duplicates", fmt.Sprintf("%d / %d", r.Lost, r.Duplicates))
	} else {
		row("lost / duplicates", "not verified (verify: false)")
	}
	row("publish failed", r.PublishFailed)
	if r.Nodes > 1 {
		row("cluster", fmt.Sprintf("%d spoold processes, replication factor %d; sidecar CPU and RSS below are the %s (per node: %v cores)", r.Nodes, r.ReplicationFactor, r.SidecarScope, r.NodeCPUCores))
		if len(r.NodeMessages) > 0 {
			row("handled per node", fmt.Sprint(r.NodeMessages))
		}
	}
	if r.Mode == "failover" {
		row("failover", fmt.Sprintf("%d rounds (%d timed out): kill -9 → first new ack of every partition the killed node led: p50 %.0f ms, p99 %.0f ms, max %.0f ms", r.FailoverRounds, r.FailoverTimeout, r.P50Ms, r.P99Ms, r.MaxMs))
		row("per round (ms)", fmt.Sprint(r.FailoverMs))
		row("partitions led by the killed node", fmt.Sprint(r.LedPartitions))
	}
	if r.Mode == "rebalance" && r.MaxPauseMovedMs != nil {
		row("pauses", fmt.Sprintf("longest pause of a partition that did not move %.1f ms, of one that moved %.1f ms (steady load before the restarts: %.1f ms)",
			*r.MaxPauseUnmovedMs, *r.MaxPauseMovedMs, *r.MaxPauseSteadyMs))
		for _, x := range r.Restarts {
			row(fmt.Sprintf("restart of node %d", x.Node), fmt.Sprintf("stop %.0f ms, ready %.0f ms, app connected %.0f ms, settled %.0f ms; %d partitions moved; longest pause unmoved %.1f ms (partition %d), moved %.1f ms (partition %d)",
				x.StopMs, x.ReadyMs, x.ReconnectMs, x.SettleMs, x.Moved, x.MaxPauseUnmovedMs, x.UnmovedPartition, x.MaxPauseMovedMs, x.MovedPartition))
		}
		row("producer streams opened again", r.PublishReopened)
	}
	if r.Mode == "idle" {
		row("idle", fmt.Sprintf("%.1f s with no traffic", r.IdleS))
	}
	row("sidecar CPU", fmt.Sprintf("%.2f µs/msg (%.3f cores)", r.SidecarCPUUsPerMsg, r.SidecarCPUCores))
	if r.Backend != "" {
		row("broker CPU", fmt.Sprintf("%s: %.2f µs/msg", r.Backend, r.BrokerCPUUsPerMsg))
	}
	if r.Redis {
		row("redis CPU", fmt.Sprintf("%.2f µs/msg (%.2f cores)", r.RedisCPUUsPerMsg, r.RedisCPUCores))
		row("redis scripts", fmt.Sprintf("%.4f calls/msg (%.2f µs/msg in them), %.2f other commands/msg", r.RedisScriptsPerMsg, r.RedisScriptUsPerMsg, r.RedisCommandsPerMsg))
		row("ledger", fmt.Sprintf("dedupe hits %d, ledger errors %d, undeduped deliveries %d", r.DedupeHits, r.LedgerErrors, r.Undeduped))
	}
	row("loadtest CPU", fmt.Sprintf("%.2f µs/msg", r.LoadtestCPUUsPerMsg))
	row("sidecar RSS", fmt.Sprintf("idle %.1f MiB, peak %.1f MiB (VmHWM %.1f MiB)", r.SidecarRSSMBIdle, r.SidecarRSSMBPeak, r.SidecarHWMMB))
	row("setup", fmt.Sprintf("%d B, %d producers × depth %d × batch %d, %d partitions, fsync %s, ordering %s, %d consumers × %d",
		r.MessageBytes, r.Producers, r.PipelineDepth, r.BatchMessages, r.Partitions, r.Fsync, r.Ordering, r.Consumers, r.ConsumerConcurrency))
	row("machine", fmt.Sprintf("%d × %s, Linux %s, %s, %s", r.Nproc, r.CPU, r.Kernel, r.GoVersion, r.Date))
	for _, d := range r.DuplicateSamples {
		row("duplicate", d)
	}
	for _, e := range r.Errors {
		row("error", e)
	}
	w.Flush()
}
