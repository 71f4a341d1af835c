package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

type resetFlags struct {
	topic            string
	earliest, latest bool
	toTime           string
	toOffset         int64
	partitions       []int32
	dryRun, yes      bool
}

func (a *app) resetOffsetsCommand() *cobra.Command {
	var f resetFlags
	c := &cobra.Command{
		Use:   "reset-offsets GROUP --topic TOPIC (--to-earliest | --to-latest | --to-time TIME | --to-offset N) [--partition P]...",
		Short: "Move where a group resumes on a topic: replay retained messages or skip a backlog",
		Long: `Moves the group's committed offsets on one topic, on every partition or on
those given with --partition (repeatable; the others keep theirs):
  --to-earliest   the oldest stored offset (replay everything retained)
  --to-latest     the log end (skip everything not yet processed)
  --to-time T     the first offset at or after T (RFC 3339, like 2026-05-01T09:00:00Z)
  --to-offset N   offset N (clamped to what the partition stores)

spoold refuses while consumers of the group are connected: stop them, reset,
start them again. --dry-run shows the new offsets without moving them. On a
terminal spool shows them and asks before moving; --yes skips the question
(needed when stdin is not a terminal).`,
		Example: example(
			"spool group reset-offsets email-workers --topic order-placed --to-latest --dry-run",
			"spool group reset-offsets email-workers --topic order-placed --to-time 2026-05-01T09:00:00Z --yes",
			"spool group reset-offsets email-workers --topic order-placed --partition 2 --to-offset 1500 --dry-run"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeGroups,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.resetOffsets(cmd, args[0], f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.topic, "topic", "", "topic whose offsets move (required)")
	fl.BoolVar(&f.earliest, "to-earliest", false, "move to the oldest stored offset")
	fl.BoolVar(&f.latest, "to-latest", false, "move to the log end")
	fl.StringVar(&f.toTime, "to-time", "", "move to the first offset at or after this RFC 3339 time")
	fl.Int64Var(&f.toOffset, "to-offset", 0, "move to this offset (clamped to what the partition stores)")
	fl.Int32SliceVar(&f.partitions, "partition", nil, "only this partition (repeatable, or 0,2); default all")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show the new offsets, move nothing")
	fl.BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	_ = c.MarkFlagRequired("topic")
	c.MarkFlagsMutuallyExclusive("to-earliest", "to-latest", "to-time", "to-offset")
	c.MarkFlagsOneRequired("to-earliest", "to-latest", "to-time", "to-offset")
	return c
}

// resetView is a reset's result.
type resetView struct {
	Group      string          `json:"group" yaml:"group"`
	Topic      string          `json:"topic" yaml:"topic"`
	To         string          `json:"to" yaml:"to"`
	Only       []int32         `json:"only_partitions,omitempty" yaml:"only_partitions,omitempty"`
	DryRun     bool            `json:"dry_run" yaml:"dry_run"`
	Partitions []resetPartView `json:"partitions" yaml:"partitions"`
}

type resetPartView struct {
	Partition int32 `json:"partition" yaml:"partition"`
	// Before is the committed offset before the reset (-1: unknown).
	Before      int64 `json:"committed_before" yaml:"committed_before"`
	After       int64 `json:"committed_after" yaml:"committed_after"`
	EndOffset   int64 `json:"end_offset" yaml:"end_offset"`
	LagMessages int64 `json:"lag_messages_after" yaml:"lag_messages_after"`
}

func (a *app) resetOffsets(cmd *cobra.Command, group string, f resetFlags) error {
	req := &spoolv1.ResetOffsetsRequest{Group: group, Topic: f.topic, Partitions: f.partitions}
	var to string
	switch {
	case cmd.Flags().Changed("to-offset"):
		if f.toOffset < 0 {
			return usageErr("--to-offset %d: use an offset, 0 or more", f.toOffset)
		}
		req.To, to = &spoolv1.ResetOffsetsRequest_Offset{Offset: f.toOffset}, fmt.Sprintf("offset %d", f.toOffset)
	case f.earliest:
		req.To, to = &spoolv1.ResetOffsetsRequest_Earliest{Earliest: true}, "earliest"
	case f.latest:
		req.To, to = &spoolv1.ResetOffsetsRequest_Latest{Latest: true}, "latest"
	default:
		t, err := time.Parse(time.RFC3339, f.toTime)
		if err != nil {
			return usageErr("--to-time %q: use an RFC 3339 time like 2026-05-01T09:00:00Z", f.toTime)
		}
		req.To, to = &spoolv1.ResetOffsetsRequest_TimeMs{TimeMs: t.UnixMilli()}, t.UTC().Format(time.RFC3339)
	}
	if !f.dryRun && !f.yes && !a.stdinTTY {
		return usageErr("reset-offsets changes where group %s resumes on %s: add --yes to confirm (stdin is not a terminal, so spool cannot ask), or --dry-run to see the new offsets first", group, f.topic)
	}
	c, err := a.adminClient()
	if err != nil {
		return err
	}
	// The committed offsets before, to show what moves (ListGroups also
	// says whether the group exists).
	before := map[int32]int64{}
	groups, err := a.listGroups(cmd, group, fmt.Sprintf("reset offsets of group %s on %s", group, f.topic))
	if err != nil {
		return err
	}
	for _, g := range groups {
		if g.GetTopic() == f.topic {
			for _, p := range g.GetPartitions() {
				before[p.GetPartition()] = p.GetCommittedOffset()
			}
		}
	}
	reset := func(dryRun bool) (resetView, error) {
		ctx, cancel := a.call(cmd)
		defer cancel()
		req.DryRun = dryRun
		resp, err := c.ResetOffsets(ctx, req)
		if err != nil {
			return resetView{}, a.adminErr(fmt.Sprintf("reset offsets of group %s on %s", group, f.topic), err)
		}
		v := resetView{Group: group, Topic: f.topic, To: to, Only: f.partitions, DryRun: dryRun, Partitions: []resetPartView{}}
		for _, p := range resp.GetPartitions() {
			b, ok := before[p.GetPartition()]
			if !ok {
				b = -1
			}
			v.Partitions = append(v.Partitions, resetPartView{Partition: p.GetPartition(), Before: b, After: p.GetCommittedOffset(), EndOffset: p.GetEndOffset(), LagMessages: p.GetLagMessages()})
		}
		return v, nil
	}
	if !f.dryRun && !f.yes {
		plan, err := reset(true)
		if err != nil {
			return err
		}
		writeReset(a.stderr, plan)
		if !a.confirm(fmt.Sprintf("Move the offsets of group %s on %s to %s as above? [y/N] ", group, f.topic, to)) {
			return failed("nothing moved: the reset was not confirmed")
		}
	}
	v, err := reset(f.dryRun)
	if err != nil {
		return err
	}
	return a.render(v, func(w io.Writer) { writeReset(w, v) })
}

func writeReset(w io.Writer, v resetView) {
	verb := "moved"
	if v.DryRun {
		verb = "would move (dry run: nothing moved)"
	}
	only := ""
	if len(v.Only) > 0 {
		only = fmt.Sprintf(" on partitions %v (the others keep theirs)", v.Only)
	}
	fmt.Fprintf(w, "group %s on topic %s: offsets %s to %s%s\n\n", v.Group, v.Topic, verb, v.To, only)
	tw := newTable(w)
	row(tw, "PARTITION", "COMMITTED BEFORE", "COMMITTED AFTER", "END", "LAG AFTER")
	for _, p := range v.Partitions {
		row(tw, p.Partition, p.Before, p.After, p.EndOffset, p.LagMessages)
	}
	tw.Flush()
}

// confirm asks question on stderr and reads the answer from stdin: only y
// or yes (any case) confirms.
func (a *app) confirm(question string) bool {
	fmt.Fprint(a.stderr, question)
	answer, _ := bufio.NewReader(a.stdin).ReadString('\n')
	if !strings.HasSuffix(answer, "\n") {
		fmt.Fprintln(a.stderr)
	}
	ans := strings.ToLower(strings.TrimSpace(answer))
	return ans == "y" || ans == "yes"
}
