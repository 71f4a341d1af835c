package main

import (
	"fmt"
	"io"

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
			"spool cluster decommission 3 --yes"),
	}
	c.AddCommand(a.decommissionCommand())
	c.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show the cluster id, this node and every member with whether this node reaches it",
		Long: `Shows the cluster id, the id of the node answering (empty for a sidecar with
storage off, which is not a member), the spoold version, and every member with
its peer address, whether this node's raft streams to it are up, and whether
the cluster marked it down (unreachable past cluster.dead_node_timeout: its
replicas are being re-created on other nodes); and how many partitions are
moving or under-replicated. A single
sidecar (no cluster settings) answers with itself only. Each partition's
leader is in ` + "`spool topic describe`" + `.`,
		Example: example(
			"spool cluster status",
			"spool cluster status -o yaml"),
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
			v := clusterView{ClusterID: resp.GetClusterId(), NodeID: resp.GetNodeId(), Version: resp.GetVersion(),
				PartitionsMoving: resp.GetPartitionsMoving(), UnderReplicated: resp.GetPartitionsUnderReplicated()}
			for _, n := range resp.GetNodes() {
				v.Nodes = append(v.Nodes, nodeView{ID: n.GetId(), Address: n.GetAddress(), Reachable: n.GetAlive(), Down: n.GetDown(), Leaving: n.GetLeaving()})
			}
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "cluster: %s\nnode:    %s\nversion: %s\n", v.ClusterID, v.NodeID, v.Version)
				fmt.Fprintf(w, "partitions moving: %d, under-replicated: %d\n\n", v.PartitionsMoving, v.UnderReplicated)
				tw := newTable(w)
				row(tw, "NODE", "ADDRESS", "REACHABLE", "STATE")
				for _, n := range v.Nodes {
					state := "member"
					switch {
					case n.Leaving:
						state = "leaving"
					case n.Down:
						state = "down"
					}
					row(tw, n.ID, n.Address, n.Reachable, state)
				}
				tw.Flush()
			})
		},
	})
	return c
}

type clusterView struct {
	ClusterID string     `json:"cluster_id" yaml:"cluster_id"`
	NodeID    string     `json:"node_id" yaml:"node_id"`
	Version   string     `json:"version" yaml:"version"`
	Nodes     []nodeView `json:"nodes" yaml:"nodes"`
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
