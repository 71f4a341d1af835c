package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spoolmq/spool/chaos/check"
)

// report sums the runs by fault kind (report.md).
type report struct {
	rows  map[string]*row
	notes []string // what a kind could not do here (a delay without sch_netem)
	// pauses: per run, each fault's pause per partition (check.Result.Pauses).
	pauses []string
}

// note adds a line the report prints above its table.
func (rep *report) note(format string, args ...any) {
	rep.notes = append(rep.notes, fmt.Sprintf(format, args...))
}

type row struct {
	runs, failed, broken    int
	acked, lost, duplicated int
	completedTwice          int
	longestGap              time.Duration
	longestRecovery         time.Duration
	longestHealPublish      time.Duration
	healPublishSeed         uint64
	longestToCompletion     time.Duration
	toCompletionSeed        uint64
	longestPause            time.Duration // a partition without an acknowledgement once a fault began
	longestCompletionPause  time.Duration // and without a completion
	pauseSeed               uint64
	backAfterRestart        int // offsets read lower through a sidecar after its restart
	worstSeed               uint64
	violations              []string
}

func (rep *report) add(kind string, seed uint64, res check.Result, err error) {
	if rep.rows == nil {
		rep.rows = map[string]*row{}
	}
	r := rep.rows[kind]
	if r == nil {
		r = &row{}
		rep.rows[kind] = r
	}
	r.runs++
	switch {
	case err != nil:
		r.failed++
		r.violations = append(r.violations, fmt.Sprintf("seed %d: run failed: %v", seed, err))
		return
	case !res.OK():
		r.broken++
		for _, v := range res.Violations {
			r.violations = append(r.violations, fmt.Sprintf("seed %d: %s", seed, v))
		}
	}
	rep.addPauses(kind, seed, res)
	if res.LongestPartitionPause > r.longestPause {
		r.longestPause, r.pauseSeed = res.LongestPartitionPause, seed
	}
	for _, p := range res.Pauses {
		r.longestCompletionPause = max(r.longestCompletionPause, p.Completion)
	}
	r.backAfterRestart += res.BackAfterRestart
	r.acked += res.Acked
	r.lost += res.Lost
	r.duplicated += res.Duplicated
	r.completedTwice += res.CompletedTwice
	r.longestRecovery = max(r.longestRecovery, res.LongestRecovery)
	if res.LongestHealPublish > r.longestHealPublish {
		r.longestHealPublish, r.healPublishSeed = res.LongestHealPublish, seed
	}
	if res.LongestToCompletion > r.longestToCompletion {
		r.longestToCompletion, r.toCompletionSeed = res.LongestToCompletion, seed
	}
	if res.LongestPublishGap > r.longestGap {
		r.longestGap, r.worstSeed = res.LongestPublishGap, seed
	}
}

// addPauses keeps one line per fault of a run: each partition's pause.
func (rep *report) addPauses(kind string, seed uint64, res check.Result) {
	var b strings.Builder
	for i, p := range res.Pauses {
		if i == 0 || res.Pauses[i-1].Fault != p.Fault {
			if i > 0 {
				rep.pauses = append(rep.pauses, b.String())
				b.Reset()
			}
			who := fmt.Sprintf("node %d", p.Node+1)
			if p.Node < 0 {
				who = "the ledger"
			}
			fmt.Fprintf(&b, "- %s seed %d, fault %d (%s):", kind, seed, p.Fault+1, who)
		}
		fmt.Fprintf(&b, " p%d %v / %v", p.Partition, p.Publish.Round(time.Millisecond), p.Completion.Round(time.Millisecond))
	}
	if b.Len() > 0 {
		rep.pauses = append(rep.pauses, b.String())
	}
}

func (rep *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fault runs, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	for _, n := range rep.notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(rep.notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("| fault | runs | runs that did not finish | runs that broke a rule | acknowledged | lost | duplicated (unknown outcome) | completed twice (kill -9 allows) | longest gap between a producer's acknowledgements (seed) | longest from a heal to a producer's next acknowledgement | longest from a heal to a sidecar's first acknowledgement on a partition (seed) | longest from an acknowledgement to the first completion (seed) | longest partition pause after a fault: publish (seed) / completion | offsets lower after their sidecar's restart |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	kinds := make([]string, 0, len(rep.rows))
	for k := range rep.rows {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		r := rep.rows[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %v (%d) | %v | %v (%d) | %v (%d) | %v (%d) / %v | %d |\n", k, r.runs, r.failed, r.broken, r.acked, r.lost, r.duplicated, r.completedTwice, r.longestGap.Round(time.Millisecond), r.worstSeed, r.longestRecovery.Round(time.Millisecond), r.longestHealPublish.Round(time.Millisecond), r.healPublishSeed, r.longestToCompletion.Round(time.Millisecond), r.toCompletionSeed,
			r.longestPause.Round(time.Millisecond), r.pauseSeed, r.longestCompletionPause.Round(time.Millisecond), r.backAfterRestart)
	}
	for _, k := range kinds {
		if vs := rep.rows[k].violations; len(vs) > 0 {
			fmt.Fprintf(&b, "\n## %s: what broke\n\n", k)
			for _, v := range vs[:min(len(vs), 30)] {
				fmt.Fprintf(&b, "- %s\n", v)
			}
		}
	}
	if len(rep.pauses) > 0 {
		b.WriteString("\n## Each fault's pause per partition\n\nFrom the fault's start, the longest a partition went without an acknowledged publish / without a completion (`check.PartitionPause`).\n\n")
		for _, l := range rep.pauses {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
