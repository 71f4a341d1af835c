package check

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// commit and read are group operations on verify/0 by client c, invoked
// and answered at the given milliseconds after t0.
func commit(c int, off int64, from, to int) GroupOp {
	return GroupOp{Client: c, Group: "verify", Commit: true, Offset: off, Invoked: t0.Add(time.Duration(from) * time.Millisecond), Done: t0.Add(time.Duration(to) * time.Millisecond)}
}

func read(c int, off int64, from, to int) GroupOp {
	o := commit(c, off, from, to)
	o.Commit = false
	return o
}

func TestLinearizableGroupCommits(t *testing.T) {
	unknown := func(o GroupOp) GroupOp { o.Unknown = true; return o }
	failed := func(o GroupOp) GroupOp { o.Failed = true; return o }
	other := func(o GroupOp) GroupOp { o.Partition = 1; return o }
	cases := []struct {
		name string
		ops  []GroupOp
		ok   bool
	}{
		{"nothing committed", []GroupOp{read(0, -1, 0, 1)}, true},
		{"a read after a commit", []GroupOp{commit(0, 5, 0, 1), read(1, 5, 2, 3)}, true},
		{"a read during a commit sees either", []GroupOp{commit(0, 5, 0, 10), read(1, -1, 1, 2), read(2, 5, 3, 4)}, true},
		// A stale read: the commit of 7 was acknowledged before the read began.
		{"a read older than an acknowledged commit", []GroupOp{commit(0, 5, 0, 1), commit(0, 7, 2, 3), read(1, 5, 4, 5)}, false},
		// Going back: once a read saw 7, a later read cannot see 5.
		{"a read going back", []GroupOp{commit(0, 5, 0, 1), commit(0, 7, 2, 20), read(1, 7, 3, 4), read(2, 5, 5, 6)}, false},
		{"an unknown commit may take effect late", []GroupOp{unknown(commit(0, 9, 0, 0)), commit(1, 5, 1, 2), read(2, 9, 10, 11)}, true},
		{"an unknown commit never before its call", []GroupOp{commit(1, 5, 0, 1), read(2, 9, 2, 3), unknown(commit(0, 9, 5, 5))}, false},
		{"a failed commit is never read", []GroupOp{commit(0, 5, 0, 1), failed(commit(0, 9, 2, 3)), read(1, 9, 4, 5)}, false},
		{"a value nobody committed", []GroupOp{commit(0, 5, 0, 1), read(1, 6, 2, 3)}, false},
		{"partitions are registers of their own", []GroupOp{commit(0, 5, 0, 1), other(commit(0, 2, 2, 3)), read(1, 5, 4, 5), other(read(1, 2, 4, 5))}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(History{Logs: both(recs()), GroupOps: c.ops})
			lin := !strings.Contains(strings.Join(r.Violations, "\n"), "GROUP COMMITS NOT LINEARIZABLE")
			if lin != c.ok {
				t.Fatalf("linearizable = %v, want %v; violations: %q", lin, c.ok, r.Violations)
			}
			var page bytes.Buffer
			wrote, err := r.Visualize(&page)
			if err != nil || wrote == c.ok || (wrote && !strings.Contains(page.String(), "<html")) {
				t.Fatalf("Visualize wrote %v (%d bytes), err %v; want a page only for a violation", wrote, page.Len(), err)
			}
		})
	}
}
