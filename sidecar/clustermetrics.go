package sidecar

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// clusterMetricsInterval is how often a node's partition and open-file
// budgets are copied into their metrics.
const clusterMetricsInterval = 2 * time.Second

// clusterMetrics has the engine's cluster status copied into the metrics
// when they are scraped (metrics.OnScrape): a thousand idle replicas cost
// nothing between scrapes. Counters advance by the change of the engine's
// totals since the previous scrape.
func clusterMetrics(eng engine.Backend, m *metrics.Metrics) {
	if _, ok := clusterStatus(eng); !ok {
		return
	}
	var prev engine.ClusterStatus
	m.Cluster.Refresh(func() { // OnScrape runs one refresh at a time
		st, ok := clusterStatus(eng)
		if !ok || !st.Ready {
			return
		}
		updateClusterMetrics(m, prev, st)
		prev = st
	})
}

func updateClusterMetrics(m *metrics.Metrics, prev, st engine.ClusterStatus) {
	m.ClusterNodes.WithLabelValues().Set(float64(len(st.Members)))
	down := 0
	for _, mb := range st.Members {
		if mb.Down {
			down++
		}
	}
	m.ClusterNodesDown.WithLabelValues().Set(float64(down))
	m.PartitionsMoving.WithLabelValues().Set(float64(st.PartitionsMoving))
	m.UnderReplicated.WithLabelValues().Set(float64(st.UnderReplicated))
	m.ClusterVersion.WithLabelValues().Set(float64(st.ClusterVersion))
	m.ClusterVersionAvailable.WithLabelValues().Set(float64(st.ClusterVersionAvailable))
	for _, mb := range prev.Members { // a removed node's series go
		if !slices.ContainsFunc(st.Members, func(x engine.ClusterMember) bool { return x.ID == mb.ID }) {
			m.ClusterNodeVersion.DeletePartialMatch(prometheus.Labels{"node": strconv.FormatUint(mb.ID, 10)})
		}
	}
	for _, mb := range st.Members {
		if mb.ClusterVersionMax == 0 {
			continue // not heard from yet
		}
		id := strconv.FormatUint(mb.ID, 10)
		m.ClusterNodeVersion.WithLabelValues(id, "min").Set(float64(mb.ClusterVersionMin))
		m.ClusterNodeVersion.WithLabelValues(id, "max").Set(float64(mb.ClusterVersionMax))
	}
	for _, mb := range st.Members {
		if mb.ID == st.NodeID || st.NodeID == 0 { // a client node keeps no raft streams
			continue
		}
		up := 0.0
		if mb.Connected {
			up = 1
		}
		m.ClusterPeerUp.WithLabelValues(strconv.FormatUint(mb.ID, 10)).Set(up)
	}
	// A replica moved away from this node is no longer reported: its
	// series go (a stale 1 would count a second leader).
	type replicaKey struct {
		topic     string
		partition int32
	}
	held := make(map[replicaKey]bool, len(st.Replicas))
	for _, r := range st.Replicas {
		held[replicaKey{r.Topic, r.Partition}] = true
	}
	before := make(map[replicaKey]engine.ReplicaStatus, len(prev.Replicas))
	for _, r := range prev.Replicas {
		k := replicaKey{r.Topic, r.Partition}
		before[k] = r
		if !held[k] {
			p := strconv.Itoa(int(r.Partition))
			m.PartitionLeader.DeleteLabelValues(r.Topic, p)
			m.ReplicaLogRecords.DeleteLabelValues(r.Topic, p)
			m.ReplicaStopped.DeleteLabelValues(r.Topic, p)
		}
	}
	for _, r := range st.Replicas {
		if b, ok := before[replicaKey{r.Topic, r.Partition}]; ok && b.IsLeader == r.IsLeader && b.Err == r.Err &&
			b.CommittedEnd == r.CommittedEnd && b.StartOffset == r.StartOffset {
			continue // unchanged: an idle node's thousand replicas cost no label lookups
		}
		p := strconv.Itoa(int(r.Partition))
		lead, stopped := 0.0, 0.0
		if r.IsLeader {
			lead = 1
		}
		if r.Err != "" {
			stopped = 1
		}
		m.PartitionLeader.WithLabelValues(r.Topic, p).Set(lead)
		m.ReplicaLogRecords.WithLabelValues(r.Topic, p).Set(float64(max(0, r.CommittedEnd-r.StartOffset)))
		m.ReplicaStopped.WithLabelValues(r.Topic, p).Set(stopped)
	}
	for outcome, v := range st.Proposals {
		m.RaftProposals.WithLabelValues(outcome).Add(float64(v - prev.Proposals[outcome]))
	}
	m.RaftMessages.WithLabelValues("sent").Add(float64(st.MessagesSent - prev.MessagesSent))
	m.RaftMessages.WithLabelValues("received").Add(float64(st.MessagesReceived - prev.MessagesReceived))
	for reason, v := range st.Dropped {
		m.RaftMessagesDropped.WithLabelValues(reason).Add(float64(v - prev.Dropped[reason]))
	}
	m.RaftMessagesDropped.WithLabelValues("inbox_full").Add(float64(st.InboxDropped - prev.InboxDropped))
	m.RaftMessagesDropped.WithLabelValues("malformed").Add(float64(st.Malformed - prev.Malformed))
	m.MoveCopiesDelayed.WithLabelValues().Add(float64(st.MoveCopiesDelayed - prev.MoveCopiesDelayed))
	m.ProducersEvicted.WithLabelValues().Add(float64(st.ProducersEvicted - prev.ProducersEvicted))
	m.MoveCopyWaiting.WithLabelValues().Set(float64(st.MoveCopyWaitingBytes))
	for machine, v := range st.CommandsSkipped {
		m.CommandsSkipped.WithLabelValues(machine).Add(float64(v - prev.CommandsSkipped[machine]))
	}
	for reason, v := range st.PeerRefusals {
		m.PeerRefusals.WithLabelValues(reason).Add(float64(v - prev.PeerRefusals[reason]))
	}
	m.ConfChangesSkipped.WithLabelValues().Add(float64(st.ConfChangesSkipped - prev.ConfChangesSkipped))
	for reason, n := range st.StoppedNow {
		m.ReplicasStopped.WithLabelValues(reason).Set(float64(n))
	}
	m.ReplicasReopened.WithLabelValues().Add(float64(st.ReplicasReopened - prev.ReplicasReopened))
	m.GroupsQuiesced.WithLabelValues().Set(float64(st.GroupsQuiesced))
	m.PeersDeclaredDead.WithLabelValues().Add(float64(st.PeersDeclaredDead - prev.PeersDeclaredDead))
}
