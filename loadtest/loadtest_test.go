package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSmoke runs the smoke scenario (2,000 messages, publish and consume at
// once) against a real spoold process and checks that every acknowledged
// message was handled exactly once.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real spoold: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := buildSpoold(root, tmp, "./cmd/spoold")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := loadScenario(filepath.Join(root, "loadtest", "scenarios"), "smoke")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := run(ctx, bin, tmp, sc, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("smoke: %d messages in %.3f s (%.0f msgs/s), p99 %.2f ms, sidecar %.1f µs/msg, RSS idle %.1f MiB peak %.1f MiB; run took %s",
		r.Messages, r.DurationS, r.MsgsPerS, r.P99Ms, r.SidecarCPUUsPerMsg, r.SidecarRSSMBIdle, r.SidecarRSSMBPeak, time.Since(start).Round(time.Millisecond))
	if len(r.Errors) > 0 {
		t.Errorf("errors: %q", r.Errors)
	}
	if !r.Verified || r.Lost != 0 || r.Duplicates != 0 || r.PublishFailed != 0 {
		t.Errorf("verified %v, lost %d, duplicates %d, publish failed %d: want every message handled exactly once", r.Verified, r.Lost, r.Duplicates, r.PublishFailed)
	}
	if r.Messages != int64(sc.Messages) {
		t.Errorf("handled %d distinct messages, want %d", r.Messages, sc.Messages)
	}
	if r.SidecarRSSMBIdle <= 0 || r.SidecarRSSMBPeak < r.SidecarRSSMBIdle {
		t.Errorf("RSS idle %.1f MiB, peak %.1f MiB: sampling of /proc/<pid>/status is broken", r.SidecarRSSMBIdle, r.SidecarRSSMBPeak)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
		t.Error("no run dir was created")
	}
}
