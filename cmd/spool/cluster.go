package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func (a *app) clusterCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Show the cluster the sidecar belongs to",
		Example: example(
			"spool cluster status",
			"spool cluster status -o json",
			"spool cluster decommission 3 --yes",
			"spool cluster move orders 2 --to 2,3,5 --dry-run",
			"spool cluster finalize --yes"),
	}
	c.AddCommand(a.decommissionCommand())
	c.AddCommand(a.moveCommand())
	c.AddCommand(a.clusterStatusCommand())
	c.AddCommand(a.finalizeCommand())
	return c
}

func (a *app) clusterStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster id, its cluster version, this node and every member with its release and whether this node reaches it",
		Long: `Shows the cluster id, the id of the node answering (empty for a sidecar with
storage off, which is not a member), the spoold version, the cluster version
(the behaviour every node follows) and, when every node speaks a higher one,
that a finalization is pending; and every member with its peer address,
whether this node's raft streams to it are up, whether the cluster marked it
down (unreachable past cluster.dead_node_timeout: its replicas are being
re-created on other nodes), and the Spool release and cluster versions it
runs, as it last said ("-" while unknown; a 0.1.0 node says no release and
speaks cluster version 1 only); and how many partitions are moving or
under-replicated. A single sidecar (no cluster settings) answers with itself
only. Each partition's leader is in ` + "`spool topic describe`" + `.`,
		Example: example(
			"spool cluster status",
			"spool cluster status -o json"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := c.ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
			if err != nil {
				return a.adminErr("cluster status", err)
			}
			v := newClusterView(resp)
			return a.render(v, v.text)
		},
	}
}

func newClusterView(resp *spoolv1.ClusterStatusResponse) clusterView {
	v := clusterView{ClusterID: resp.GetClusterId(), NodeID: resp.GetNodeId(), Version: resp.GetVersion(),
		PartitionsMoving: resp.GetPartitionsMoving(), UnderReplicated: resp.GetPartitionsUnderReplicated(),
		ClusterVersion: resp.GetClusterVersion(), ClusterVersionAvailable: resp.GetClusterVersionAvailable()}
	v.FinalizationPending = v.ClusterVersionAvailable > v.ClusterVersion
	for _, n := range resp.GetNodes() {
		v.Nodes = append(v.Nodes, nodeView{ID: n.GetId(), Address: n.GetAddress(), Reachable: n.GetAlive(), Down: n.GetDown(), Leaving: n.GetLeaving(),
			Release: n.GetReleaseVersion(), ClusterVersionMin: n.GetClusterVersionMin(), ClusterVersionMax: n.GetClusterVersionMax()})
	}
	return v
}

func (v clusterView) text(w io.Writer) {
	fmt.Fprintf(w, "cluster: %s\nnode:    %s\nversion: %s\n", v.ClusterID, v.NodeID, v.Version)
	if v.ClusterVersion > 0 {
		fmt.Fprintf(w, "cluster version: %d", v.ClusterVersion)
		if v.FinalizationPending {
			fmt.Fprintf(w, " (every node speaks %d: finalization pending, automatic after cluster.auto_finalize_after or spool cluster finalize)", v.ClusterVersionAvailable)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "partitions moving: %d, under-replicated: %d\n\n", v.PartitionsMoving, v.UnderReplicated)
	tw := newTable(w)
	row(tw, "NODE", "ADDRESS", "REACHABLE", "STATE", "RELEASE", "CLUSTER VERSIONS")
	for _, n := range v.Nodes {
		state := "member"
		switch {
		case n.Leaving:
			state = "leaving"
		case n.Down:
			state = "down"
		}
		release, versions := cmp.Or(n.Release, "-"), "-"
		if n.ClusterVersionMax > 0 {
			versions = fmt.Sprintf("%d..%d", n.ClusterVersionMin, n.ClusterVersionMax)
		}
		row(tw, n.ID, n.Address, n.Reachable, state, release, versions)
	}
	tw.Flush()
}

func (a *app) finalizeCommand() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "finalize",
		Short: "Raise the cluster version to the highest every node speaks: no rolling back to an older release after it",
		Long: `Raises the cluster version to the highest every node's release speaks, which
turns on the behaviour of that version (docs/upgrading.md). By default the
cluster does it by itself once every node has spoken the higher version for
cluster.auto_finalize_after (10 minutes); this does it now, or at all with
cluster.finalize: manual. After it, a node of a release that does not speak
the new version can neither join nor start again: roll back before, not
after. Refused (CLUSTER_VERSION), naming the node, while a node runs a
release that does not speak a higher version or is unreachable from the
sidecar asked, and when there is nothing to finalize.`,
		Example: example(
			"spool cluster finalize",
			"spool cluster finalize --yes"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !yes && !a.stdinTTY {
				return usageErr("finalize raises the cluster version for good (no rolling back to an older release after it): add --yes to confirm (stdin is not a terminal, so spool cannot ask)")
			}
			if !yes && !a.confirm("Raise the cluster version for good (nodes of older releases can no longer join or start)? [y/N] ") {
				return failed("nothing changed: the finalization was not confirmed")
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := c.FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{})
			if err != nil {
				return a.adminErr("cluster finalize", err)
			}
			v := finalizeView{PreviousVersion: resp.GetPreviousVersion(), ClusterVersion: resp.GetClusterVersion()}
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "cluster version %d (was %d): nodes of releases that do not speak it can no longer join or start\n", v.ClusterVersion, v.PreviousVersion)
			})
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return c
}

type finalizeView struct {
	PreviousVersion uint32 `json:"previous_version" yaml:"previous_version"`
	ClusterVersion  uint32 `json:"cluster_version" yaml:"cluster_version"`
}

type clusterView struct {
	ClusterID string     `json:"cluster_id" yaml:"cluster_id"`
	NodeID    string     `json:"node_id" yaml:"node_id"`
	Version   string     `json:"version" yaml:"version"`
	Nodes     []nodeView `json:"nodes" yaml:"nodes"`
	// ClusterVersion is the cluster's version (0: a single sidecar, which
	// has none); ClusterVersionAvailable the highest every node speaks;
	// FinalizationPending, whether it is above ClusterVersion.
	ClusterVersion          uint32 `json:"cluster_version" yaml:"cluster_version"`
	ClusterVersionAvailable uint32 `json:"cluster_version_available" yaml:"cluster_version_available"`
	FinalizationPending     bool   `json:"finalization_pending" yaml:"finalization_pending"`
	// PartitionsMoving and UnderReplicated count the cluster's partitions
	// with a replica move under way, and with a copy on a down node that no
	// move replaces.
	PartitionsMoving int32 `json:"partitions_moving" yaml:"partitions_moving"`
	UnderReplicated  int32 `json:"partitions_under_replicated" yaml:"partitions_under_replicated"`
}

type nodeView struct {
	ID        string `json:"id" yaml:"id"`
	Address   string `json:"address" yaml:"address"`
	Reachable bool   `json:"reachable" yaml:"reachable"`
	Down      bool   `json:"down" yaml:"down"`
	Leaving   bool   `json:"leaving" yaml:"leaving"`
	// Release and the cluster versions the node speaks, as it last said
	// ("" and 0 while unknown).
	Release           string `json:"release" yaml:"release"`
	ClusterVersionMin uint32 `json:"cluster_version_min" yaml:"cluster_version_min"`
	ClusterVersionMax uint32 `json:"cluster_version_max" yaml:"cluster_version_max"`
}

func (a *app) decommissionCommand() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "decommission NODE_ID",
		Short: "Take a node out of the cluster: its replicas move to the other nodes, then it is removed",
		Long: `Asks the cluster to take node NODE_ID out for good. Its replicas are
re-created on the other nodes (each new copy catches up, then the partition's
membership changes), it stops voting in the controller, and once it holds no
replica it is removed: its id is never given again, and the node, if it runs,
says it was removed (wipe its data dir to join again as a new node). The
command returns once the decision is recorded; spool cluster status shows the
node as leaving and the partitions moving until it is gone. Refused when the
other nodes would be fewer than a topic's replication factor.`,
		Example: example(
			"spool cluster decommission 3",
			"spool cluster decommission 3 --yes"),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !yes && !a.stdinTTY {
				return usageErr("decommission moves every replica off node %s and removes it from the cluster: add --yes to confirm (stdin is not a terminal, so spool cannot ask)", id)
			}
			if !yes && !a.confirm(fmt.Sprintf("Move every replica off node %s and remove it from the cluster? [y/N] ", id)) {
				return failed("nothing changed: the decommission was not confirmed")
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			if _, err := c.DecommissionNode(ctx, &spoolv1.DecommissionNodeRequest{NodeId: id}); err != nil {
				return a.adminErr("cluster decommission", err)
			}
			v := decommissionView{NodeID: id, Leaving: true}
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "node %s is leaving: its replicas move to the other nodes, then it is removed (watch: spool cluster status)\n", id)
			})
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return c
}

type decommissionView struct {
	NodeID  string `json:"node_id" yaml:"node_id"`
	Leaving bool   `json:"leaving" yaml:"leaving"`
}

func (a *app) moveCommand() *cobra.Command {
	var to []string
	var dryRun bool
	c := &cobra.Command{
		Use:   "move TOPIC PARTITION --to NODE,NODE,...",
		Short: "Move a partition's replicas to the nodes named (the first leads)",
		Long: `Moves the replicas of one partition to the nodes given with --to, as many as
the topic's replication factor, the first being the preferred leader. Each new
node copies the partition's log as a learner, then the partition's membership
changes; a node dropped deletes its copy. A move under way is redirected. The
command returns once the move is recorded: spool cluster status counts the
partitions moving and spool topic describe shows each partition's target until
the move is done.

The partition is pinned: the cluster's balancing leaves it where you put it
(replicas on a node that goes down or is decommissioned are still re-created
elsewhere). Refused when a node named is unknown (UNKNOWN_NODE), down or
leaving (MOVE_REFUSED), when the count is not the replication factor or a node
is named twice (INVALID_REPLICAS), and on a sidecar that is not a cluster
member. --dry-run checks the move and prints it without recording it.`,
		Example: example(
			"spool cluster move orders 2 --to 2,3,5",
			"spool cluster move orders 2 --to 2,3,5 --dry-run",
			"spool topic describe orders    # the move's progress"),
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeTopics,
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			p, err := strconv.ParseInt(args[1], 10, 32)
			if err != nil || p < 0 {
				return usageErr("partition %q: want a partition number (0, 1, ...; spool topic describe %s lists them)", args[1], topic)
			}
			if len(to) == 0 {
				return usageErr("say where the replicas go: --to with node ids (spool cluster status lists them), the preferred leader first, e.g. --to 2,3,5")
			}
			c, err := a.adminClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd)
			defer cancel()
			resp, err := c.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: topic, Partition: int32(p), Replicas: to, DryRun: dryRun})
			if err != nil {
				return a.adminErr("cluster move", err)
			}
			v := moveView{Topic: topic, Partition: int32(p), From: resp.GetFrom(), To: resp.GetTo(), PreviousTarget: resp.GetPreviousTarget(), DryRun: resp.GetDryRun()}
			return a.render(v, func(w io.Writer) {
				from, dest := strings.Join(v.From, ","), strings.Join(v.To, ",")
				switch {
				case v.DryRun:
					fmt.Fprintf(w, "%s/%d: %s → %s (dry run: nothing changed)\n", topic, p, from, dest)
				default:
					fmt.Fprintf(w, "%s/%d: %s → %s (moving: watch spool topic describe %s and spool cluster status)\n", topic, p, from, dest, topic)
				}
				if len(v.PreviousTarget) > 0 {
					fmt.Fprintf(w, "the move under way to %s is redirected\n", strings.Join(v.PreviousTarget, ","))
				}
			})
		},
	}
	c.Flags().StringSliceVar(&to, "to", nil, "node ids the replicas go to, the preferred leader first (e.g. 2,3,5)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "check the move and print it without recording it")
	return c
}

type moveView struct {
	Topic     string   `json:"topic" yaml:"topic"`
	Partition int32    `json:"partition" yaml:"partition"`
	From      []string `json:"from" yaml:"from"`
	To        []string `json:"to" yaml:"to"`
	// PreviousTarget is where a move under way was going (redirected).
	PreviousTarget []string `json:"previous_target,omitempty" yaml:"previous_target,omitempty"`
	DryRun         bool     `json:"dry_run" yaml:"dry_run"`
}
