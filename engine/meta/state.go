package meta

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// NodeID is a node's id in the cluster; with the replica's incarnation
// (Partition.Incarnations), it makes the replica's id in a raft group. Ids
// start at 1 and are never reused.
type NodeID = uint64

// Node is one node of the cluster.
type Node struct {
	ID NodeID
	// Addr is host:port, where peers dial the node.
	Addr string
	// Token is the id of the join request that added the node.
	Token string
	// Identity is the URI SAN of the node's TLS certificate when it joined
	// (empty: it joined without TLS). Peers take a stream or a request as
	// this node's only from a certificate with this identity.
	Identity string
	// Down: the controller leader has not reached the node for the
	// dead-node timeout (SetNodeDown). Its replicas move to other nodes
	// (NextMove) and it does not vote in the controller.
	Down bool
	// Leaving: decommissioned (DecommissionNode). Like a down node its
	// replicas move away and it does not vote in the controller; once it
	// holds none, RemoveNode takes it out.
	Leaving bool
}

// gone: the node's replicas are to move away (down or leaving).
func (n Node) gone() bool { return n.Down || n.Leaving }

// TopicSpec is what a topic is declared with.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int32
	// RetentionAgeMs is how long records are kept (0: forever).
	RetentionAgeMs int64
	// RetentionBytes is how many bytes each partition keeps (0: unlimited).
	RetentionBytes int64
}

// Partition is one placed partition.
type Partition struct {
	// Group is the partition's raft group id (1 up; 0 is the controller).
	Group uint64
	// Replicas are the nodes holding it, ReplicationFactor distinct ones;
	// Replicas[0] is the preferred leader.
	Replicas []NodeID
	// Target is where a replica move takes the partition (nil: no move):
	// ReplicationFactor distinct nodes, Target[0] the preferred leader. The
	// group's leader changes the membership step by step and proposes
	// FinishMove, which makes Target the Replicas.
	Target []NodeID
	// Moved: the membership has changed since placement. A replica of a
	// partition never moved may bootstrap its group on an empty disk (every
	// first member writes the same first entries); any other joins it and
	// copies the leader's log.
	Moved bool
	// Pinned: an operator placed the partition (MoveReplicas with Pin).
	// NextMove's balancing leaves it where it is; its repairs still
	// replace a replica on a node that is down or leaving.
	Pinned bool
	// Incarnations: for each node a move gave a replica (MoveReplicas to a
	// node that did not hold or get one), that replica's incarnation,
	// unique in the cluster; a node not listed has incarnation 0 (the
	// replicas placed with the topic). Only nodes of Replicas and Target
	// are listed; nil when none is. A replica's raft id is its node id
	// with the incarnation in the high 32 bits (transport.ReplicaID): a
	// replica given to a node again is a new member of the group, so
	// nothing an earlier copy there acknowledged — a message of it still
	// in flight included — is taken for the new one's.
	Incarnations map[NodeID]uint32
}

// Incarnation is the incarnation of node n's replica (0: placed with the
// topic, or n holds none).
func (p Partition) Incarnation(n NodeID) uint32 { return p.Incarnations[n] }

// keepIncarnations drops the incarnations of nodes that neither hold nor
// get a replica any more.
func (p *Partition) keepIncarnations() {
	for n := range p.Incarnations {
		if !slices.Contains(p.Replicas, n) && !slices.Contains(p.Target, n) {
			delete(p.Incarnations, n)
		}
	}
	if len(p.Incarnations) == 0 {
		p.Incarnations = nil
	}
}

// Holders are the nodes that hold or are getting a replica: Replicas and
// Target together, Replicas first.
func (p Partition) Holders() []NodeID {
	out := slices.Clone(p.Replicas)
	for _, id := range p.Target {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Topic is one topic and, once placed, its partitions.
type Topic struct {
	Spec TopicSpec
	// Partitions has one entry per partition number once placed, and is nil
	// while the topic is pending: it was created when the cluster had fewer
	// nodes than its replication factor, and the AddNode that brings enough
	// places it.
	Partitions []Partition
}

// Pending reports whether the topic waits for enough nodes to be placed.
func (t Topic) Pending() bool { return t.Partitions == nil }

// Assignment is one partition replica a node holds.
type Assignment struct {
	Topic     string
	Partition int32
	Group     uint64
	Replicas  []NodeID
	Target    []NodeID
	Moved     bool
}

// State is the controller's state: what every node holds after applying the
// same committed commands. Its zero value is not usable: use NewState. A
// State is not safe for concurrent use; readers on other goroutines take a
// Clone.
type State struct {
	clusterID string
	nextNode  NodeID // the id the next new node gets
	nextGroup uint64 // the group the next placed partition gets
	nodes     []Node // by increasing id
	byToken   map[string]NodeID
	topics    map[string]*Topic // by name
	names     []string          // the topic names, sorted (byte order)
	byFold    map[string]string // lower-case name → name (unique ignoring case)
	total     int               // partitions of all topics, pending included
	lastInc   uint32            // the incarnation the last replica a move added got
	version   uint32            // the cluster version (0: 1, before the first FinalizeVersion)
}

// NewState returns the state of a cluster before its first command.
func NewState() *State {
	return &State{
		nextNode:  1,
		nextGroup: 1,
		byToken:   map[string]NodeID{},
		topics:    map[string]*Topic{},
		byFold:    map[string]string{},
	}
}

// ClusterID is the cluster's id, "" before the Init command.
func (s *State) ClusterID() string { return s.clusterID }

// NextNodeID is the id the next new node will get.
func (s *State) NextNodeID() NodeID { return s.nextNode }

// NextGroupID is the raft group id the next placed partition will get.
func (s *State) NextGroupID() uint64 { return s.nextGroup }

// Nodes returns the nodes, sorted by id.
func (s *State) Nodes() []Node { return slices.Clone(s.nodes) }

// Node returns the node with the given id.
func (s *State) Node(id NodeID) (Node, bool) {
	i, ok := s.nodeIndex(id)
	if !ok {
		return Node{}, false
	}
	return s.nodes[i], true
}

// WithoutTokens is a copy of s whose nodes' join tokens are replaced by
// placeholders ("node-<id>"): the state a member shows a node that is not
// one (Metadata), which must not learn the tokens that admit members again.
func (s *State) WithoutTokens() *State {
	c := s.Clone()
	clear(c.byToken)
	for i := range c.nodes {
		c.nodes[i].Token = "node-" + strconv.FormatUint(c.nodes[i].ID, 10)
		c.byToken[c.nodes[i].Token] = c.nodes[i].ID
	}
	return c
}

// NodeByToken returns the node a join request with this token added.
func (s *State) NodeByToken(token string) (Node, bool) {
	id, ok := s.byToken[token]
	if !ok {
		return Node{}, false
	}
	return s.Node(id)
}

// Topics returns copies of the topics, sorted by name.
func (s *State) Topics() []Topic {
	out := make([]Topic, 0, len(s.names))
	for _, name := range s.names {
		out = append(out, copyTopic(s.topics[name]))
	}
	return out
}

// Topic returns a copy of the named topic (exact name).
func (s *State) Topic(name string) (Topic, bool) {
	t, ok := s.topics[name]
	if !ok {
		return Topic{}, false
	}
	return copyTopic(t), true
}

// PartitionsOf returns the partition replicas a node holds or is getting
// (in Replicas or Target), sorted by group.
func (s *State) PartitionsOf(node NodeID) []Assignment {
	var out []Assignment
	for _, name := range s.names {
		for p, part := range s.topics[name].Partitions {
			if slices.Contains(part.Replicas, node) || slices.Contains(part.Target, node) {
				out = append(out, Assignment{Topic: name, Partition: int32(p), Group: part.Group, Replicas: slices.Clone(part.Replicas),
					Target: slices.Clone(part.Target), Moved: part.Moved})
			}
		}
	}
	slices.SortFunc(out, func(a, b Assignment) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// partitionOf finds the partition of a raft group.
func (s *State) partitionOf(group uint64) (*Topic, int, bool) {
	for _, name := range s.names {
		t := s.topics[name]
		for i := range t.Partitions {
			if t.Partitions[i].Group == group {
				return t, i, true
			}
		}
	}
	return nil, 0, false
}

// Holds reports whether a node holds or is getting a replica of any
// partition.
func (s *State) Holds(id NodeID) bool {
	for _, name := range s.names {
		for _, p := range s.topics[name].Partitions {
			if slices.Contains(p.Replicas, id) || slices.Contains(p.Target, id) {
				return true
			}
		}
	}
	return false
}

// Moving counts the partitions with a replica move under way.
func (s *State) Moving() int {
	n := 0
	for _, name := range s.names {
		for _, p := range s.topics[name].Partitions {
			if p.Target != nil {
				n++
			}
		}
	}
	return n
}

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := &State{
		clusterID: s.clusterID,
		nextNode:  s.nextNode,
		nextGroup: s.nextGroup,
		nodes:     slices.Clone(s.nodes),
		byToken:   make(map[string]NodeID, len(s.byToken)),
		topics:    make(map[string]*Topic, len(s.topics)),
		names:     slices.Clone(s.names),
		byFold:    make(map[string]string, len(s.byFold)),
		total:     s.total,
		lastInc:   s.lastInc,
		version:   s.version,
	}
	for k, v := range s.byToken {
		c.byToken[k] = v
	}
	for k, v := range s.topics {
		t := copyTopic(v)
		c.topics[k] = &t
	}
	for k, v := range s.byFold {
		c.byFold[k] = v
	}
	return c
}

func copyTopic(t *Topic) Topic {
	c := Topic{Spec: t.Spec}
	if t.Partitions != nil {
		c.Partitions = make([]Partition, len(t.Partitions))
		for i, p := range t.Partitions {
			c.Partitions[i] = Partition{Group: p.Group, Replicas: slices.Clone(p.Replicas), Target: slices.Clone(p.Target), Moved: p.Moved, Pinned: p.Pinned, Incarnations: maps.Clone(p.Incarnations)}
		}
	}
	return c
}

// addTopic inserts a new topic (its name checked unique by the caller).
func (s *State) addTopic(t *Topic) {
	name := t.Spec.Name
	i, _ := slices.BinarySearch(s.names, name)
	s.names = slices.Insert(s.names, i, name)
	s.topics[name] = t
	s.byFold[strings.ToLower(name)] = name
	s.total += int(t.Spec.Partitions)
}

// removeNode deletes a node (its id is never given again: nextNode stays).
func (s *State) removeNode(id NodeID) {
	i, ok := s.nodeIndex(id)
	if !ok {
		return
	}
	delete(s.byToken, s.nodes[i].Token)
	s.nodes = slices.Delete(s.nodes, i, i+1)
}

// addNode appends a new node with the next id.
func (s *State) addNode(a AddNode) NodeID {
	id := s.nextNode
	s.nextNode++
	s.nodes = append(s.nodes, Node{ID: id, Addr: a.Addr, Token: a.Token, Identity: a.Identity})
	s.byToken[a.Token] = id
	return id
}
