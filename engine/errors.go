package engine

import (
	"errors"
	"fmt"
)

var (
	// ErrUnknownTopic: the topic is not declared. Declare it in the sidecar's config.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrUnknownPartition: the partition number is outside the topic's partitions.
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrOutcomeUnknown: an append may or may not have been stored (for example
	// the leader changed before it answered). Retrying with the same message ids
	// is safe: consumers dedupe by id.
	ErrOutcomeUnknown = errors.New("outcome of append unknown")
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("engine closed")
	// ErrUnknownNode: a node id the cluster does not have.
	ErrUnknownNode = errors.New("unknown node")
	// ErrRemoved: this node's identity names a node the cluster removed
	// (it was decommissioned, or left): it cannot take part with it again.
	ErrRemoved = errors.New("node removed from the cluster")
	// ErrDecommissionRefused: the node cannot leave (the others would be
	// too few for a topic's replication factor, or this node is not a
	// cluster member to ask).
	ErrDecommissionRefused = errors.New("decommission refused")
	// ErrMoveRefused: an operator's replica move the cluster cannot make
	// now (a node named is down or leaving, the topic waits for nodes, or
	// this node is not a cluster member to ask).
	ErrMoveRefused = errors.New("replica move refused")
	// ErrInvalidMove: an operator's replica move that names the wrong
	// number of nodes (not the replication factor) or a node twice.
	ErrInvalidMove = errors.New("invalid replica move")
	// ErrClusterVersion: a cluster version that cannot be had: a
	// finalization some node does not speak (or nothing to finalize), or
	// a node whose release does not speak the cluster's version
	// (docs/upgrading.md).
	ErrClusterVersion = errors.New("cluster version")
	// ErrTopicNameCase: a topic whose name differs from an existing one's
	// only in case. Names become directory names, and case-insensitive
	// file systems (macOS) would give both the same directory.
	ErrTopicNameCase = errors.New("topic names that differ only in case")
	// ErrPartitionBudget: creating the topic would take the node past its
	// partition budget (each partition holds open files; a node out of
	// file descriptors stops accepting on every port, probes included).
	ErrPartitionBudget = errors.New("node partition budget reached")
	// ErrFileBudget: creating the topic would take the files the node's
	// log keeps open past its budget (a node out of file descriptors
	// stops accepting on every port, probes included).
	ErrFileBudget = errors.New("node open-file budget reached")
)

// NotLeaderError says that another node leads the partition.
type NotLeaderError struct {
	Topic     string
	Partition int32
	Leader    string // node id of the leader, empty when unknown (election running)
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return fmt.Sprintf("%s/%d: no leader known (election in progress): retry shortly", e.Topic, e.Partition)
	}
	return fmt.Sprintf("%s/%d: led by node %s, not this node", e.Topic, e.Partition, e.Leader)
}

// TopicConflictError says that a declared topic disagrees with what is stored.
type TopicConflictError struct {
	Topic            string
	Stored, Declared int32
}

func (e *TopicConflictError) Error() string {
	return fmt.Sprintf("topic %q has %d partitions on disk but the config declares %d: partition counts can only grow (raise it to at least %d)",
		e.Topic, e.Stored, e.Declared, e.Stored)
}
