package dlq

import (
	"cmp"
	"slices"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Limits of a summary.
const (
	// DefaultTopKeys and MaxTopKeys bound the keys a summary returns.
	DefaultTopKeys = 10
	MaxTopKeys     = 100
	// MaxSummaryKeys bounds the distinct keys one call counts; beyond it,
	// new keys are counted in other_keys only (a summary holds at most this
	// many keys in memory, whatever the dead-letter topic holds).
	MaxSummaryKeys = 10_000
	// MaxSummaryReasons bounds the distinct reasons counted; beyond it, new
	// reasons count as OtherReason.
	MaxSummaryReasons = 1_000
)

// OtherReason counts the entries of reasons beyond MaxSummaryReasons.
const OtherReason = "(other reasons)"

// Summarize counts the matching dead letters of one page of the
// dead-letter topic (q.ScanRecords records at most) by reason, key and
// hour, and returns a cursor to count on. Counts of successive pages add
// up; the key counts are those of this page.
func Summarize(eng Engine, q Query, topKeys int) (*spoolv1.SummarizeDeadLettersResponse, error) {
	if topKeys <= 0 {
		topKeys = DefaultTopKeys
	}
	topKeys = min(topKeys, MaxTopKeys)
	r, err := newReader(eng, q, FetchBytes, scanBudget(q.ScanRecords))
	if err != nil {
		return nil, err
	}
	out := &spoolv1.SummarizeDeadLettersResponse{}
	reasons := map[string]uint64{}
	keys := map[string]uint64{}
	hours := map[int64]uint64{}
	otherKeys := map[string]bool{}
	err = r.each(func(dl *spoolv1.DeadLetter) {
		out.Matched++
		reason := dl.GetReason()
		if _, ok := reasons[reason]; !ok && len(reasons) >= MaxSummaryReasons {
			reason = OtherReason
		}
		reasons[reason]++
		k := string(dl.GetMessage().GetKey())
		switch _, ok := keys[k]; {
		case ok || len(keys) < MaxSummaryKeys:
			keys[k]++
		case len(otherKeys) < MaxSummaryKeys:
			otherKeys[k] = true
		}
		t := dl.GetDeadLetteredTimeMs()
		hours[t-t%time.Hour.Milliseconds()]++
		if out.OldestMs == 0 || t < out.OldestMs {
			out.OldestMs = t
		}
		out.NewestMs = max(out.NewestMs, t)
	})
	if err != nil {
		return nil, err
	}
	for reason, n := range reasons {
		out.ByReason = append(out.ByReason, &spoolv1.ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(out.ByReason, func(a, b *spoolv1.ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	for k, n := range keys {
		out.ByKey = append(out.ByKey, &spoolv1.KeyCount{Key: []byte(k), Count: n})
	}
	slices.SortFunc(out.ByKey, func(a, b *spoolv1.KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(string(a.Key), string(b.Key)))
	})
	if len(out.ByKey) > topKeys {
		out.OtherKeys = uint64(len(out.ByKey) - topKeys)
		out.ByKey = out.ByKey[:topKeys]
	}
	out.OtherKeys += uint64(len(otherKeys))
	for h, n := range hours {
		out.ByHour = append(out.ByHour, &spoolv1.HourCount{HourStartMs: h, Count: n})
	}
	slices.SortFunc(out.ByHour, func(a, b *spoolv1.HourCount) int { return cmp.Compare(a.HourStartMs, b.HourStartMs) })
	out.NextCursor, out.Progress = r.cursor(), r.progress()
	return out, nil
}
