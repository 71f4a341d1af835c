package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the smoke scenario (2,000 messages, publish and consume at
// once) against a real spoold process and checks that every acknowledged
// message was handled exactly once.
func TestSmoke(t *testing.T) { smoke(t, "smoke") }

// TestSmokeLedger is TestSmoke with spoold's Redis ledger on: the harness
// starts a redis-server, measures its CPU and reads spoold's ledger counters.
func TestSmokeLedger(t *testing.T) {
	if _, err := redisBinary(); err != nil && !testing.Short() {
		t.Fatal(err) // never skipped: scripts/ensure-deps.sh installs redis-server
	}
	r := smoke(t, "smoke-ledger")
	if !r.Redis {
		t.Error("result does not say the ledger was on")
	}
	if r.LedgerErrors != 0 || r.Undeduped != 0 || r.DedupeHits != 0 {
		t.Errorf("ledger errors %d, undeduped %d, dedupe hits %d: want 0 each (every call answered, no redelivery)", r.LedgerErrors, r.Undeduped, r.DedupeHits)
	}
}

// TestSmokeCluster runs smoke-rf3: three sidecars of a cluster, each with
// its app in one group; every message handled once, by the apps of all
// three nodes.
func TestSmokeCluster(t *testing.T) {
	r := smoke(t, "smoke-rf3")
	if r.Nodes != 3 || len(r.NodeMessages) != 3 {
		t.Fatalf("nodes %d, handled per node %v: want 3 nodes, each with its app", r.Nodes, r.NodeMessages)
	}
	for i, n := range r.NodeMessages {
		if n == 0 {
			t.Errorf("node %d's app handled nothing (per node: %v): the group's partitions were not shared", i+1, r.NodeMessages)
		}
	}
}

// TestSmokeRebalance runs smoke-rebalance: one sidecar of three restarted
// under load with the ledger on; nothing lost, nothing completed twice,
// the restarted node's partitions moved and the pause figures reported.
func TestSmokeRebalance(t *testing.T) {
	if _, err := redisBinary(); err != nil && !testing.Short() {
		t.Fatal(err) // never skipped: scripts/ensure-deps.sh installs redis-server
	}
	r := smoke(t, "smoke-rebalance")
	if len(r.Restarts) != 1 || r.MaxPauseMovedMs == nil || r.MaxPauseUnmovedMs == nil || r.MaxPauseSteadyMs == nil {
		t.Fatalf("restarts %+v, pause figures %v %v %v: want one restart and every figure", r.Restarts, r.MaxPauseUnmovedMs, r.MaxPauseMovedMs, r.MaxPauseSteadyMs)
	}
	rr := r.Restarts[0]
	t.Logf("restart: %+v; longest pauses: unmoved %.1f ms, moved %.1f ms, steady %.1f ms", rr, *r.MaxPauseUnmovedMs, *r.MaxPauseMovedMs, *r.MaxPauseSteadyMs)
	// Node 1 delivered its share (6 partitions / 3) before its SIGTERM: those moved at least.
	if rr.Node != 1 || rr.Moved < 2 {
		t.Errorf("restart of node %d moved %d partitions, want node 1 and at least 2", rr.Node, rr.Moved)
	}
	for i, n := range r.NodeMessages {
		if n == 0 {
			t.Errorf("node %d's app handled nothing (per node: %v)", i+1, r.NodeMessages)
		}
	}
}

func smoke(t *testing.T, name string) *Result {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real spoold: skipped with -short")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := buildSpoold(root, tmp, "./cmd/spoold")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // the run, without the build
	defer cancel()
	sc, err := loadScenario(filepath.Join(root, "loadtest", "scenarios"), name)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := run(ctx, bin, tmp, sc, profileSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d messages in %.3f s (%.0f msgs/s), p99 %.2f ms, sidecar %.1f µs/msg, redis %.1f µs/msg, RSS idle %.1f MiB peak %.1f MiB; run took %s",
		name, r.Messages, r.DurationS, r.MsgsPerS, r.P99Ms, r.SidecarCPUUsPerMsg, r.RedisCPUUsPerMsg, r.SidecarRSSMBIdle, r.SidecarRSSMBPeak, time.Since(start).Round(time.Millisecond))
	if len(r.Errors) > 0 {
		t.Errorf("errors: %q", r.Errors)
	}
	if !r.Verified || r.Lost != 0 || r.Duplicates != 0 {
		t.Errorf("verified %v, lost %d, duplicates %d: want every message handled exactly once", r.Verified, r.Lost, r.Duplicates)
	}
	if sc.Mode == "rebalance" { // the load runs until the restarts end; publishes fail while a sidecar is down
		if r.Messages == 0 {
			t.Error("no message handled")
		}
	} else {
		if r.PublishFailed != 0 {
			t.Errorf("publish failed %d, want 0", r.PublishFailed)
		}
		if r.Messages != int64(sc.Messages) {
			t.Errorf("handled %d distinct messages, want %d", r.Messages, sc.Messages)
		}
	}
	if r.SidecarRSSMBIdle <= 0 || r.SidecarRSSMBPeak < r.SidecarRSSMBIdle {
		t.Errorf("RSS idle %.1f MiB, peak %.1f MiB: sampling of /proc/<pid>/status is broken", r.SidecarRSSMBIdle, r.SidecarRSSMBPeak)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
		t.Error("no run dir was created")
	}
	return r
}

func TestSumMetrics(t *testing.T) {
	const text = `# HELP spool_ledger_errors_total Failed ledger calls.
# TYPE spool_ledger_errors_total counter
spool_ledger_errors_total{op="claim"} 3
spool_ledger_errors_total{op="complete"} 2
spool_ledger_errors_total_other 100
spool_dedupe_hits_total{group="g",topic="a b}"} 7 1700000000000
spool_dedupe_hits_total{group="g",topic="c"} 1e+06
`
	got, err := sumMetrics(strings.NewReader(text), "spool_ledger_errors_total", "spool_dedupe_hits_total", "spool_undeduped_deliveries_total")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"spool_ledger_errors_total": 5, "spool_dedupe_hits_total": 1_000_007, "spool_undeduped_deliveries_total": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if _, err := sumMetrics(strings.NewReader("spool_dedupe_hits_total{x=\"1\"} nope\n"), "spool_dedupe_hits_total"); err == nil {
		t.Error("a bad value must be an error")
	}
}

// TestSmokeConsumerPrograms runs the smoke scenario with each SDK's
// consumer program (consumer_sdk, loadtest/consumers/) as the app: every
// message handled once, the program's CPU measured. A language whose
// toolchain or SDK build is missing is skipped, saying what to build
// (`make build-sdk-python` and so on), unless SPOOL_LOADTEST_SDKS lists it
// (then it fails); go-process needs only Go.
func TestSmokeConsumerPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real spoold and consumer programs: skipped with -short")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	required := map[string]bool{"go-process": true}
	for _, l := range strings.Split(os.Getenv("SPOOL_LOADTEST_SDKS"), ",") {
		required[strings.TrimSpace(l)] = true
	}
	bin, err := buildSpoold(root, t.TempDir(), "./cmd/spoold")
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"go-process", "python", "typescript", "java"} {
		t.Run(lang, func(t *testing.T) {
			tmp := t.TempDir()
			if _, err := consumerCommand(root, tmp, lang); err != nil {
				if errors.Is(err, errSDKNotBuilt) && !required[lang] {
					t.Skipf("%v (set SPOOL_LOADTEST_SDKS=%s to make this a failure)", err, lang)
				}
				t.Fatal(err)
			}
			sc, err := loadScenario(filepath.Join(root, "loadtest", "scenarios"), "smoke")
			if err != nil {
				t.Fatal(err)
			}
			sc.ConsumerSDK = lang
			if err := sc.validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // a JVM start on a busy machine
			defer cancel()
			r, err := run(ctx, bin, tmp, sc, profileSpec{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d messages, %.0f msgs/s, consumer %.1f µs/msg, %.1f MiB VmHWM", lang, r.Messages, r.MsgsPerS, r.ConsumerCPUUsPerMsg, r.ConsumerHWMMB)
			if len(r.Errors) > 0 {
				t.Errorf("errors: %q", r.Errors)
			}
			if !r.Verified || r.Lost != 0 || r.Duplicates != 0 || r.Messages != int64(sc.Messages) {
				t.Errorf("verified %v, lost %d, duplicates %d, handled %d: want all %d handled exactly once", r.Verified, r.Lost, r.Duplicates, r.Messages, sc.Messages)
			}
			if r.ConsumerSDK != lang || r.ConsumerHWMMB <= 0 || r.P50Ms <= 0 {
				t.Errorf("consumer_sdk %q, consumer VmHWM %.1f MiB, p50 %.3f ms: the program's process and latency were not measured", r.ConsumerSDK, r.ConsumerHWMMB, r.P50Ms)
			}
		})
	}
}
