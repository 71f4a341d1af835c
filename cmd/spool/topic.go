package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) topicCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "topic",
		Short: "List and describe topics",
		Example: example(
			"spool topic list",
			"spool topic describe order-placed -o json"),
	}
	c.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List topics with their partitions, stored messages and retention",
		Example: example(
			"spool topic list",
			"spool topic list -o yaml"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topics, err := a.listTopics(cmd)
			if err != nil {
				return err
			}
			views := make([]topicView, 0, len(topics))
			for _, t := range topics {
				views = append(views, newTopicView(t))
			}
			return a.render(views, func(w io.Writer) {
				tw := newTable(w)
				row(tw, "TOPIC", "PARTITIONS", "MESSAGES", "RETENTION")
				for _, v := range views {
					row(tw, v.Name, len(v.Partitions), v.Messages, retentionText(v.RetentionMs, v.RetentionBytes))
				}
				tw.Flush()
			})
		},
	}, &cobra.Command{
		Use:   "describe TOPIC",
		Short: "Show a topic's retention and each partition's log start, end and leader",
		Long: `Shows a topic's retention and, per partition, the oldest offset still stored
(log start), the next offset to be written (log end), the messages stored
between them and the node leading the partition.`,
		Example: example(
			"spool topic describe order-placed",
			"spool topic describe order-placed -o json"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			topics, err := a.listTopics(cmd)
			if err != nil {
				return err
			}
			for _, t := range topics {
				if t.GetName() == args[0] {
					v := newTopicView(t)
					return a.render(v, func(w io.Writer) {
						fmt.Fprintf(w, "topic:      %s\npartitions: %d\nmessages:   %d\nretention:  %s\n\n", v.Name, len(v.Partitions), v.Messages, retentionText(v.RetentionMs, v.RetentionBytes))
						tw := newTable(w)
						row(tw, "PARTITION", "START", "END", "MESSAGES", "LEADER")
						for _, p := range v.Partitions {
							row(tw, p.Partition, p.StartOffset, p.EndOffset, p.Messages, p.Leader)
						}
						tw.Flush()
					})
				}
			}
			return failed("no topic %q: `spool topic list` shows the topics the sidecar has; declare topics under topics in spoold's config", args[0])
		},
	})
	return c
}

func (a *app) listTopics(cmd *cobra.Command) ([]*spoolv1.TopicInfo, error) {
	c, err := a.adminClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.call(cmd)
	defer cancel()
	resp, err := c.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return nil, a.adminErr("list topics", err)
	}
	return resp.GetTopics(), nil
}

// completeTopics completes topic names from the sidecar (nothing when it
// does not answer quickly).
func (a *app) completeTopics(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	a.timeout = 2 * time.Second
	topics, err := a.listTopics(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, t := range topics {
		names = append(names, t.GetName())
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// topicView is a topic as spool shows it (JSON and YAML field names are
// part of spool's interface: docs/cli.md).
type topicView struct {
	Name           string          `json:"name" yaml:"name"`
	RetentionMs    int64           `json:"retention_ms" yaml:"retention_ms"`
	RetentionBytes int64           `json:"retention_bytes" yaml:"retention_bytes"`
	Messages       int64           `json:"messages" yaml:"messages"`
	Partitions     []partitionView `json:"partitions" yaml:"partitions"`
}

type partitionView struct {
	Partition   int32  `json:"partition" yaml:"partition"`
	StartOffset int64  `json:"start_offset" yaml:"start_offset"`
	EndOffset   int64  `json:"end_offset" yaml:"end_offset"`
	Messages    int64  `json:"messages" yaml:"messages"`
	Leader      string `json:"leader" yaml:"leader"`
}

func newTopicView(t *spoolv1.TopicInfo) topicView {
	v := topicView{Name: t.GetName(), RetentionMs: t.GetRetentionMs(), RetentionBytes: t.GetRetentionBytes(), Partitions: []partitionView{}}
	for _, p := range t.GetPartitions() {
		n := p.GetEndOffset() - p.GetStartOffset()
		v.Messages += n
		v.Partitions = append(v.Partitions, partitionView{Partition: p.GetPartition(), StartOffset: p.GetStartOffset(), EndOffset: p.GetEndOffset(), Messages: n, Leader: p.GetLeader()})
	}
	return v
}

// retentionText is "7d", "forever", "1h, 10 GiB per partition".
func retentionText(ms, bytes int64) string {
	age := "forever"
	if ms > 0 {
		age = durationText(time.Duration(ms) * time.Millisecond)
	}
	if bytes <= 0 {
		return age
	}
	return age + ", " + bytesText(float64(bytes), true) + " per partition"
}

// durationText writes whole days as "7d", else Go's duration text.
func durationText(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
