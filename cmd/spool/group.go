package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) groupCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "group",
		Short: "List and describe consumer groups, reset their offsets",
		Example: example(
			"spool group list",
			"spool group describe email-workers",
			"spool group reset-offsets email-workers --topic order-placed --to-latest --dry-run"),
	}
	c.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List subscriptions (group and topic) with consumers connected, lag and in flight",
		Long: `Lists each subscription: a consumer group on a topic, with the consumers
connected now, the messages not yet processed (lag), the age of the oldest
of them (the largest of its partitions), the deliveries in flight, the keys
parked behind a retry (ordering: key) and the circuit breakers that are not
closed (downstream:state).`,
		Example: example(
			"spool group list",
			"spool group list -o json"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			groups, err := a.listGroups(cmd, "", "list groups")
			if err != nil {
				return err
			}
			views := a.groupViews(groups)
			return a.render(views, func(w io.Writer) {
				tw := newTable(w)
				row(tw, "GROUP", "TOPIC", "CONSUMERS", "LAG", "LAG TIME", "IN FLIGHT", "PARKED KEYS", "BREAKERS")
				for _, v := range views {
					row(tw, v.Group, v.Topic, v.Consumers, v.LagMessages, ageText(v.LagMs), v.InFlight, v.ParkedKeys, breakersText(v.Breakers, false))
				}
				tw.Flush()
			})
		},
	}, &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's lag in messages and in time, and in flight, per partition",
		Long: `Shows, for each topic the group consumes, the consumers connected and per
partition: the committed offset (the lowest not yet processed), the log end,
the lag in messages (acknowledged out of order ones are not counted), the age
of the oldest unprocessed message, and the deliveries outstanding; and for
the subscription, the keys parked behind a retry and the state of each
circuit breaker (one per downstream the application named in its retries).`,
		Example: example(
			"spool group describe email-workers",
			"spool group describe email-workers -o yaml"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeGroups,
		RunE: func(cmd *cobra.Command, args []string) error {
			groups, err := a.listGroups(cmd, args[0], "describe group "+args[0])
			if err != nil {
				return err
			}
			views := a.groupViews(groups)
			return a.render(views, func(w io.Writer) {
				for i, v := range views {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "group %s on topic %s: %d consumers connected, lag %d messages (oldest %s), %d in flight\n",
						v.Group, v.Topic, v.Consumers, v.LagMessages, ageText(v.LagMs), v.InFlight)
					fmt.Fprintf(w, "parked keys: %d; breakers: %s\n\n", v.ParkedKeys, breakersText(v.Breakers, true))
					tw := newTable(w)
					row(tw, "PARTITION", "COMMITTED", "END", "LAG", "LAG TIME", "IN FLIGHT")
					for _, p := range v.Partitions {
						row(tw, p.Partition, p.CommittedOffset, p.EndOffset, p.LagMessages, ageText(p.LagMs), p.InFlight)
					}
					tw.Flush()
				}
			})
		},
	}, a.resetOffsetsCommand())
	return c
}

// listGroups calls ListGroups; what names the operation in errors.
func (a *app) listGroups(cmd *cobra.Command, group, what string) ([]*spoolv1.GroupInfo, error) {
	c, err := a.adminClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.call(cmd)
	defer cancel()
	resp, err := c.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: group})
	if err != nil {
		return nil, a.adminErr(what, err)
	}
	return resp.GetGroups(), nil
}

func (a *app) completeGroups(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	a.timeout = 2 * time.Second
	groups, err := a.listGroups(cmd, "", "list groups")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	seen := map[string]bool{}
	for _, g := range groups {
		if !seen[g.GetGroup()] {
			seen[g.GetGroup()] = true
			names = append(names, g.GetGroup())
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// groupView is a subscription (a group on a topic) as spool shows it.
type groupView struct {
	Group       string        `json:"group" yaml:"group"`
	Topic       string        `json:"topic" yaml:"topic"`
	Consumers   uint32        `json:"consumers" yaml:"consumers"`
	LagMessages int64         `json:"lag_messages" yaml:"lag_messages"`
	LagMs       int64         `json:"lag_ms" yaml:"lag_ms"` // the oldest of its partitions
	InFlight    uint32        `json:"in_flight" yaml:"in_flight"`
	ParkedKeys  uint32        `json:"parked_keys" yaml:"parked_keys"`
	Breakers    []breakerView `json:"breakers" yaml:"breakers"`
	Partitions  []lagView     `json:"partitions" yaml:"partitions"`
}

type breakerView struct {
	Downstream string `json:"downstream" yaml:"downstream"`
	State      string `json:"state" yaml:"state"`
}

// breakersText lists breakers as downstream:state: all of them, or only
// those not closed ("-" when none).
func breakersText(bs []breakerView, all bool) string {
	var out []string
	for _, b := range bs {
		if all || b.State != "closed" {
			out = append(out, b.Downstream+":"+b.State)
		}
	}
	if len(out) == 0 {
		if all {
			return "none seen"
		}
		return "-"
	}
	return strings.Join(out, ", ")
}

type lagView struct {
	Partition       int32  `json:"partition" yaml:"partition"`
	CommittedOffset int64  `json:"committed_offset" yaml:"committed_offset"`
	EndOffset       int64  `json:"end_offset" yaml:"end_offset"`
	LagMessages     int64  `json:"lag_messages" yaml:"lag_messages"`
	LagMs           int64  `json:"lag_ms" yaml:"lag_ms"`
	InFlight        uint32 `json:"in_flight" yaml:"in_flight"`
}

func (a *app) groupViews(groups []*spoolv1.GroupInfo) []groupView {
	views := make([]groupView, 0, len(groups))
	for _, g := range groups {
		v := groupView{Group: g.GetGroup(), Topic: g.GetTopic(), Consumers: g.GetConsumers(), ParkedKeys: g.GetParkedKeys(), Breakers: []breakerView{}, Partitions: []lagView{}}
		for _, b := range g.GetBreakers() {
			v.Breakers = append(v.Breakers, breakerView{Downstream: b.GetDownstream(), State: b.GetState()})
		}
		for _, p := range g.GetPartitions() {
			v.LagMessages += p.GetLagMessages()
			v.LagMs = max(v.LagMs, p.GetLagMs())
			v.InFlight += p.GetInFlight()
			v.Partitions = append(v.Partitions, lagView{
				Partition: p.GetPartition(), CommittedOffset: p.GetCommittedOffset(), EndOffset: p.GetEndOffset(),
				LagMessages: p.GetLagMessages(), LagMs: a.ageMs(p.GetLagMs()), InFlight: p.GetInFlight(),
			})
		}
		v.LagMs = a.ageMs(v.LagMs)
		views = append(views, v)
	}
	return views
}
