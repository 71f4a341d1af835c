package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/sidecar/config"
)

// TestTopicCreateFileBudget: a sidecar with guards.max_open_files refuses
// `spool topic create` whose partitions would take the files its log
// keeps open past the budget, in one line naming the setting, creates a
// topic that fits, and reports spool_open_files{,_limit} on /metrics.
func TestTopicCreateFileBudget(t *testing.T) {
	s := startSidecarWith(t, func(c *config.Config) { c.Guards.MaxOpenFiles = 64 })
	r := s.spool("", false, "topic", "create", "wide", "--partitions", "32")
	if r.code != 1 || !strings.Contains(r.stderr, "guards.max_open_files") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("32 partitions past a budget of 64 files: exit %d:\n%s", r.code, r.stderr)
	}
	if r := s.spool("", false, "topic", "create", "narrow", "--partitions", "2"); r.code != 0 {
		t.Fatalf("2 partitions within the budget: exit %d:\n%s", r.code, r.stderr)
	}
	if r := s.spool("", false, "topic", "describe", "wide"); r.code == 0 {
		t.Fatalf("the refused topic exists:\n%s", r.stdout)
	}
	openRe := regexp.MustCompile(`(?m)^spool_open_files (\d+)$`)
	var open int
	eventually(t, 10*time.Second, "spool_open_files with narrow's partitions and limit 64", func() bool {
		resp, err := http.Get("http://" + s.admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := openRe.FindSubmatch(body)
		if m == nil || !strings.Contains(string(body), "\nspool_open_files_limit 64\n") {
			return false
		}
		open, _ = strconv.Atoi(string(m[1]))
		// The lock and three files for each partition of orders (3), jobs (1) and narrow (2).
		return open >= 1+3*(3+1+2)
	})
	if open > 64 {
		t.Fatalf("spool_open_files %d past the budget of 64", open)
	}
}
