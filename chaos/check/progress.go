package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// The progress rules: what clients read of a partition's offsets and of a
// group's committed offsets never goes back, and the pause each fault
// caused on each partition (reported, not judged).

// OffsetsSeen is what one client read of a partition's offsets through one
// sidecar (AdminService.ListTopics): its log start and its high watermark
// (the committed end).
type OffsetsSeen struct {
	Observer int // the sidecar asked
	// Run counts the observer's starts: the rule judges the answers of one
	// run of the sidecar (a restart is counted apart: BackAfterRestart).
	Run        int
	Partition  int32
	At         time.Time // when the answer came
	Start, End int64
}

// CommittedSeen is a group's committed offset of a partition as one
// client read it through one sidecar (AdminService.ListGroups).
type CommittedSeen struct {
	Observer  int
	Run       int // as in OffsetsSeen
	Group     string
	Partition int32
	At        time.Time
	Offset    int64
}

// Reset is an explicit reset of a group's committed offsets
// (AdminService.ResetOffsets), invoked at From and answered at To: the
// only thing that may move them back.
type Reset struct {
	Group    string
	From, To time.Time
}

// PartitionPause is how long a partition went without an acknowledged
// publish, and without a completion, after a fault began: the longest gap
// between two acknowledgements (two completions) on it that ends after the
// fault's start and begins before its heal, counted from the start at the
// earliest. Zero: no gap reached into the fault.
type PartitionPause struct {
	Fault      int // the index in History.Faults
	Node       int
	Partition  int32
	Publish    time.Duration
	Completion time.Duration
}

// offsetsNeverBack: per sidecar and partition, in the order the answers
// came, neither the log start nor the high watermark goes back while the
// sidecar runs. A client that keeps asking one sidecar must never see
// acknowledged data vanish (a high watermark going back) or deleted data
// reappear (a log start going back). Different sidecars may answer from
// replicas at different points (a follower's committed end lags the
// leader's): the rule is per sidecar, as a client reads through its own.
// Across a restart of the sidecar the values are compared too, but
// counted (BackAfterRestart), not judged: a restarted node answers from
// what it saved until it hears the controller and the leaders
// (docs/reliability.md).
func (r *Result) offsetsNeverBack(seen []OffsetsSeen) {
	type key struct {
		obs int
		p   int32
	}
	by := map[key][]OffsetsSeen{}
	for _, s := range seen {
		by[key{s.Observer, s.Partition}] = append(by[key{s.Observer, s.Partition}], s)
	}
	for k, ss := range by {
		slices.SortStableFunc(ss, func(a, b OffsetsSeen) int { return a.At.Compare(b.At) })
		for i := 1; i < len(ss); i++ {
			prev, cur := ss[i-1], ss[i]
			if cur.Run != prev.Run {
				if cur.End < prev.End || cur.Start < prev.Start {
					r.backAfterRestart(fmt.Sprintf("sidecar %d, partition %d: offsets %d-%d at %s, then %d-%d at %s after its restart",
						k.obs, k.p, prev.Start, prev.End, prev.At.Format("15:04:05.000"), cur.Start, cur.End, cur.At.Format("15:04:05.000")))
				}
				continue
			}
			if cur.End < prev.End {
				r.violate("HIGH WATERMARK WENT BACK: sidecar %d, partition %d: %d at %s, then %d at %s",
					k.obs, k.p, prev.End, prev.At.Format("15:04:05.000"), cur.End, cur.At.Format("15:04:05.000"))
			}
			if cur.Start < prev.Start {
				r.violate("LOG START WENT BACK: sidecar %d, partition %d: %d at %s, then %d at %s",
					k.obs, k.p, prev.Start, prev.At.Format("15:04:05.000"), cur.Start, cur.At.Format("15:04:05.000"))
			}
		}
	}
}

// committedNeverBack: per sidecar, group and partition, in the order the
// answers came, the committed offset never goes back while the sidecar
// runs, unless a reset of the group could have taken effect between the
// two answers (across a restart: counted, as in offsetsNeverBack).
func (r *Result) committedNeverBack(seen []CommittedSeen, resets []Reset) {
	type key struct {
		obs   int
		group string
		p     int32
	}
	by := map[key][]CommittedSeen{}
	for _, s := range seen {
		k := key{s.Observer, s.Group, s.Partition}
		by[k] = append(by[k], s)
	}
	for k, ss := range by {
		slices.SortStableFunc(ss, func(a, b CommittedSeen) int { return a.At.Compare(b.At) })
		for i := 1; i < len(ss); i++ {
			prev, cur := ss[i-1], ss[i]
			if cur.Offset >= prev.Offset {
				continue
			}
			if cur.Run != prev.Run {
				r.backAfterRestart(fmt.Sprintf("sidecar %d, group %q, partition %d: committed %d at %s, then %d at %s after its restart",
					k.obs, k.group, k.p, prev.Offset, prev.At.Format("15:04:05.000"), cur.Offset, cur.At.Format("15:04:05.000")))
				continue
			}
			reset := slices.ContainsFunc(resets, func(rs Reset) bool {
				return rs.Group == k.group && rs.From.Before(cur.At) && rs.To.After(prev.At)
			})
			if !reset {
				r.violate("COMMITTED OFFSET WENT BACK: group %q, partition %d, through sidecar %d: %d at %s, then %d at %s, with no reset of the group between",
					k.group, k.p, k.obs, prev.Offset, prev.At.Format("15:04:05.000"), cur.Offset, cur.At.Format("15:04:05.000"))
			}
		}
	}
}

// backAfterRestart counts an offset read lower after the sidecar's
// restart than before it, keeping the first few.
func (r *Result) backAfterRestart(what string) {
	r.BackAfterRestart++
	if len(r.BackAfterRestartExamples) < 5 {
		r.BackAfterRestartExamples = append(r.BackAfterRestartExamples, what)
	}
}

// pauses measures, for every fault and partition, the longest the
// partition went without an acknowledged publish and without a completion
// once the fault began (PartitionPause).
func (r *Result) pauses(h History) {
	acks := map[int32][]time.Time{}
	for _, p := range h.Publishes {
		if p.Acked {
			acks[p.Partition] = append(acks[p.Partition], p.Done)
		}
	}
	comps := map[int32][]time.Time{}
	for _, c := range h.Completions {
		comps[c.Partition] = append(comps[c.Partition], c.At)
	}
	for _, ts := range acks {
		slices.SortFunc(ts, time.Time.Compare)
	}
	for _, ts := range comps {
		slices.SortFunc(ts, time.Time.Compare)
	}
	for i, f := range h.Faults {
		for p := range int32(h.Partitions) {
			pp := PartitionPause{Fault: i, Node: f.Node, Partition: p, Publish: longestGap(acks[p], f), Completion: longestGap(comps[p], f)}
			r.Pauses = append(r.Pauses, pp)
			r.LongestPartitionPause = max(r.LongestPartitionPause, pp.Publish)
		}
	}
	slices.SortStableFunc(r.Pauses, func(a, b PartitionPause) int { return cmp.Compare(a.Fault, b.Fault) })
}

// longestGap is the longest gap between consecutive times of ts (sorted)
// that ends after f's start and begins before its heal, counted from the
// start at the earliest.
func longestGap(ts []time.Time, f Fault) time.Duration {
	var longest time.Duration
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		if !b.After(f.From) || !a.Before(f.To) {
			continue
		}
		if a.Before(f.From) {
			a = f.From
		}
		longest = max(longest, b.Sub(a))
	}
	return longest
}
