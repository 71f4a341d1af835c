package dlq

import (
	"fmt"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Purge moves a subscription's purge mark: per partition of the
// dead-letter topic, the offset below which Peek, Summarize and Redrive
// skip every entry. The mark goes up to the first entry appended at or
// after before (the log's time index), or to the partition's end when
// before is zero; it never moves back. The entries stay in the log until
// retention deletes them: purging hides them, it frees no disk.
//
// The mark is kept durably in the group position store, beside the
// group's offsets (on the node that answers, like them). With dryRun
// nothing is written.
func Purge(eng Engine, group, dlqTopic string, before time.Time, dryRun bool) (*spoolv1.PurgeDeadLettersResponse, error) {
	n, err := eng.Partitions(dlqTopic)
	if err != nil {
		return nil, err
	}
	marks, err := eng.LoadPositions(group, purgeTopic(dlqTopic))
	if err != nil {
		return nil, fmt.Errorf("reading the purge mark of %s: %w", dlqTopic, err)
	}
	out := &spoolv1.PurgeDeadLettersResponse{}
	next := make(map[int32]engine.Position, n)
	for p := range n {
		start, end, err := eng.Offsets(dlqTopic, p)
		if err != nil {
			return nil, err
		}
		old := marks[p].Next
		to := end
		if !before.IsZero() {
			if to, err = eng.OffsetForTime(dlqTopic, p, before); err != nil {
				return nil, fmt.Errorf("looking up %s partition %d by time: %w", dlqTopic, p, err)
			}
			to = min(to, end)
		}
		to = max(to, old)
		// Entries below the log start are gone already: not counted.
		out.Purged += uint64(max(to-max(old, start), 0))
		out.Partitions = append(out.Partitions, &spoolv1.PurgedPartition{Partition: p, PurgedBefore: old, PurgedUpTo: to, EndOffset: end})
		next[p] = engine.Position{Next: to}
	}
	if dryRun {
		return out, nil
	}
	if err := eng.CommitPositions(group, purgeTopic(dlqTopic), next); err != nil {
		return nil, fmt.Errorf("writing the purge mark of %s: %w", dlqTopic, err)
	}
	return out, nil
}
