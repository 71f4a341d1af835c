package meta

import (
	"fmt"
	"slices"
	"strings"
)

// check verifies every invariant a state reached through Apply holds.
// DecodeState runs it on what it reads; the model test after every command.
func (s *State) check() error {
	if s.nextNode < 1 || s.nextGroup < 1 {
		return fmt.Errorf("next node id %d and next group id %d must be at least 1", s.nextNode, s.nextGroup)
	}
	if s.clusterID == "" {
		if len(s.nodes) > 0 || len(s.names) > 0 || s.nextNode != 1 || s.nextGroup != 1 {
			return fmt.Errorf("no cluster id, yet nodes or topics")
		}
		return nil
	}
	if !validClusterID(s.clusterID) {
		return invalid("cluster id", s.clusterID, allowedClusterID)
	}
	if len(s.nodes) > MaxNodes {
		return fmt.Errorf("%d nodes, more than %d (MaxNodes)", len(s.nodes), MaxNodes)
	}
	if len(s.byToken) != len(s.nodes) {
		return fmt.Errorf("%d nodes but %d distinct join tokens", len(s.nodes), len(s.byToken))
	}
	for i, n := range s.nodes {
		if n.ID < 1 || n.ID >= s.nextNode || i > 0 && n.ID <= s.nodes[i-1].ID {
			return fmt.Errorf("node id %d out of order or not below the next node id %d", n.ID, s.nextNode)
		}
		if !validAddr(n.Addr) {
			return invalid(fmt.Sprintf("node %d address", n.ID), n.Addr, allowedAddr)
		}
		if !validToken(n.Token) {
			return invalid(fmt.Sprintf("node %d join token", n.ID), n.Token, allowedToken)
		}
		if s.byToken[n.Token] != n.ID {
			return fmt.Errorf("node %d's join token is another node's", n.ID)
		}
		if !validIdentity(n.Identity) {
			return invalid(fmt.Sprintf("node %d identity", n.ID), n.Identity, allowedIdentity)
		}
	}
	if len(s.names) > MaxTopics {
		return fmt.Errorf("%d topics, more than %d (MaxTopics)", len(s.names), MaxTopics)
	}
	if len(s.byFold) != len(s.names) || len(s.topics) != len(s.names) {
		return fmt.Errorf("topic names not unique ignoring case")
	}
	groups := map[uint64]bool{}
	total := 0
	for i, name := range s.names {
		if i > 0 && name <= s.names[i-1] {
			return fmt.Errorf("topic %q out of order", name)
		}
		t := s.topics[name]
		if t.Spec.Name != name || s.byFold[strings.ToLower(name)] != name {
			return fmt.Errorf("topic %q indexed under another name", name)
		}
		if err := validateSpec(t.Spec); err != nil {
			return err
		}
		total += int(t.Spec.Partitions)
		if t.Pending() {
			if int(t.Spec.ReplicationFactor) <= len(s.nodes) {
				return fmt.Errorf("topic %q is pending with %d nodes for replication factor %d", name, len(s.nodes), t.Spec.ReplicationFactor)
			}
			continue
		}
		if len(t.Partitions) != int(t.Spec.Partitions) {
			return fmt.Errorf("topic %q has %d partitions placed of %d", name, len(t.Partitions), t.Spec.Partitions)
		}
		for p, part := range t.Partitions {
			if part.Group < 1 || part.Group >= s.nextGroup || groups[part.Group] {
				return fmt.Errorf("topic %q partition %d: group %d is 0, not below the next group id %d, or another partition's", name, p, part.Group, s.nextGroup)
			}
			groups[part.Group] = true
			// Fewer than the replication factor: a damaged replica was
			// dropped (DropDamaged) and the new copy is not placed yet.
			if len(part.Replicas) < 1 || len(part.Replicas) > int(t.Spec.ReplicationFactor) {
				return fmt.Errorf("topic %q partition %d has %d replicas, not 1 to %d", name, p, len(part.Replicas), t.Spec.ReplicationFactor)
			}
			// A target equal to the replicas is a move back (a move given up).
			if part.Target != nil && (len(part.Target) < 1 || len(part.Target) > int(t.Spec.ReplicationFactor) || !part.Moved) {
				return fmt.Errorf("topic %q partition %d: move target %v is not 1 to %d replicas, or the partition is not marked moved", name, p, part.Target, t.Spec.ReplicationFactor)
			}
			for n, inc := range part.Incarnations {
				if inc == 0 || inc > s.lastInc || !slices.Contains(part.Holders(), n) {
					return fmt.Errorf("topic %q partition %d: node %d has incarnation %d: 0, above the last given (%d), or the node neither holds nor gets a replica", name, p, n, inc, s.lastInc)
				}
			}
			for _, list := range [][]NodeID{part.Replicas, part.Target} {
				for j, r := range list {
					if _, ok := s.Node(r); !ok {
						return fmt.Errorf("topic %q partition %d: replica %d is not a node", name, p, r)
					}
					if slices.Contains(list[:j], r) {
						return fmt.Errorf("topic %q partition %d: node %d twice", name, p, r)
					}
				}
			}
		}
	}
	if total != s.total || total > MaxTotalPartitions {
		return fmt.Errorf("%d partitions in all (counted %d), limit %d (MaxTotalPartitions)", total, s.total, MaxTotalPartitions)
	}
	return nil
}
