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
			"spool cluster status -o json"),
	}
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
				v.Nodes = append(v.Nodes, nodeView{ID: n.GetId(), Address: n.GetAddress(), Reachable: n.GetAlive(), Down: n.GetDown()})
			}
			return a.render(v, func(w io.Writer) {
				fmt.Fprintf(w, "cluster: %s\nnode:    %s\nversion: %s\n", v.ClusterID, v.NodeID, v.Version)
				fmt.Fprintf(w, "partitions moving: %d, under-replicated: %d\n\n", v.PartitionsMoving, v.UnderReplicated)
				tw := newTable(w)
				row(tw, "NODE", "ADDRESS", "REACHABLE", "DOWN")
				for _, n := range v.Nodes {
					row(tw, n.ID, n.Address, n.Reachable, n.Down)
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
}
