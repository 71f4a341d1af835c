package engine

import (
	"fmt"
	"time"
)

// Quarantine describes a quarantined partition: where its damage is and how
// far it still serves.
type Quarantine struct {
	Topic     string
	Partition int32
	File      string // the damaged file
	Position  int64  // byte position of the damage in File
	Offset    int64  // the partition serves offsets below this one, none from it on
	Reason    string // what the check found
}

func (q Quarantine) String() string {
	return fmt.Sprintf("%s/%d quarantined: corruption in %s at byte %d (serves offsets below %d): %s",
		q.Topic, q.Partition, q.File, q.Position, q.Offset, q.Reason)
}

// ClusterStatus is what a cluster node reports to operators (metrics, the
// admin API): who it is, the members, and its view of every partition it
// holds a replica of. The counters are totals since the node started.
type ClusterStatus struct {
	ClusterID        string
	NodeID           uint64
	ControllerLeader uint64 // 0 while unknown
	Ready            bool   // a member with a known state
	Members          []ClusterMember
	Replicas         []ReplicaStatus // sorted by topic and partition
	// PartitionsMoving counts the cluster's partitions with a replica move
	// under way; UnderReplicated those with a replica on a node marked
	// down that no move replaces (no node to put it on).
	PartitionsMoving, UnderReplicated int
	// ClusterVersion is the behaviour every member follows (1 until the
	// first finalization); ClusterVersionAvailable the highest version
	// every member speaks now: above ClusterVersion, a finalization is
	// pending (docs/upgrading.md).
	ClusterVersion, ClusterVersionAvailable uint32

	Proposals       map[string]uint64 // by outcome: ok, lost, unknown, not_leader, refused
	InboxDropped    uint64            // raft messages dropped: a group's inbox was full
	ReplicasStopped uint64            // replicas stopped by a storage error
	// ReplicasReopened counts the stopped replicas (a full disk) opened
	// again from disk by this node (cluster.ReopenStoppedEvery).
	ReplicasReopened uint64
	// StoppedNow counts this node's replicas stopped now (the controller's
	// included), by ReplicaStatus.StopReason: disk_full, damaged, other.
	StoppedNow map[string]int
	// MoveCopiesDelayed counts the appends to new replicas of moving
	// partitions that waited for MoveBytesPerSecond; MoveCopyWaitingBytes
	// is what waits now.
	MoveCopiesDelayed    uint64
	MoveCopyWaitingBytes int
	MessagesSent         uint64            // raft messages sent to peers
	MessagesReceived     uint64            // raft messages received from peers
	Dropped              map[string]uint64 // raft messages not sent, by reason: queue_full, too_large, no_peer, unsent
	Malformed            uint64            // received messages refused as malformed
	GroupsQuiesced       int               // raft groups quiesced now (cluster.quiesce)
	PeersDeclaredDead    uint64            // times node-level liveness declared a peer's node dead
	// CommandsSkipped counts the records of a replicated state machine's
	// log this node skipped because they do not decode or validate (every
	// node skips them alike), by machine: controller, coordinator.
	CommandsSkipped map[string]uint64
	// PeerRefusals counts what this node refused of a peer, by reason:
	// handshake (a raft stream's Hello of another cluster or protocol, or
	// not for this node), identity (a raft stream whose certificate is not
	// the claimed node's, or claims a node id no member has), produce (a
	// forwarded write into group 0 or an internal topic that is no valid
	// command or not a member's), join (a join without the secret, or with
	// another identity's token).
	PeerRefusals map[string]uint64
	// ConfChangesSkipped counts the committed raft configuration changes
	// skipped because raft refuses to apply them (every replica alike).
	ConfChangesSkipped uint64
	// ProducersEvicted counts the producers forgotten by this node's
	// partitions' producer tables, the least recently used first, beyond
	// 4,096 per partition: a batch of an evicted producer resent later is
	// no longer recognised (docs/replication.md, "Producer deduplication").
	ProducersEvicted uint64
}

// ClusterMember is one node of the cluster.
type ClusterMember struct {
	ID        uint64
	Addr      string
	Connected bool // this node's streams to it are up (always true for itself)
	Down      bool // marked down: unreachable past the dead-node timeout
	Leaving   bool // decommissioned: its replicas move away, then it is removed
	// Release is the Spool release the node runs and ClusterVersionMin and
	// ClusterVersionMax the cluster versions it speaks, as it last said in
	// the peer handshake (zero while unknown; a 0.1.0 node says no release,
	// and speaks 1..1).
	Release                              string
	ClusterVersionMin, ClusterVersionMax uint32
}

// ReplicaStatus is this node's replica of one partition.
type ReplicaStatus struct {
	Topic        string
	Partition    int32
	Group        uint64
	Replicas     []uint64
	Target       []uint64 // where a replica move under way takes it (nil: none)
	Leader       uint64   // 0 while unknown
	IsLeader     bool
	Term         uint64
	CommittedEnd int64
	StartOffset  int64  // the first record this replica's log holds
	Err          string // why the replica stopped, empty while it runs
	// StopReason classifies Err: disk_full (reopened by itself once space
	// returns), damaged (stays stopped until repaired), other (until the
	// node restarts); empty while it runs.
	StopReason string
}

// Why a replica of a cluster node stopped (ReplicaStatus.StopReason, the
// reason label of spool_replicas_stopped).
const (
	// StopDiskFull: a write found no space (ENOSPC). The node opens the
	// replica again from disk every cluster reopen interval until it runs:
	// once space returns it catches up from the leader by itself.
	StopDiskFull = "disk_full"
	// StopDamaged: its log failed a check (corruption, quarantine). It is
	// never reopened: it must not vote or lead again; the node has a new
	// copy built from the other replicas (docs/operations.md).
	StopDamaged = "damaged"
	// StopOther: any other storage error (EIO, a failed fsync). It stays
	// stopped until the node restarts: the disk may be failing.
	StopOther = "other"
)

// ReplicaMove is what an operator's replica move does (or, checked with
// PlanMove, would do).
type ReplicaMove struct {
	Topic     string
	Partition int32
	// Group is the partition's raft group.
	Group uint64
	// From are the partition's replicas before the move (the first is the
	// preferred leader); To where the move takes them.
	From, To []uint64
	// PreviousTarget is the target of a move under way that this one
	// redirects (nil: none).
	PreviousTarget []uint64
}

// LeaveReport says how far Leave got.
type LeaveReport struct {
	// Left: this node holds no partition replica any more and does not
	// vote in the controller; the controller removes it from the cluster
	// (it may stop at once: nothing needs it).
	Left bool
	// Held lists the partitions ("topic/partition") whose replica here had
	// not moved to another node yet when Leave returned: each keeps one
	// replica fewer than its replication factor once this node stops, until
	// the controller re-creates it elsewhere (the node is leaving: it is
	// replaced at once when the controller next plans, not after
	// cluster.dead_node_timeout).
	Held []string
	// Led is how many of Held this node still led.
	Led int
	// Took is how long Leave ran.
	Took time.Duration
}
