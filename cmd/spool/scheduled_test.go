package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScheduled: produce with --deliver-after and --deliver-at, list the
// scheduled messages page by page, cancel one (it leaves the list), and
// the refusals: an unknown id, a message published without a time, one
// already due, a time without its zone.
func TestScheduled(t *testing.T) {
	s := startSidecar(t)
	produce := func(id string, args ...string) {
		t.Helper()
		if r := s.spool("", false, append([]string{"produce", ordersT, "payload of " + id, "--id", id}, args...)...); r.code != 0 {
			t.Fatalf("produce %s: exit %d: %s", id, r.code, r.stderr)
		}
	}
	produce("r1", "--key", "k1", "--deliver-after", "1h")
	produce("r2", "--key", "k2", "--deliver-at", time.Now().Add(2*time.Hour).Format(time.RFC3339))
	produce("r3", "--key", "k3", "--deliver-after", "90m")
	produce("p1", "--key", "k1")
	produce("d1", "--key", "k1", "--deliver-at", time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	s.waitEnd(ordersT, 5) // readers see a publish once committed, a moment after its answer

	list := func(args ...string) (ids []string, cursor string) {
		t.Helper()
		r := s.spool("", false, append([]string{"scheduled", "list", ordersT, "-o", "json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("scheduled list %v: exit %d: %s", args, r.code, r.stderr)
		}
		var views []scheduledView
		if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
			t.Fatalf("scheduled list: %v\n%s", err, r.stdout)
		}
		for _, v := range views {
			if v.DeliverAt == "" || v.Published == "" || v.PayloadBytes == 0 || v.Key == nil {
				t.Errorf("listed %+v: fields missing", v)
			}
			ids = append(ids, v.ID)
		}
		if m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stderr); m != nil {
			cursor = m[1]
		}
		return ids, cursor
	}
	first, cur := list("--limit", "2")
	if len(first) != 2 || cur == "" {
		t.Fatalf("first page %v, cursor %q: want 2 messages and a cursor", first, cur)
	}
	rest, _ := list("--cursor", cur)
	all := append(first, rest...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"r1", "r2", "r3"}) {
		t.Fatalf("listed %v over two pages, want r1 r2 r3 (not the plain p1, not d1 which is due)", all)
	}

	r := s.spool("", false, "scheduled", "cancel", ordersT, "r1", "--key", "k1", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"id": "r1"`) {
		t.Fatalf("cancel r1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.spool("", false, "scheduled", "cancel", ordersT, "r1"); r.code != 0 {
		t.Fatalf("cancel r1 again (a search of every partition): exit %d: %s", r.code, r.stderr)
	}
	s.waitEnd(ordersT, 7) // and the two cancel records
	if ids, _ := list(); !slices.Equal(sorted(ids), []string{"r2", "r3"}) {
		t.Fatalf("listed %v after cancelling r1, want r2 r3", ids)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"scheduled", "cancel", ordersT, "nope"}, exitFailed, "UNKNOWN_SCHEDULED_MESSAGE"},
		{[]string{"scheduled", "cancel", ordersT, "p1", "--key", "k1"}, exitFailed, "published without a delivery time"},
		{[]string{"scheduled", "cancel", ordersT, "d1", "--key", "k1"}, exitFailed, "SCHEDULE_DUE"},
		{[]string{"scheduled", "cancel", ordersT, "r2", "--partition", "0"}, exitUsage, "go together"},
		{[]string{"produce", ordersT, "x", "--deliver-at", "2031-03-01T09:00:00"}, exitUsage, "without its zone"},
		{[]string{"produce", ordersT, "x", "--deliver-after", "500ms"}, exitFailed, "INVALID_SCHEDULE"},
		{[]string{"produce", ordersT, "x", "--deliver-in-key-order"}, exitFailed, "without a delivery time"},
		{[]string{"scheduled", "list", ordersT, "--cursor", "9:0"}, exitFailed, "INVALID_CURSOR"},
	} {
		r := s.spool("", false, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("spool %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.says)
		}
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }
