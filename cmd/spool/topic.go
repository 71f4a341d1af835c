package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) topicCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "topic",
		Short: "List, describe, create, alter and delete topics",
		Example: example(
			"spool topic list",
			"spool topic describe order-placed -o json",
			"spool topic create audit --partitions 6 --retention 3d"),
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
						row(tw, "PARTITION", "START", "END", "MESSAGES", "LEADER", "REPLICAS")
						for _, p := range v.Partitions {
							reps := strings.Join(p.Replicas, ",")
							if len(p.MovingTo) > 0 { // a replica move under way
								reps += " → " + strings.Join(p.MovingTo, ",")
							}
							row(tw, p.Partition, p.StartOffset, p.EndOffset, p.Messages, p.Leader, reps)
						}
						tw.Flush()
					})
				}
			}
			return failed("no topic %q: `spool topic list` shows the topics the sidecar has; create it with `spool topic create` or declare it under topics in spoold's config", args[0])
		},
	}, a.topicCreateCommand(), a.topicAlterCommand(), a.topicDeleteCommand())
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
	Partition   int32    `json:"partition" yaml:"partition"`
	StartOffset int64    `json:"start_offset" yaml:"start_offset"`
	EndOffset   int64    `json:"end_offset" yaml:"end_offset"`
	Messages    int64    `json:"messages" yaml:"messages"`
	Leader      string   `json:"leader" yaml:"leader"`
	Replicas    []string `json:"replicas" yaml:"replicas"`
	// MovingTo is where a replica move under way takes the partition.
	MovingTo []string `json:"moving_to,omitempty" yaml:"moving_to,omitempty"`
}

func newTopicView(t *spoolv1.TopicInfo) topicView {
	v := topicView{Name: t.GetName(), RetentionMs: t.GetRetentionMs(), RetentionBytes: t.GetRetentionBytes(), Partitions: []partitionView{}}
	for _, p := range t.GetPartitions() {
		n := p.GetEndOffset() - p.GetStartOffset()
		v.Messages += n
		replicas := p.GetReplicas()
		if replicas == nil {
			replicas = []string{}
		}
		v.Partitions = append(v.Partitions, partitionView{Partition: p.GetPartition(), StartOffset: p.GetStartOffset(), EndOffset: p.GetEndOffset(), Messages: n, Leader: p.GetLeader(), Replicas: replicas, MovingTo: p.GetTarget()})
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

// retentionFlags are --retention and --retention-bytes of create and alter.
type retentionFlags struct {
	age, bytes string
}

func (r *retentionFlags) bind(c *cobra.Command, defAge string) {
	c.Flags().StringVar(&r.age, "retention", defAge, "how long messages are kept: 7d, 36h, or forever")
	c.Flags().StringVar(&r.bytes, "retention-bytes", "", "most bytes kept per partition: 10GiB, 500MB, or unlimited")
}

// parse returns the retention in milliseconds and bytes; set says which
// of the two flags were given.
func (r *retentionFlags) parse(c *cobra.Command) (ms, bytes int64, msSet, bytesSet bool, err error) {
	if msSet = c.Flags().Changed("retention") || r.age != ""; msSet {
		if r.age != "forever" {
			d, perr := parseRetention(r.age)
			if perr != nil {
				return 0, 0, false, false, usageErr("--retention %q: %v, or forever", r.age, perr)
			}
			ms = d.Milliseconds()
		}
	}
	if bytesSet = r.bytes != ""; bytesSet && r.bytes != "unlimited" {
		b, perr := parseSize(r.bytes)
		if perr != nil {
			return 0, 0, false, false, usageErr("--retention-bytes %q: %v, or unlimited", r.bytes, perr)
		}
		bytes = b
	}
	return ms, bytes, msSet, bytesSet, nil
}

func (a *app) topicCreateCommand() *cobra.Command {
	var partitions int32
	var r retentionFlags
	c := &cobra.Command{
		Use:   "create TOPIC --partitions N",
		Short: "Create a topic",
		Long: `Creates a topic with N partitions and a retention (by age, and optionally by
size per partition). Creating a topic that exists with the same settings
succeeds; with other settings it is refused (TOPIC_EXISTS).

On a single sidecar the topic is kept in its data dir (admin-topics.json)
and opened again at every start; in a cluster the controller keeps it.
Partition counts do not change later (keys would move): choose with
` + "`spool plan`" + `. Topics declared in spoold's config are the config's.`,
		Example: example(
			"spool topic create audit --partitions 6",
			"spool topic create clicks --partitions 12 --retention 36h --retention-bytes 50GiB -o json"),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, bytes, _, _, err := r.parse(cmd)
			if err != nil {
				return err
			}
			if partitions < 1 {
				return usageErr("--partitions %d: give 1 or more (spool plan helps choose)", partitions)
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := c.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: args[0], Partitions: partitions, RetentionMs: ms, RetentionBytes: bytes})
			if err != nil {
				return a.adminErr("create topic "+args[0], err)
			}
			v := newTopicView(resp.GetTopic())
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "topic %s: %d partitions, retention %s\n", v.Name, len(v.Partitions), retentionText(v.RetentionMs, v.RetentionBytes))
			})
		},
	}
	c.Flags().Int32Var(&partitions, "partitions", 0, "number of partitions (required)")
	_ = c.MarkFlagRequired("partitions")
	r.bind(c, "7d")
	return c
}

func (a *app) topicAlterCommand() *cobra.Command {
	var r retentionFlags
	c := &cobra.Command{
		Use:   "alter TOPIC [--retention AGE] [--retention-bytes SIZE]",
		Short: "Change a topic's retention",
		Long: `Changes the retention of a topic made with ` + "`spool topic create`" + `: by age
(--retention 3d, or forever) and by size per partition (--retention-bytes
10GiB, or unlimited); what is not given stays. Shorter retention deletes
whole closed segments at the next maintenance. Topics declared in spoold's
config are changed there (TOPIC_DECLARED).`,
		Example: example(
			"spool topic alter audit --retention 1d",
			"spool topic alter audit --retention-bytes unlimited -o yaml"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, bytes, msSet, bytesSet, err := r.parse(cmd)
			if err != nil {
				return err
			}
			if !msSet && !bytesSet {
				return usageErr("alter topic %s: say what to change: --retention and/or --retention-bytes", args[0])
			}
			req := &spoolv1.AlterTopicRequest{Name: args[0]}
			if msSet {
				req.RetentionMs = &ms
			}
			if bytesSet {
				req.RetentionBytes = &bytes
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := c.AlterTopic(ctx, req)
			if err != nil {
				return a.adminErr("alter topic "+args[0], err)
			}
			v := newTopicView(resp.GetTopic())
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "topic %s: retention %s\n", v.Name, retentionText(v.RetentionMs, v.RetentionBytes))
			})
		},
	}
	r.bind(c, "")
	return c
}

func (a *app) topicDeleteCommand() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "delete TOPIC",
		Short: "Delete a topic and every message in it",
		Long: `Asks spoold to delete a topic: every partition's messages and every consumer
group's positions on it, so that a topic created again under the name starts
empty. spoold refuses, saying why, when subscriptions use it (TOPIC_IN_USE,
naming them) or spoold's config declares it (TOPIC_DECLARED: the next start
would create it again). On a cluster every node deletes its copies (a node
down meanwhile when it comes back), and the deletion is also refused while a
member of any consumer group subscribes to the topic (TOPIC_IN_USE, naming the
group and the member).

On a terminal spool asks first; --yes skips the question.`,
		Example: example(
			"spool topic delete audit",
			"spool topic delete audit --yes"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				if !a.stdinTTY {
					return usageErr("delete topic %s: add --yes to confirm (stdin is not a terminal, so spool cannot ask)", args[0])
				}
				if !a.confirm(fmt.Sprintf("Delete topic %s and every message in it? [y/N] ", args[0])) {
					return failed("nothing deleted: not confirmed")
				}
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			if _, err := c.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: args[0]}); err != nil {
				return a.adminErr("delete topic "+args[0], err)
			}
			return a.render(map[string]string{"deleted": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "topic %s deleted\n", args[0]) })
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return c
}
