package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) dlqPurgeCommand() *cobra.Command {
	var group, topic, before string
	var olderThan time.Duration
	var dryRun, yes bool
	c := &cobra.Command{
		Use:   "purge --group GROUP --topic TOPIC [--before TIME | --older-than DURATION]",
		Short: "Hide dead letters you are done with from list, peek and redrive",
		Long: `Purges a subscription's dead letters: every entry present now, or those
dead-lettered before --before (RFC 3339) or more than --older-than ago.
spoold moves the subscription's purge mark (per partition of the dead-letter
topic, it never moves back); list, peek and redrive skip every entry below
it, so a purged message is never redriven. The entries stay in the log until
its retention deletes them: purging frees no disk. Reason and key filters do
not apply: a purge is a point in time.

--dry-run counts what would be purged. On a terminal spool shows that count
and asks first; --yes skips the question (needed when stdin is not a
terminal).`,
		Example: example(
			"spool dlq purge --group email-workers --topic order-placed --dry-run",
			"spool dlq purge --group email-workers --topic order-placed --older-than 72h --yes",
			"spool dlq purge --group email-workers --topic order-placed --before 2026-05-01T00:00:00Z"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &spoolv1.PurgeDeadLettersRequest{Group: group, Topic: topic}
			switch {
			case before != "":
				t, err := time.Parse(time.RFC3339, before)
				if err != nil {
					return usageErr("--before %q: use an RFC 3339 time like 2026-05-01T09:00:00Z", before)
				}
				req.BeforeTimeMs = t.UnixMilli()
			case olderThan < 0:
				return usageErr("--older-than %s: use a positive duration like 72h", olderThan)
			case olderThan > 0:
				req.BeforeTimeMs = time.Now().Add(-olderThan).UnixMilli()
			}
			if !dryRun && !yes && !a.stdinTTY {
				return usageErr("purge hides dead letters of group %s on %s from list, peek and redrive for good: add --yes to confirm (stdin is not a terminal, so spool cannot ask), or --dry-run to count them first", group, topic)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			what := fmt.Sprintf("purge dead letters of %s/%s", topic, group)
			purge := func(dry bool) (purgeView, error) {
				ctx, cancel := a.call(cmd)
				defer cancel()
				req.DryRun = dry
				resp, err := c.PurgeDeadLetters(ctx, req)
				if err != nil {
					return purgeView{}, a.adminErr(what, err)
				}
				v := purgeView{Group: group, Topic: topic, DryRun: dry, Purged: resp.GetPurged(), Partitions: []purgePartView{}}
				switch {
				case req.BeforeTimeMs > 0 && olderThan > 0 && a.redact:
					v.Before = "<time>" // now - --older-than
				case req.BeforeTimeMs > 0:
					v.Before = time.UnixMilli(req.BeforeTimeMs).UTC().Format(time.RFC3339)
				}
				for _, p := range resp.GetPartitions() {
					v.Partitions = append(v.Partitions, purgePartView{Partition: p.GetPartition(), Before: p.GetPurgedBefore(), After: p.GetPurgedUpTo(), End: p.GetEndOffset()})
				}
				return v, nil
			}
			if !dryRun && !yes {
				plan, err := purge(true)
				if err != nil {
					return err
				}
				writePurge(a.stderr, plan)
				if !a.confirm(fmt.Sprintf("Purge these %d dead letters of group %s on %s? [y/N] ", plan.Purged, group, topic)) {
					return failed("nothing purged: not confirmed")
				}
			}
			v, err := purge(dryRun)
			if err != nil {
				return err
			}
			return a.render(v, func(w io.Writer) { writePurge(w, v) })
		},
	}
	fl := c.Flags()
	fl.StringVar(&group, "group", "", "consumer group of the subscription (required)")
	fl.StringVar(&topic, "topic", "", "topic of the subscription (required)")
	fl.StringVar(&before, "before", "", "only entries dead-lettered before this RFC 3339 time")
	fl.DurationVar(&olderThan, "older-than", 0, "only entries dead-lettered more than this long ago, like 72h")
	fl.BoolVar(&dryRun, "dry-run", false, "count what would be purged; purge nothing")
	fl.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	_ = c.MarkFlagRequired("group")
	_ = c.MarkFlagRequired("topic")
	c.MarkFlagsMutuallyExclusive("before", "older-than")
	_ = c.RegisterFlagCompletionFunc("group", a.completeGroups)
	_ = c.RegisterFlagCompletionFunc("topic", a.completeTopics)
	return c
}

type purgeView struct {
	Group  string `json:"group" yaml:"group"`
	Topic  string `json:"topic" yaml:"topic"`
	DryRun bool   `json:"dry_run" yaml:"dry_run"`
	// Before is the time bound ("" for everything present).
	Before     string          `json:"before_time" yaml:"before_time"`
	Purged     uint64          `json:"purged" yaml:"purged"`
	Partitions []purgePartView `json:"partitions" yaml:"partitions"`
}

type purgePartView struct {
	Partition int32 `json:"partition" yaml:"partition"`
	Before    int64 `json:"purged_before" yaml:"purged_before"`
	After     int64 `json:"purged_up_to" yaml:"purged_up_to"`
	End       int64 `json:"end_offset" yaml:"end_offset"`
}

func writePurge(w io.Writer, v purgeView) {
	scope := "every entry present"
	if v.Before != "" {
		scope = "the entries dead-lettered before " + v.Before
	}
	if v.DryRun {
		fmt.Fprintf(w, "dry run: %d dead letters of group %s on %s would be purged (%s); nothing purged\n\n", v.Purged, v.Group, v.Topic, scope)
	} else {
		fmt.Fprintf(w, "%d dead letters of group %s on %s purged (%s)\n\n", v.Purged, v.Group, v.Topic, scope)
	}
	tw := newTable(w)
	row(tw, "DLQ PARTITION", "PURGED BEFORE", "PURGED UP TO", "END")
	for _, p := range v.Partitions {
		row(tw, p.Partition, p.Before, p.After, p.End)
	}
	tw.Flush()
}
