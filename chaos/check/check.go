// Package check checks the history of a fault run against what Spool
// promises (docs/semantics.md): it is pure — a history in, a result out —
// so that every rule is tested on crafted histories (check_test.go) before
// it judges a real run (chaos/).
//
// What a history holds: every message the workload published (all its
// attempts folded into one outcome), each node's copy of the topic's log as
// read after the faults healed, and every completion the consuming apps
// made. The rules:
//
//   - replicas identical: every node's copy of a partition holds the same
//     records (read after healing, once every replica caught up);
//   - no acknowledged publish lost: its partition's log holds its value at
//     the offset its publish returned;
//   - a value at two offsets only if an attempt of its publish had an
//     unknown outcome (a retry may store it again);
//   - no value whose publish definitely failed (every attempt refused,
//     none acknowledged) is ever stored, and no value nobody published;
//   - per producer and key, the log order is the publish order: every copy
//     of a message lies before the acknowledged offset of the producer's
//     next message of that key (a stale copy appended later is a reorder);
//   - appends are linearizable (porcupine, linearize.go): in each
//     partition the appends, every stored copy included, can be put in an
//     order that keeps real time (an append acknowledged before another
//     was invoked comes first, across producers and sidecars) in which
//     their offsets increase;
//   - with a majority of the replicas down (QuorumLost to To), no publish
//     invoked then is acknowledged before they are back;
//   - no message completed twice, except one first completed by the app of
//     a sidecar under a fault (killed, stopped, cut off), or by any app
//     while the ledger was down, during the fault or within KillWindow
//     before it: that completion could not reach the ledger (what the ledger does not promise: docs/ledger.md). A sidecar
//     that goes on delivering after the fault heals, and its app's
//     completions then, get no such allowance;
//   - after every network heal, and from the start and the end of a
//     degraded fault (a full disk), each sidecar publishes to every
//     partition within HealPublishBound: for each (sidecar, partition), a
//     probe (Publish.Probe) invoked at or after the heal is acknowledged
//     by then. A heal followed by another fault before the bound and
//     before that acknowledgement is not judged (the next fault may be the
//     cause).
//   - the log start and high watermark of a partition, and a group's
//     committed offset of it, as a client reads them through one sidecar,
//     never go back (a committed offset: except by an explicit reset of
//     the group); progress.go, which also measures each partition's pause
//     after each fault.
package check

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Publish is one message the workload published, all its attempts folded.
type Publish struct {
	Value    string // unique in the run; also the message id
	Key      string
	Producer int
	Seq      int // the producer's call order
	// Acked: an attempt was acknowledged at Partition/Offset.
	Acked     bool
	Partition int32
	Offset    int64
	// Unknown: an attempt's outcome was unknown (it may be stored).
	Unknown bool
	// Invoked and Done bound the publish (first attempt to last answer).
	Invoked, Done time.Time
	// Probe: published by a sidecar's probe (one attempt, through sidecar
	// Sidecar, with a key of Partition), for the publish-after-heal rule.
	// Probes are left out of the producers' figures.
	Probe   bool
	Sidecar int
}

// Failed reports whether the publish definitely failed: never acknowledged,
// no attempt with an unknown outcome.
func (p Publish) Failed() bool { return !p.Acked && !p.Unknown }

// Record is one record of a node's copy of the log.
type Record struct {
	Partition int32
	Offset    int64
	Value     string
}

// Completion is one message completed by a consuming app.
type Completion struct {
	Value     string
	Node      int // the sidecar the app consumes through
	Partition int32
	Token     uint64
	At        time.Time
}

// Fault is a fault of a node's spoold or link, From its start To its heal
// (a kill -9: to the restart).
type Fault struct {
	Node     int
	From, To time.Time
	// Network: the fault cut links (isolate, one-way): the
	// publish-after-heal rule applies from To.
	Network bool
	// Ledger: the ledger (Redis) was down, not a node (Node is then -1):
	// any app's completion in the fault, or within KillWindow before it,
	// may not have reached the ledger.
	Ledger bool
	// QuorumLost: from then until To a majority of every partition's
	// replicas was down (a two-node kill -9 of three): nothing invoked in
	// between may be acknowledged before To. Zero: not such a fault.
	QuorumLost time.Time
	// Degraded: the node ran on, degraded (its disk full): every sidecar,
	// its own included, must publish to every partition within
	// HealPublishBound of the fault's start, and of its end.
	Degraded bool
	// Graceful: an operator's restart of the node (SIGTERM: the sidecar
	// drains, hands its partitions and leaderships over, then stops), as in
	// a rolling upgrade: it allows no message completed twice.
	Graceful bool
}

// ElectionTimeoutMax is the longest a raft follower waits before it
// campaigns with the default settings (ElectionTicks 10 of 100 ms,
// randomized up to twice that: 1-2 s).
const ElectionTimeoutMax = 2 * time.Second

// HealPublishBound is how soon after a network heal every sidecar must
// publish to every partition again: an election timeout plus 2 s
// (docs/semantics.md).
const HealPublishBound = ElectionTimeoutMax + 2*time.Second

// KillWindow bounds how long before a fault a message completed by the
// faulted sidecar's app may be completed again (its completion still on its
// way to the ledger; docs/semantics.md states the bound).
const KillWindow = time.Second

// History is one run.
type History struct {
	Publishes   []Publish
	Logs        map[int][]Record // by node: its copy, in offset order per partition
	Completions []Completion
	Faults      []Fault
	// Sidecars and Partitions: the probes must cover sidecars 0..Sidecars-1
	// and partitions 0..Partitions-1 (0: no probes, the rule is off).
	Sidecars, Partitions int
	// Offsets and Committed: what clients read of the partitions' offsets
	// and of the groups' committed offsets during the run; Resets: the
	// explicit resets of committed offsets (progress.go).
	Offsets   []OffsetsSeen
	Committed []CommittedSeen
	Resets    []Reset
	// GroupOps: commits and reads of groups' committed offsets at their
	// coordinators (linearize_groups.go).
	GroupOps []GroupOp
}

// Result is what Check found.
type Result struct {
	Acked      int // publishes acknowledged
	Lost       int // acknowledged and not at their offset
	Duplicated int // values stored more than once (their publish's outcome was unknown: allowed)
	// Violations say what broke each rule, one line each (capped).
	Violations []string
	// CompletedTwice: messages completed more than once (allowed ones included).
	CompletedTwice int
	// LongestPublishGap is the longest time a producer (each publishes
	// through its own sidecar) went without an acknowledgement, between
	// its first and its last: the unavailability its sidecar showed.
	LongestPublishGap time.Duration
	// LongestRecovery is the longest time from a fault's heal to a
	// producer's next acknowledgement (every producer, every fault).
	LongestRecovery time.Duration
	// LongestHealPublish is the longest time from a heal (every fault
	// kind; after a kill -9, the restart) to a sidecar's first
	// acknowledgement on one partition, over every judged (sidecar,
	// partition, heal); UnjudgedHeals counts the triples left out because
	// the next fault began first.
	LongestHealPublish time.Duration
	UnjudgedHeals      int
	// LongestToCompletion is the longest time an acknowledged message
	// waited, from its acknowledgement to its first completion by an app:
	// the consumers' pause a fault caused (LongestToCompletionValue: which).
	LongestToCompletion      time.Duration
	LongestToCompletionValue string
	// Pauses: per fault and partition, how long it went without an
	// acknowledged publish and without a completion once the fault began;
	// LongestPartitionPause is the longest publish pause of them.
	Pauses                []PartitionPause
	LongestPartitionPause time.Duration
	// Observed counts the readings of offsets and committed offsets the
	// never-go-back rules judged; BackAfterRestart counts those lower
	// through a restarted sidecar than before its restart (not judged;
	// the first few in BackAfterRestartExamples).
	Observed                 int
	BackAfterRestart         int
	BackAfterRestartExamples []string

	linearization *linearization // a failed linearizability check (Visualize)
}

// maxViolations caps the lines kept per run.
const maxViolations = 50

func (r *Result) violate(format string, args ...any) {
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	} else if len(r.Violations) == maxViolations {
		r.Violations = append(r.Violations, "... (more)")
	}
}

// OK reports whether no rule broke.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Check applies every rule to h.
func Check(h History) Result {
	var r Result
	nodes := make([]int, 0, len(h.Logs))
	for n := range h.Logs {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	if len(nodes) == 0 {
		r.violate("no node's log was read")
		return r
	}
	ref := h.Logs[nodes[0]]
	for _, n := range nodes[1:] {
		if d := firstDifference(ref, h.Logs[n]); d != "" {
			r.violate("replicas differ: node %d and node %d: %s", nodes[0], n, d)
		}
	}
	type pos struct {
		p int32
		o int64
	}
	at := map[pos]string{}
	copies := map[string][]Record{}
	for _, rec := range ref {
		k := pos{rec.Partition, rec.Offset}
		if v, ok := at[k]; ok {
			r.violate("partition %d offset %d read twice: %q and %q", rec.Partition, rec.Offset, v, rec.Value)
			continue
		}
		at[k] = rec.Value
		copies[rec.Value] = append(copies[rec.Value], rec)
	}
	pubs := map[string]Publish{}
	for _, p := range h.Publishes {
		pubs[p.Value] = p
	}
	for v, cs := range copies {
		p, ok := pubs[v]
		switch {
		case !ok:
			r.violate("%q stored at %d/%d, but nobody published it", v, cs[0].Partition, cs[0].Offset)
		case p.Failed():
			r.violate("%q stored at %d/%d, but its publish definitely failed", v, cs[0].Partition, cs[0].Offset)
		case len(cs) > 1 && !p.Unknown:
			r.violate("%q stored %d times (%d/%d, %d/%d), but no attempt of its publish had an unknown outcome", v, len(cs), cs[0].Partition, cs[0].Offset, cs[1].Partition, cs[1].Offset)
		case len(cs) > 1:
			r.Duplicated++
		}
	}
	ackTimes := map[int][]time.Time{}
	for _, p := range h.Publishes {
		if !p.Acked {
			continue
		}
		r.Acked++
		if p.Probe {
			continue
		}
		ackTimes[p.Producer] = append(ackTimes[p.Producer], p.Done)
		if v, ok := at[pos{p.Partition, p.Offset}]; !ok || v != p.Value {
			r.Lost++
			r.violate("LOST: %q acknowledged at %d/%d, which holds %q", p.Value, p.Partition, p.Offset, v)
		}
	}
	r.noQuorum(h)
	r.reorders(h.Publishes, copies)
	r.linearizable(h, copies)
	r.groupCommitsLinearizable(h.GroupOps)
	r.completions(h)
	r.toCompletion(h)
	r.healPublish(h)
	r.offsetsNeverBack(h.Offsets)
	r.committedNeverBack(h.Committed, h.Resets)
	r.Observed = len(h.Offsets) + len(h.Committed)
	r.pauses(h)
	for _, ts := range ackTimes {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for _, f := range h.Faults {
			if i, _ := slices.BinarySearchFunc(ts, f.To, func(a, b time.Time) int { return a.Compare(b) }); i < len(ts) {
				r.LongestRecovery = max(r.LongestRecovery, ts[i].Sub(f.To))
			}
		}
		for i := 1; i < len(ts); i++ {
			r.LongestPublishGap = max(r.LongestPublishGap, ts[i].Sub(ts[i-1]))
		}
	}
	return r
}

// reorders: per producer and key, every copy of a message lies before the
// acknowledged offset of the producer's later messages of that key.
func (r *Result) reorders(pubs []Publish, copies map[string][]Record) {
	type pk struct {
		producer int
		key      string
	}
	by := map[pk][]Publish{}
	for _, p := range pubs {
		by[pk{p.Producer, p.Key}] = append(by[pk{p.Producer, p.Key}], p)
	}
	for k, ps := range by {
		slices.SortFunc(ps, func(a, b Publish) int { return a.Seq - b.Seq })
		// later[i]: the lowest acknowledged offset of ps[i+1:] (and its value).
		lowest, lowestV := int64(-1), ""
		for i := len(ps) - 1; i >= 0; i-- {
			for _, c := range copies[ps[i].Value] {
				if lowest >= 0 && c.Offset > lowest {
					r.violate("REORDERED: producer %d key %q: %q at %d/%d, after %q (published later) at offset %d", k.producer, k.key, ps[i].Value, c.Partition, c.Offset, lowestV, lowest)
				}
			}
			if ps[i].Acked && (lowest < 0 || ps[i].Offset < lowest) {
				lowest, lowestV = ps[i].Offset, ps[i].Value
			}
		}
	}
}

// noQuorum: nothing invoked after a majority of the replicas went down is
// acknowledged before they came back.
func (r *Result) noQuorum(h History) {
	for _, f := range h.Faults {
		if f.QuorumLost.IsZero() {
			continue
		}
		for _, p := range h.Publishes {
			if p.Acked && !p.Invoked.Before(f.QuorumLost) && !p.Done.After(f.To) {
				r.violate("ACKNOWLEDGED WITHOUT A QUORUM: %q at %d/%d, invoked at %s and acknowledged at %s, while a majority of the replicas was down (%s to %s)",
					p.Value, p.Partition, p.Offset, p.Invoked.Format("15:04:05.000"), p.Done.Format("15:04:05.000"), f.QuorumLost.Format("15:04:05.000"), f.To.Format("15:04:05.000"))
			}
		}
	}
}

// toCompletion finds the longest wait from an acknowledgement to the
// message's first completion.
func (r *Result) toCompletion(h History) {
	first := map[string]time.Time{}
	for _, c := range h.Completions {
		if t, ok := first[c.Value]; !ok || c.At.Before(t) {
			first[c.Value] = c.At
		}
	}
	for _, p := range h.Publishes {
		if t, ok := first[p.Value]; ok && p.Acked && t.Sub(p.Done) > r.LongestToCompletion {
			r.LongestToCompletion, r.LongestToCompletionValue = t.Sub(p.Done), p.Value
		}
	}
}

// completions: a message completed twice only as a fault allows.
func (r *Result) completions(h History) {
	by := map[string][]Completion{}
	for _, c := range h.Completions {
		by[c.Value] = append(by[c.Value], c)
	}
	for v, cs := range by {
		if len(cs) < 2 {
			continue
		}
		r.CompletedTwice++
		slices.SortFunc(cs, func(a, b Completion) int { return a.At.Compare(b.At) })
		first := cs[0]
		allowed := len(cs) == 2 && slices.ContainsFunc(h.Faults, func(f Fault) bool {
			return !f.Graceful && (f.Node == first.Node || f.Ledger) && !first.At.Before(f.From.Add(-KillWindow)) && !first.At.After(f.To) && cs[1].At.After(f.From) && cs[1].Token > first.Token
		})
		if !allowed {
			r.violate("COMPLETED TWICE: %q by node %d's app at %s (token %d), then node %d's at %s (token %d), not during or just before a fault of node %d",
				v, first.Node, first.At.Format("15:04:05.000"), first.Token, cs[1].Node, cs[1].At.Format("15:04:05.000"), cs[1].Token, first.Node)
		}
	}
}

// healPublish: after every network heal, and from the start and the end of
// every degraded fault, each sidecar's probes reach every partition within
// HealPublishBound.
func (r *Result) healPublish(h History) {
	type sp struct {
		s int
		p int32
	}
	probes := map[sp][]Publish{}
	for _, p := range h.Publishes {
		if p.Probe && p.Acked {
			probes[sp{p.Sidecar, p.Partition}] = append(probes[sp{p.Sidecar, p.Partition}], p)
		}
	}
	for _, f := range h.Faults {
		// The instants judged from: the heal (every kind is measured; a
		// network fault's and a degraded one's are judged), and the start
		// of a degraded fault (the node runs on, degraded).
		type from struct {
			at     time.Time
			what   string
			judged bool
			next   time.Time // the next fault event after at (zero: none)
		}
		var next time.Time // the next fault to begin after this heal (any node)
		for _, g := range h.Faults {
			if g.From.After(f.To) && (next.IsZero() || g.From.Before(next)) {
				next = g.From
			}
		}
		froms := []from{{f.To, "heal", f.Network || f.Degraded, next}}
		if f.Degraded {
			froms = append(froms, from{f.From, "fault", true, f.To})
		}
		for _, fr := range froms {
			for s := range h.Sidecars {
				for p := range int32(h.Partitions) {
					r.publishedAfter(probes[sp{s, p}], s, p, f.Node, fr.at, fr.what, fr.judged, fr.next)
				}
			}
		}
	}
}

// publishedAfter judges one (sidecar, partition) from one instant: a probe
// invoked at or after at must be acknowledged within HealPublishBound. An
// instant followed by the next fault event within the bound, before that
// acknowledgement, is not judged.
func (r *Result) publishedAfter(probes []Publish, s int, p int32, node int, at time.Time, what string, judged bool, next time.Time) {
	var first time.Time // the earliest ack of a probe invoked at or after at
	for _, pr := range probes {
		if !pr.Invoked.Before(at) && (first.IsZero() || pr.Done.Before(first)) {
			first = pr.Done
		}
	}
	if !next.IsZero() && next.Before(at.Add(HealPublishBound)) && (first.IsZero() || first.After(next)) {
		r.UnjudgedHeals++
		return
	}
	if !first.IsZero() {
		r.LongestHealPublish = max(r.LongestHealPublish, first.Sub(at))
	}
	switch {
	case !judged:
	case first.IsZero():
		r.violate("NO PUBLISH AFTER %s: sidecar %d, partition %d: no probe invoked after node %d's %s at %s was acknowledged before the run ended (bound %v)",
			strings.ToUpper(what), s, p, node, what, at.Format("15:04:05.000"), HealPublishBound)
	case first.Sub(at) > HealPublishBound:
		r.violate("SLOW PUBLISH AFTER %s: sidecar %d, partition %d: first probe acknowledged %v after node %d's %s at %s (bound %v)",
			strings.ToUpper(what), s, p, first.Sub(at).Round(time.Millisecond), node, what, at.Format("15:04:05.000"), HealPublishBound)
	}
}

// firstDifference describes where two copies of the log first differ ("":
// they do not).
func firstDifference(a, b []Record) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("record %d: %d/%d %q vs %d/%d %q", i, a[i].Partition, a[i].Offset, a[i].Value, b[i].Partition, b[i].Offset, b[i].Value)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d records vs %d", len(a), len(b))
	}
	return ""
}
